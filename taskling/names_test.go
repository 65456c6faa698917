package taskling_test

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// TestNewNamesRefuseSlashesAndInvisibleCharacters is issue 23 item 5: "probe"/"a/b" and
// "probe/a"/"b" both printed as probe/a/b, and the CLI reached only one of them; a bidi override
// in a name reversed what followed it wherever it was printed. Every call that makes a task
// refuses them, naming the argument, and writes nothing.
func TestNewNamesRefuseSlashesAndInvisibleCharacters(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	limit := 2
	for _, tc := range []struct{ app, task, field string }{
		{"probe/a", "b", "application name"},
		{"probe", "a/b", "task name"},
		{"probe", "gnp.\u202eexe", "task name"},   // right-to-left override
		{"probe", "a\u2066b", "task name"},        // left-to-right isolate
		{"probe", "a\u200fb", "task name"},        // right-to-left mark
		{"probe", "zero\u200bwidth", "task name"}, // zero-width space
		{"\ufeffprobe", "a", "application name"},  // byte order mark
		{"probe", "line\u2028break", "task name"},
	} {
		_, err := b.client.StartExecution(b.ctx, tc.app, tc.task, nil)
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, "%q/%q", tc.app, tc.task)
		require.ErrorContains(t, err, tc.field)
		err = b.client.UpdateTaskSettings(b.ctx, tc.app, tc.task, taskling.SettingsUpdate{ConcurrencyLimit: &limit})
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, "%q/%q", tc.app, tc.task)
		_, err = b.client.Submit(b.ctx, tc.app, tc.task, nil)
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, "%q/%q", tc.app, tc.task)
		err = b.client.Schedule(b.ctx, tc.app, tc.task, "@every 1h", func(context.Context, *taskling.Execution) error { return nil }, nil)
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, "%q/%q", tc.app, tc.task)
	}
	tasks, err := b.client.Tasks(b.ctx, nil)
	require.NoError(t, err)
	require.Empty(t, tasks.Tasks, "nothing was written")
}

// TestTasksNamedBeforeTheRuleStayUsable: a task made with a slash or a format character before
// they were refused is still read, started, tuned, retired and given a critical section.
func TestTasksNamedBeforeTheRuleStayUsable(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, name := range [][2]string{{"probe", "a/b"}, {"probe/a", "b"}, {"probe", "gnp.\u202eexe"}} {
		b.exec(t, `INSERT INTO taskling.task_definition (application_name, task_name) VALUES ($1, $2)`, name[0], name[1])
	}
	limit := 3
	for _, name := range [][2]string{{"probe", "a/b"}, {"probe/a", "b"}, {"probe", "gnp.\u202eexe"}} {
		app, task := name[0], name[1]
		e, err := b.client.StartExecution(b.ctx, app, task, nil)
		require.NoError(t, err, "%q/%q", app, task)
		cs, err := e.CriticalSection(b.ctx, 10*time.Second)
		require.NoError(t, err, "its critical section is made on first use")
		require.NoError(t, cs.Release(b.ctx))
		require.NoError(t, e.Complete(b.ctx))
		require.NoError(t, b.client.UpdateTaskSettings(b.ctx, app, task, taskling.SettingsUpdate{ConcurrencyLimit: &limit}))
		d, err := b.client.Task(b.ctx, app, task)
		require.NoError(t, err)
		require.Equal(t, limit, d.Limit)
		page, err := b.client.Executions(b.ctx, app, task, nil)
		require.NoError(t, err)
		require.Len(t, page.Executions, 1, "%q/%q: its own execution only", app, task)
		require.NoError(t, b.client.RetireTask(b.ctx, app, task, "alice"))
		require.NoError(t, b.client.UnretireTask(b.ctx, app, task, "alice"))
	}
}

// TestOperatorNamesRefuseInvisibleCharacters is issue 23 item 5: who made a change is printed
// in the CLI, the API and the dashboard, so a bidi override there forged what followed it.
// ForceBlock's forcedBy took any text (a newline too); it is checked like every other name.
func TestOperatorNamesRefuseInvisibleCharacters(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	e := b.start(t, nil)
	blocks, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 10, MaxSize: 10}, nil)
	require.NoError(t, err)
	require.NoError(t, blocks[0].Complete(b.ctx, 10))
	id, err := b.client.Submit(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)

	for _, by := range []string{"bob\u202e (api@10.0.0.7)", "al\u200bice", "eve\u2067"} {
		limit := 2
		err := b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{ConcurrencyLimit: &limit, By: by})
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, "%q", by)
		require.ErrorContains(t, err, "SettingsUpdate.By")
		require.ErrorIs(t, b.client.ClearOverridesBy(b.ctx, b.app, b.task, by), taskling.ErrInvalidArgument)
		require.ErrorIs(t, b.client.RetireTask(b.ctx, b.app, b.task, by), taskling.ErrInvalidArgument)
		_, err = b.client.CancelSubmissionBy(b.ctx, id, "", by)
		require.ErrorIs(t, err, taskling.ErrInvalidArgument)
		err = b.client.ForceBlock(b.ctx, blocks[0].ID, by)
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, "%q", by)
		require.ErrorContains(t, err, "forcedBy")
		_, err = taskling.NewClient(b.pool, &taskling.Config{HostName: "host" + by})
		require.ErrorIs(t, err, taskling.ErrInvalidArgument)
	}
	require.ErrorIs(t, b.client.ForceBlock(b.ctx, blocks[0].ID, "alice\nbob"), taskling.ErrInvalidArgument, "no control character either")
	require.NoError(t, b.client.ForceBlock(b.ctx, blocks[0].ID, "alice (ops/eu)"), "a slash is fine in who")
	changes, err := b.client.TaskChanges(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	require.Len(t, changes.Changes, 1, "only the good force was recorded")
}

