package main

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

var anyExecID = regexp.MustCompile(`#\d+`)

// submitID runs `taskling submit` and returns the id it prints.
func submitID(t *testing.T, url string, args ...string) int64 {
	t.Helper()
	out := ok(t, url, append([]string{"submit", "billing/report"}, args...)...)
	id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	require.NoError(t, err, "submit prints the id alone: %q", out)
	return id
}

func waitFor(t *testing.T, c *taskling.Client, id int64, ok func(taskling.Submission) bool, what string) {
	t.Helper()
	require.Eventually(t, func() bool {
		s, err := c.Submission(context.Background(), id)
		require.NoError(t, err)
		return ok(s)
	}, 15*time.Second, 20*time.Millisecond, "submission %d: %s", id, what)
}

func statusIs(want taskling.SubmissionStatus) func(taskling.Submission) bool {
	return func(s taskling.Submission) bool { return s.Status == want }
}

// TestSubmitListShowAndCancelSubmissions submits through the CLI, lets a worker (client.Work)
// complete one, fail one for good and run a third, and follows them with submissions list and
// show; then it cancels a waiting one and the running one.
func TestSubmitListShowAndCancelSubmissions(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx, stopWork := context.WithCancel(context.Background())
	worked := make(chan error, 1)
	go func() {
		worked <- f.client.Work(ctx, "billing", "report", func(ctx context.Context, e *taskling.Execution) error {
			var h struct {
				Fail, Hold bool
			}
			if err := e.Header(&h); err != nil {
				return err
			}
			switch {
			case h.Fail:
				return errors.New("disk full")
			case h.Hold:
				if err := e.SetProgress(ctx, 40, 100); err != nil {
					return err
				}
				<-ctx.Done() // until cancelled
				return context.Cause(ctx)
			}
			return e.SetProgress(ctx, 100, 100)
		}, &taskling.WorkOptions{DrainTimeout: time.Second})
	}()
	t.Cleanup(func() {
		stopWork()
		require.NoError(t, <-worked)
	})

	done := submitID(t, f.url, "--header", `{"day": "2026-11-21"}`, "--reference", "2026-11-21", "--priority", "5", "--max-attempts", "2")
	require.Equal(t, done, submitID(t, f.url, "--reference", "2026-11-21"), "the same reference: the same submission")
	var created httpapi.SubmitResponse
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "submit", "billing/report", "-o", "json", "--reference", "bad-day", "--max-attempts", "1", "--header", `{"Fail": true}`)), &created))
	dead := created.ID
	waitFor(t, f.client, done, statusIs(taskling.SubmissionCompleted), "completed")
	waitFor(t, f.client, dead, statusIs(taskling.SubmissionDead), "dead")
	running := submitID(t, f.url, "--reference", "2026-11-22", "--header", `{"Hold": true}`)
	waitFor(t, f.client, running, func(s taskling.Submission) bool { return s.ItemsDone == 40 }, "running at 40/100")
	later := submitID(t, f.url, "--reference", "2026-11-23")
	sooner := submitID(t, f.url, "--reference", "2026-11-24", "--priority", "3")

	golden(t, "submissions_list", ok(t, f.url, "submissions", "list", "billing/report"))
	golden(t, "submissions_list_waiting", ok(t, f.url, "submissions", "list", "billing/report", "--status", "waiting"))
	// Which attempt got the lower execution id varies, and so may their widths.
	golden(t, "submissions_show_completed", anyExecID.ReplaceAllString(ok(t, f.url, "submissions", "show", itoa(done)), "#1"))
	golden(t, "submissions_show_dead", anyExecID.ReplaceAllString(ok(t, f.url, "submissions", "show", itoa(dead)), "#1"))
	require.Contains(t, ok(t, f.url, "submissions", "show", itoa(sooner)), "Position:   1\n")

	var page httpapi.SubmissionPage
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "submissions", "list", "billing/report", "--limit", "2", "-o", "json")), &page))
	require.Len(t, page.Submissions, 2)
	require.Equal(t, sooner, page.Submissions[0].ID)
	require.Equal(t, later, *page.NextBefore)
	var detail httpapi.SubmissionDetail
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "submissions", "show", itoa(running), "-o", "json")), &detail))
	require.Equal(t, taskling.SubmissionInProgress, detail.Status)
	require.Equal(t, int64(40), detail.ItemsDone)
	require.Equal(t, []int64{detail.ExecutionID}, detail.AttemptsExecutions)

	// A waiting one is cancelled at once and never runs; its place goes to the next.
	golden(t, "submissions_cancel", ok(t, f.url, "submissions", "cancel", itoa(sooner), "--reason", "not needed"))
	require.Contains(t, ok(t, f.url, "submissions", "show", itoa(later)), "Position:   1\n")
	// The running one: its run's context is cancelled, and it ends cancelled.
	out := ok(t, f.url, "submissions", "cancel", itoa(running), "--reason", "wrong day")
	require.Regexp(t, `Status:     (in_progress \(cancel requested\)|cancelled)\n`, out)
	require.Contains(t, out, "Cancel:     wrong day\n")
	waitFor(t, f.client, running, statusIs(taskling.SubmissionCancelled), "cancelled")
	waitFor(t, f.client, later, statusIs(taskling.SubmissionCompleted), "completed after the cancelled one")

	code, out, errOut := cli(t, f.url, "submissions", "cancel", itoa(sooner))
	require.Equal(t, exitFailure, code, errOut)
	require.Empty(t, out)
	require.Contains(t, errOut, "already finished")
	require.Contains(t, errOut, "is cancelled")
}

