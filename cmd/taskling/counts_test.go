package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// TestTasksCountQueuedSubmissionsApartFromStartsWaiting is issue 40 item 4: with two submissions
// queued for key globex, 'tasks show' read "Waiting: 0" and 'tasks keys show' "globex … WAITING 0".
// Each count now says what it counts: the starts waiting for a slot, and the submissions waiting
// to start.
func TestTasksCountQueuedSubmissionsApartFromStartsWaiting(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for range 2 {
		_, err := f.client.Submit(context.Background(), "billing", "export", &taskling.SubmitOptions{Key: "globex"})
		require.NoError(t, err)
	}
	f.waitForTheSlot(t)

	list := ok(t, f.url, "tasks", "list")
	require.Regexp(t, `(?m)^TASK\s+LIMIT\s+SOURCE\s+SLOTS\s+WAITING FOR SLOT\s+SUBMISSIONS QUEUED\s+ENABLED\s+LAST EXECUTION$`, list)
	require.Regexp(t, `(?m)^billing/export\s+2\s+declared\s+2/2\s+1\s+2\s+yes \(declared\)`, list)
	require.Regexp(t, `(?m)^billing/import\s+unlimited\s+declared\s+0/unlimited\s+0\s+0\s+yes \(declared\)`, list)

	show := ok(t, f.url, "tasks", "show", "billing/export")
	require.Regexp(t, `(?m)^Waiting:   1 start for a slot \(oldest since \S+\)$`, show)
	require.Regexp(t, `(?m)^Queued:    2 submissions waiting to start$`, show)

	keys := ok(t, f.url, "tasks", "keys", "show", "billing/export")
	require.Regexp(t, `(?m)^KEY\s+HOLDERS\s+COST IN USE\s+WAITING FOR SLOT\s+SUBMISSIONS QUEUED\s+LIMIT`, keys)
	require.Regexp(t, `(?m)^"globex"\s+0\s+0\s+0\s+2\s+none`, keys, "globex: no start waits, two submissions are queued")
	require.Regexp(t, `(?m)^""\s+2\s+2\s+1\s+0\s+none`, keys)
}

// TestACriticalSectionIsMarkedInternal is issue 40 item 7: a task's critical section was listed
// as if it were a task of the user's.
func TestACriticalSectionIsMarkedInternal(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	e, err := f.client.StartExecution(ctx, "billing", "import", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Complete(context.Background()) })
	cs, err := e.CriticalSection(ctx, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Release(context.Background()) })

	list := ok(t, f.url, "tasks", "list")
	require.Regexp(t, `(?m)^billing/import \[critical section\] \(internal\)\s+1\s`, list)
	require.Regexp(t, `(?m)^billing/import\s+unlimited\s`, list, "the task itself is not marked")
	show := ok(t, f.url, "tasks", "show", "billing/import [critical section]")
	require.Contains(t, show, "Internal:  the critical section of billing/import, a mutex its executions take one at a time\n")
	require.NotContains(t, ok(t, f.url, "tasks", "show", "billing/import"), "Internal:")
}

// TestExecutionsListSaysIDsAreReservedPerProcess is issue 40 item 10: ids jump (1, 18, 35) and
// are not in start order, which only docs/how-it-works.md said.
func TestExecutionsListSaysIDsAreReservedPerProcess(t *testing.T) {
	t.Parallel()
	help := ok(t, "postgres://unused", "executions", "list", "--help")
	require.Contains(t, help, "newest first by start time")
	require.Contains(t, help, "each process reserves them ahead")
	require.Contains(t, help, "A gap in the ids is not a missing\nrow")
}

// TestExecutionShowNamesTheSubmissionItRan is issue 40 item 5, in the CLI.
func TestExecutionShowNamesTheSubmissionItRan(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	id, err := f.client.Submit(ctx, "billing", "import", nil)
	require.NoError(t, err)
	ran := make(chan int64, 1)
	worked := make(chan error, 1)
	go func() {
		worked <- f.client.Work(ctx, "billing", "import", func(_ context.Context, e *taskling.Execution) error {
			ran <- e.ID()
			return nil
		}, nil)
	}()
	t.Cleanup(func() { cancel(); require.NoError(t, <-worked) })
	exec := <-ran
	require.Eventually(t, func() bool {
		s, err := f.client.Submission(context.Background(), id)
		return err == nil && s.Status == taskling.SubmissionCompleted
	}, 15*time.Second, 20*time.Millisecond)
	out := ok(t, f.url, "executions", "show", itoa(exec))
	require.Contains(t, out, fmt.Sprintf("Attempt:   1 of submission %d\n", id))
	require.NotContains(t, ok(t, f.url, "executions", "show", itoa(f.done.ID())), "Attempt:")
}

// waitForTheSlot queues a start for billing/export's slot (both are held) until the test ends.
func (f *fixture) waitForTheSlot(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() {
		_, err := f.client.StartExecution(ctx, "billing", "export", &taskling.StartOptions{WaitForSlot: true})
		waited <- err
	}()
	t.Cleanup(func() {
		cancel()
		require.ErrorIs(t, <-waited, context.Canceled)
	})
	require.Eventually(t, func() bool {
		d, err := f.client.Task(context.Background(), "billing", "export")
		require.NoError(t, err)
		return d.Waiting == 1
	}, 10*time.Second, 20*time.Millisecond)
}