// TestNewNamesRefuseDotSegments is issue 40 item 8: "." and ".." are path segments that
// browsers and HTTP clients drop from a URL, so `tasks set dotapp/..` made a task whose
// dashboard link led to another page. Every call that makes a task refuses them, naming the
// argument, and writes nothing.
func TestNewNamesRefuseDotSegments(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	limit := 2
	for _, tc := range []struct{ app, task, field string }{
		{"dotapp", "..", "task name"},
		{"dotapp", ".", "task name"},
		{".", "x", "application name"},
		{"..", "x", "application name"},
	} {
		_, err := b.client.StartExecution(b.ctx, tc.app, tc.task, nil)
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, "%q/%q", tc.app, tc.task)
		require.ErrorContains(t, err, tc.field+` is "`)
		err = b.client.UpdateTaskSettings(b.ctx, tc.app, tc.task, taskling.SettingsUpdate{ConcurrencyLimit: &limit})
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, "%q/%q", tc.app, tc.task)
		err = b.client.UpdateKeySettings(b.ctx, tc.app, tc.task, "k", taskling.KeySettingsUpdate{Limit: &limit})
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, "%q/%q", tc.app, tc.task)
		_, err = b.client.Submit(b.ctx, tc.app, tc.task, nil)
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, "%q/%q", tc.app, tc.task)
		err = b.client.Schedule(b.ctx, tc.app, tc.task, "@every 1h", func(context.Context, *taskling.Execution) error { return nil }, nil)
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, "%q/%q", tc.app, tc.task)
	}
	for _, bad := range []string{".", ".."} {
		require.ErrorIs(t, taskling.ValidateNewName("name", bad), taskling.ErrInvalidArgument)
		require.NoError(t, taskling.ValidateName("name", bad), "an existing task's name")
	}
	for _, ok := range []string{"...", ".x", "x.", "a..b"} {
		require.NoError(t, taskling.ValidateNewName("name", ok))
	}
	tasks, err := b.client.Tasks(b.ctx, nil)
	require.NoError(t, err)
	require.Empty(t, tasks.Tasks, "nothing was written")

	// A task made before the rule keeps its name: started, tuned, read, retired.
	b.exec(t, `INSERT INTO taskling.task_definition (application_name, task_name) VALUES ('dotapp', '..')`)
	e, err := b.client.StartExecution(b.ctx, "dotapp", "..", nil)
	require.NoError(t, err)
	cs, err := e.CriticalSection(b.ctx, 10*time.Second)
	require.NoError(t, err, "its critical section is made on first use")
	require.NoError(t, cs.Release(b.ctx))
	require.NoError(t, e.Complete(b.ctx))
	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, "dotapp", "..", taskling.SettingsUpdate{ConcurrencyLimit: &limit}))
	d, err := b.client.Task(b.ctx, "dotapp", "..")
	require.NoError(t, err)
	require.Equal(t, limit, d.Limit)
	require.NoError(t, b.client.RetireTask(b.ctx, "dotapp", "..", "alice"))
	require.NoError(t, b.client.UnretireTask(b.ctx, "dotapp", "..", "alice"))
}

// TestTasksRefusesFilterTextPostgreSQLCannotRead is issue 40 item 7: a Search or a cursor holding
// a NUL byte or invalid UTF-8 reached PostgreSQL, which failed the query (SQLSTATE 22021); they
// are refused up front with ErrInvalidArgument naming the field.
func TestTasksRefusesFilterTextPostgreSQLCannotRead(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	require.NoError(t, b.client.Run(b.ctx, b.app, b.task, func(context.Context, *taskling.Execution) error { return nil }, nil))
	for _, search := range []string{"\x00", "a\xffb", "a\nb"} {
		_, err := b.client.Tasks(b.ctx, &taskling.TaskFilter{Search: search})
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, "%q", search)
		require.ErrorContains(t, err, "TaskFilter.Search")
	}
	for _, cursor := range []string{`{"s":"name","a":"\u0000","t":"x","i":1}`, `{"s":"name","a":"a","t":"","i":1}`} {
		_, err := b.client.Tasks(b.ctx, &taskling.TaskFilter{Limit: 5, Cursor: base64.RawURLEncoding.EncodeToString([]byte(cursor))})
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, cursor)
		require.ErrorContains(t, err, "TaskFilter.Cursor")
	}
	page, err := b.client.Tasks(b.ctx, &taskling.TaskFilter{Search: "APP/t"})
	require.NoError(t, err)
	require.Len(t, page.Tasks, 1)
}