func TestSubmissionCommandsRefuseBadArguments(t *testing.T) {
	t.Parallel()
	f := setup(t)
	id, err := f.client.Submit(context.Background(), "billing", "report", nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"submit"}, exitUsage, "takes one argument, APP/TASK"},
		{[]string{"submit", "report"}, exitUsage, "want APP/TASK"},
		{[]string{"submit", "billing/report", "--header", "{bad"}, exitUsage, `--header is not JSON: "{bad"`},
		{[]string{"submit", "billing/report", "--header", ""}, exitUsage, "--header is not JSON"},
		{[]string{"submit", "billing/report", "--header", `"` + strings.Repeat("h", taskling.MaxHeaderLength) + `"`}, exitUsage, "--header is 65538 bytes of JSON"},
		{[]string{"submit", "billing/report", "--max-attempts", "0"}, exitUsage, "--max-attempts is 0; want 1 to 1000"},
		{[]string{"submit", "billing/report", "--max-attempts", "many"}, exitUsage, "--max-attempts"},
		{[]string{"submit", "billing/report", "--priority", "4294967296"}, exitUsage, "--priority is 4294967296"},
		{[]string{"submit", "billing/report", "--reference", "a\x00b"}, exitUsage, "--reference contains a NUL character"},
		{[]string{"submit", "billing/report", "--reference", strings.Repeat("r", taskling.MaxReferenceValueLength+1)}, exitUsage, "--reference is 2001 bytes"},
		{[]string{"submissions"}, exitUsage, "needs a subcommand"},
		{[]string{"submissions", "list"}, exitUsage, "takes one argument, APP/TASK"},
		{[]string{"submissions", "list", "billing/report", "--status", "running"}, exitUsage, `--status is "running"; want waiting, in_progress`},
		{[]string{"submissions", "list", "billing/report", "--limit", "0"}, exitUsage, "--limit is 0; want 1 to 1000"},
		{[]string{"submissions", "show", "abc"}, exitUsage, `submission ID "abc" is not a positive integer`},
		{[]string{"submissions", "show", "999999"}, exitNotFound, "submission 999999: not found"},
		{[]string{"submissions", "cancel", "999999"}, exitNotFound, "not found"},
		{[]string{"submissions", "cancel", "0"}, exitUsage, "not a positive integer"},
		{[]string{"submissions", "cancel", itoa(id), "--reason", strings.Repeat("r", taskling.MaxCancelReasonLength+1)}, exitUsage, "--reason is 2001 bytes"},
	} {
		code, out, errOut := cli(t, f.url, tc.args...)
		require.Equal(t, tc.code, code, "%.120v: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.stderr, "%.120v", tc.args)
		require.Empty(t, out, "%.120v", tc.args)
		require.Regexp(t, `^taskling: [^\n]*\n(Run 'taskling --help' for usage.\n)?$`, errOut, "one line, then the hint on usage errors")
	}
	subs, err := f.client.Submissions(context.Background(), "billing", "report", nil)
	require.NoError(t, err)
	require.Len(t, subs, 1, "no refused submit stored anything")
	require.Equal(t, taskling.SubmissionWaiting, subs[0].Status, "no refused cancel cancelled it")
	require.Equal(t, "No submissions.\n", ok(t, f.url, "submissions", "list", "billing/nothing"))
}

// tasks list shows how many starts wait in the queue for a slot.
func TestTasksListShowsTheWaitingColumn(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.waitForTheSlot(t)
	out := ok(t, f.url, "tasks", "list")
	require.Regexp(t, `(?m)^TASK\s+LIMIT\s+SOURCE\s+SLOTS\s+WAITING FOR SLOT\s+SUBMISSIONS QUEUED\s+ENABLED\s+LAST EXECUTION$`, out)
	require.Regexp(t, `(?m)^billing/export\s+2\s+declared\s+2/2\s+1\s+0\s+yes \(declared\)\s+#\d+ blocked`, out)
	require.Regexp(t, `(?m)^billing/import\s+unlimited\s+declared\s+0/unlimited\s+0\s+0\s+yes \(declared\)`, out)
}
