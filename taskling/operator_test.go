package taskling_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// who is a recorded change's field with its principal and its by.
type who struct{ field, principal, by string }

func (b *testBundle) who(t *testing.T) []who {
	t.Helper()
	all := b.changes(t)
	out := make([]who, 0, len(all))
	for i := len(all) - 1; i >= 0; i-- {
		out = append(out, who{all[i].Field, all[i].Principal, all[i].By})
	}
	return out
}

// TestOperatorNameIsThePrincipalAndItsNoteTheBy is issue 23 item 2 for the library: every
// operator change of Operations records the Operator's Name as its principal ("library@HOST"
// when empty) and its Note as its by (the Name when empty); a retirement and a forced block are
// by the Name; the deprecated forms record their name as both; a bad name writes nothing.
func TestOperatorNameIsThePrincipalAndItsNoteTheBy(t *testing.T) {
	t.Parallel()
	b := setup(t, steady(2))
	ctx := b.ctx
	three := 3
	alice := b.client.As(taskling.Operator{Name: "alice", Note: "OPS-12"})
	library := b.client.As(taskling.Operator{})

	require.NoError(t, alice.UpdateTaskSettings(ctx, b.app, b.task, taskling.SettingsUpdate{ConcurrencyLimit: &three, By: "ignored"}))
	require.NoError(t, alice.RetireTask(ctx, b.app, b.task))
	info, err := b.client.Task(ctx, b.app, b.task)
	require.NoError(t, err)
	require.Equal(t, "alice", info.Retired.By, "who retired it is the principal, not the note")
	require.NoError(t, library.UnretireTask(ctx, b.app, b.task))
	require.NoError(t, library.ClearOverrides(ctx, b.app, b.task))

	block := b.failedBlock(t)
	require.NoError(t, b.client.As(taskling.Operator{Name: "bob"}).ForceBlock(ctx, block))
	forced, err := b.client.Block(ctx, block)
	require.NoError(t, err)
	require.True(t, forced.ForcePending)
	id, err := b.client.Submit(ctx, b.app, b.task, nil)
	require.NoError(t, err)
	_, err = alice.CancelSubmission(ctx, id, "not needed")
	require.NoError(t, err)
	// The deprecated forms: their name is the principal and the by.
	require.NoError(t, b.client.UpdateTaskSettings(ctx, b.app, b.task, taskling.SettingsUpdate{ConcurrencyLimit: &three, By: "carol"}))
	require.NoError(t, b.client.ClearOverridesBy(ctx, b.app, b.task, "dave"))
	require.ErrorIs(t, b.client.ForceBlock(ctx, block, ""), taskling.ErrInvalidArgument, "forcedBy stays required")

	require.Equal(t, []who{
		{"concurrency_limit", "alice", "OPS-12"},
		{"retired", "alice", "OPS-12"},
		{"retired", "library@test-host", "library@test-host"},
		{"concurrency_limit", "library@test-host", "library@test-host"},
		{fmt.Sprint("block #", block), "bob", "bob"},
		{fmt.Sprint("submission #", id), "alice", "OPS-12"},
		{"concurrency_limit", "carol", "carol"},
		{"concurrency_limit", "dave", "dave"},
	}, b.who(t))

	before := b.count(t, `SELECT count(*) FROM taskling.operator_change`)
	for _, op := range []taskling.Operator{{Name: "bad\nname"}, {Name: "ok", Note: "bad\x00note"}, {Note: "\x1b[31m"}} {
		require.ErrorIs(t, b.client.As(op).RetireTask(ctx, b.app, b.task), taskling.ErrInvalidArgument, "%q", op)
		require.ErrorIs(t, b.client.As(op).UpdateTaskSettings(ctx, b.app, b.task, taskling.SettingsUpdate{ConcurrencyLimit: &three}), taskling.ErrInvalidArgument)
		require.ErrorIs(t, b.client.As(op).ForceBlock(ctx, block), taskling.ErrInvalidArgument)
	}
	require.Equal(t, before, b.count(t, `SELECT count(*) FROM taskling.operator_change`), "a bad name writes nothing")
}
