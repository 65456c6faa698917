package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

func TestBlocksOfAnExecutionAndATaskAndForcingOneThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setupWork(t, nil)
	e, err := b.client.StartExecution(b.ctx, "app", "import", nil)
	require.NoError(t, err)
	blocks, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 20, MaxSize: 10}, nil)
	require.NoError(t, err)
	require.NoError(t, blocks[0].Complete(b.ctx, 10))
	require.NoError(t, blocks[1].Fail(b.ctx, "bad file"))
	require.NoError(t, e.Complete(b.ctx))

	var list httpapi.BlockList
	b.getJSON(t, "/api/v1/executions/"+itoa(e.ID())+"/blocks", &list)
	require.Len(t, list.Blocks, 2)
	require.Equal(t, taskling.BlockCompleted, list.Blocks[0].Status)
	require.Equal(t, "numeric", list.Blocks[0].Kind)
	require.EqualValues(t, 1, *list.Blocks[0].FromNumber)
	require.Equal(t, taskling.BlockFailed, list.Blocks[1].Status)
	require.Equal(t, "bad file", list.Blocks[1].Message)

	b.getJSON(t, "/api/v1/tasks/app/import/blocks?at_retry_limit=true", &list)
	require.Len(t, list.Blocks, 1, "the failed block has had its one attempt")
	status, out := b.do(t, "GET", "/api/v1/tasks/app/import/blocks?limit=x", token, "")
	require.Equal(t, http.StatusBadRequest, status, out)
	require.Contains(t, out, `"limit"`)

	status, out = b.do(t, "POST", "/api/v1/blocks/"+itoa(blocks[0].ID)+"/force", token, `{"forced_by": "alice"}`)
	require.Equal(t, http.StatusOK, status, out)
	var d httpapi.BlockDetail
	require.NoError(t, json.Unmarshal([]byte(out), &d))
	require.True(t, d.ForcePending)
	require.Len(t, d.AttemptList, 1)
	require.EqualValues(t, 10, *d.AttemptList[0].ItemsDone)

	status, _ = b.do(t, "POST", "/api/v1/blocks/999999/force", token, "")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = b.do(t, "GET", "/api/v1/executions/999999/blocks", token, "")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = b.do(t, "POST", "/api/v1/blocks/"+itoa(blocks[0].ID)+"/force", "", "")
	require.Equal(t, http.StatusUnauthorized, status, "forcing needs the token")

	e, err = b.client.StartExecution(b.ctx, "app", "import", nil)
	require.NoError(t, err)
	got, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 21, To: 21, MaxSize: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, blocks[0].ID, got[0].ID)
	require.True(t, got[0].Forced)
	require.NoError(t, e.Complete(b.ctx))
}

// TestHostsThatDeclareDifferentLimitsAreShown: a second host with a different declared limit is
// reported by the task's JSON and page until the window passes.
func TestHostsThatDeclareDifferentLimitsAreShown(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, nil)
	b.start(t, "export")
	other, err := taskling.NewClient(b.pool, &taskling.Config{HostName: "other-host", Defaults: taskling.TaskSettings{ConcurrencyLimit: 3}})
	require.NoError(t, err)
	t.Cleanup(other.Close)
	e, err := other.StartExecution(b.ctx, "app", "export", nil)
	require.NoError(t, err)
	require.NoError(t, e.Complete(b.ctx))

	var task httpapi.Task
	require.Eventually(t, func() bool {
		b.getJSON(t, "/api/v1/tasks/app/export", &task)
		return task.Disagreement != nil
	}, 5*time.Second, 10*time.Millisecond, "recorded in the background")
	require.Equal(t, "test-host", task.Disagreement.OtherHost)
	require.Equal(t, 2, task.Disagreement.OtherLimit)
	require.Equal(t, "other-host", *task.DeclaredBy)
	status, page := b.do(t, "GET", "/tasks/app/export", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "hosts disagree: test-host declared 2")

	// Outside the window it is no longer reported.
	_, err = b.pool.Exec(b.ctx, `UPDATE taskling.declaration_dispute SET at = at - interval '11 minutes'`)
	require.NoError(t, err)
	b.getJSON(t, "/api/v1/tasks/app/export", &task)
	require.Nil(t, task.Disagreement)
}
