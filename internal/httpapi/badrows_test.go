package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
)

// TestOneBadRowNeverFailsAReadOrACancel: submissions whose headers hold JSON escapes, and a
// submission, an execution and a block whose stored JSON encoding/json cannot read (nested deeper
// than 10 000, written with SQL), leave every API route and dashboard page that shows them
// answering 200, the bad rows with their error; a cancel answers 200 (issue 22: the list, the task
// page and the cancel answered 500).
func TestOneBadRowNeverFailsAReadOrACancel(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, nil)
	escaped := b.submit(t, "export", `{"header": {"note": "say \"hi\"", "path": "C:\\dir", "lines": "a\nb"}}`)
	deep := b.submit(t, "export", `{"header": 1}`)
	e := b.start(t, "export")
	blocks, err := e.ObjectBlocks(b.ctx, []any{1}, nil)
	require.NoError(t, err)
	const deepJSON = `(repeat('[', 10001) || repeat(']', 10001))::jsonb`
	for q, id := range map[string]int64{
		`UPDATE taskling.submission SET header = ` + deepJSON + ` WHERE id = $1`:     deep,
		`UPDATE taskling.task_execution SET header = ` + deepJSON + ` WHERE id = $1`: e.ID(),
		`UPDATE taskling.block SET value = ` + deepJSON + ` WHERE id = $1`:           blocks[0].ID,
	} {
		_, err := b.pool.Exec(b.ctx, q, id)
		require.NoError(t, err)
	}

	for _, path := range []string{
		"/api/v1/tasks/app/export/submissions", "/api/v1/submissions/" + itoa(deep), "/api/v1/submissions/" + itoa(escaped),
		"/api/v1/executions/" + itoa(e.ID()), "/api/v1/tasks/app/export/executions",
		"/api/v1/blocks/" + itoa(blocks[0].ID), "/api/v1/executions/" + itoa(e.ID()) + "/blocks", "/api/v1/tasks/app/export/blocks",
		"/tasks/app/export", "/submissions/" + itoa(deep), "/submissions/" + itoa(escaped), "/executions/" + itoa(e.ID()),
		"/blocks/" + itoa(blocks[0].ID),
	} {
		status, body := b.do(t, "GET", path, "", "")
		require.Equal(t, http.StatusOK, status, "%s: %.300s", path, body)
		if strings.HasPrefix(path, "/api/") {
			require.True(t, json.Valid([]byte(body)), path)
		}
		if !strings.Contains(path, itoa(escaped)) && path != "/tasks/app/export" {
			require.Contains(t, body, "cannot be read", path)
			require.Contains(t, body, "exceeded max depth", path)
		}
	}
	var page httpapi.SubmissionPage
	b.getJSON(t, "/api/v1/tasks/app/export/submissions", &page)
	require.Len(t, page.Submissions, 2)
	require.JSONEq(t, `{"note": "say \"hi\"", "path": "C:\\dir", "lines": "a\nb"}`, string(page.Submissions[1].Header))
	require.Nil(t, page.Submissions[0].Header)
	require.Contains(t, page.Submissions[0].HeaderError, "exceeded max depth")

	for _, id := range []int64{escaped, deep} {
		status, body := b.do(t, "POST", "/api/v1/submissions/"+itoa(id)+"/cancel", token, "")
		require.Equal(t, http.StatusOK, status, body)
	}
}
