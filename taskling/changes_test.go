package taskling_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// change is a recorded change without its id and time: field, old → new, by.
type change struct {
	field, old, new, by string
}

func (b *testBundle) changes(t *testing.T) []taskling.Change {
	t.Helper()
	page, err := b.client.TaskChanges(b.ctx, b.app, b.task, &taskling.ChangeFilter{Limit: taskling.MaxChangesPage})
	require.NoError(t, err)
	return page.Changes
}

// newChanges returns the changes recorded after the first skip ones (oldest first), as text; nil
// values read "-".
func (b *testBundle) newChanges(t *testing.T, skip int) []change {
	t.Helper()
	all := b.changes(t)
	var out []change
	for i := len(all) - 1 - skip; i >= 0; i-- {
		c := all[i]
		out = append(out, change{field: c.Field, old: orDash(c.Old), new: orDash(c.New), by: c.By})
	}
	return out
}

func orDash(p *string) string {
	if p == nil {
		return "-"
	}
	return *p
}

// TestEveryOperatorChangeIsRecordedWithOldNewAndWho: each kind of operator change writes one
// row per field it changes, with the old and new values as text ("-": not overridden) and who
// made it (SettingsUpdate.By, or the client's host name); the fields of one change share their
// time; a field set to the value it has records nothing.
func TestEveryOperatorChangeIsRecordedWithOldNewAndWho(t *testing.T) {
	t.Parallel()
	b := setup(t, steady(2))
	ctx := b.ctx
	three, unlimited := 3, -1
	off := false
	threshold, overrideThreshold := 30*time.Second, time.Minute
	month, forever := 30*24*time.Hour, taskling.KeepForever
	mode := taskling.DeathModeOverride

	require.NoError(t, b.client.UpdateTaskSettings(ctx, b.app, b.task, taskling.SettingsUpdate{ConcurrencyLimit: &three, By: "alice"}))
	require.Equal(t, []change{{"concurrency_limit", "-", "3", "alice"}}, b.newChanges(t, 0))

	require.NoError(t, b.client.UpdateTaskSettings(ctx, b.app, b.task, taskling.SettingsUpdate{
		ConcurrencyLimit: &three, Enabled: &off, KeepAliveDeathThreshold: &threshold, KeepCompleted: &month, By: "bob"}))
	require.Equal(t, []change{
		{"enabled", "-", "false", "bob"},
		{"keep_alive_death_threshold", "-", "30s", "bob"},
		{"keep_completed", "-", "30d", "bob"},
	}, b.newChanges(t, 1), "the limit, set to what it was, is not a change")
	all := b.changes(t)
	require.Equal(t, all[0].At, all[2].At, "one change, one time")
	require.True(t, all[3].At.Before(all[0].At))

	require.NoError(t, b.client.UpdateTaskSettings(ctx, b.app, b.task, taskling.SettingsUpdate{
		ConcurrencyLimit: &unlimited, DeathMode: &mode, OverrideThreshold: &overrideThreshold, KeepFailed: &forever}))
	require.Equal(t, []change{
		{"concurrency_limit", "3", "unlimited", "library@test-host"},
		{"death_mode", "-", "override", "library@test-host"},
		{"override_threshold", "-", "1m0s", "library@test-host"},
		{"keep_failed", "-", "forever", "library@test-host"},
	}, b.newChanges(t, 4), "who defaults to the client's host name")

	require.NoError(t, b.client.ClearOverridesBy(ctx, b.app, b.task, "carol"))
	require.Equal(t, []change{
		{"concurrency_limit", "unlimited", "-", "carol"},
		{"enabled", "false", "-", "carol"},
		{"death_mode", "override", "-", "carol"},
		{"keep_alive_death_threshold", "30s", "-", "carol"},
		{"override_threshold", "1m0s", "-", "carol"},
		{"keep_completed", "30d", "-", "carol"},
		{"keep_failed", "forever", "-", "carol"},
	}, b.newChanges(t, 8))
	info, err := b.client.Task(ctx, b.app, b.task)
	require.NoError(t, err)
	require.Equal(t, taskling.SettingsUpdate{}, info.Overrides, "the trail and the task agree")
	require.NoError(t, b.client.ClearOverrides(ctx, b.app, b.task))
	require.Len(t, b.changes(t), 15, "clearing nothing changes nothing")
}

// TestARefusedChangeRecordsNothing: an update refused by validation, a bad name for who, and an
// enable of a retired task write neither the override nor a change.
func TestARefusedChangeRecordsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, steady(2))
	ctx := b.ctx
	zero, four, on := 0, 4, true
	short, forever := time.Second, taskling.KeepForever
	require.NoError(t, b.client.UpdateTaskSettings(ctx, b.app, b.task, taskling.SettingsUpdate{ConcurrencyLimit: &four, By: "alice"}))
	before := b.count(t, `SELECT count(*) FROM taskling.operator_change`)
	require.Equal(t, 1, before)

	require.ErrorIs(t, b.client.UpdateTaskSettings(ctx, b.app, b.task, taskling.SettingsUpdate{ConcurrencyLimit: &zero}), taskling.ErrInvalidSettings)
	require.ErrorIs(t, b.client.UpdateTaskSettings(ctx, b.app, b.task, taskling.SettingsUpdate{ConcurrencyLimit: &four, KeepBlocked: &short}), taskling.ErrInvalidSettings)
	require.ErrorIs(t, b.client.UpdateTaskSettings(ctx, b.app, b.task, taskling.SettingsUpdate{ConcurrencyLimit: &four, By: "bad\nname"}), taskling.ErrInvalidArgument)
	require.ErrorIs(t, b.client.ClearOverridesBy(ctx, b.app, b.task, "bad\x00name"), taskling.ErrInvalidArgument)

	require.NoError(t, b.client.RetireTask(ctx, b.app, b.task, "ops"))
	err := b.client.UpdateTaskSettings(ctx, b.app, b.task, taskling.SettingsUpdate{Enabled: &on, ConcurrencyLimit: &zero})
	require.ErrorIs(t, err, taskling.ErrInvalidSettings)
	err = b.client.UpdateTaskSettings(ctx, b.app, b.task, taskling.SettingsUpdate{Enabled: &on, KeepCompleted: &forever, By: "alice"})
	require.ErrorIs(t, err, taskling.ErrTaskRetired, "a retired task is unretired, not enabled")
	require.Equal(t, before+1, b.count(t, `SELECT count(*) FROM taskling.operator_change`), "only the retirement was recorded")
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM taskling.retention WHERE override_completed IS NOT NULL`))
	info, err := b.client.Task(ctx, b.app, b.task)
	require.NoError(t, err)
	require.Nil(t, info.Overrides.Enabled)
	require.Equal(t, 4, *info.Overrides.ConcurrencyLimit)
}

// TestForcedBlocksAndCancelledSubmissionsAreRecorded: forcing a block records its status →
// forced (forcing it again, queued already, records nothing); cancelling a submission records
// waiting → cancelled with the reason, and who.
func TestForcedBlocksAndCancelledSubmissionsAreRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t, steady(2))
	ctx := b.ctx
	block := b.failedBlock(t)
	require.NoError(t, b.client.ForceBlock(ctx, block, "alice"))
	require.NoError(t, b.client.ForceBlock(ctx, block, "bob"))
	id, err := b.client.Submit(ctx, b.app, b.task, nil)
	require.NoError(t, err)
	_, err = b.client.CancelSubmissionBy(ctx, id, "not needed", "dave")
	require.NoError(t, err)
	_, err = b.client.CancelSubmission(ctx, id, "")
	require.ErrorIs(t, err, taskling.ErrSubmissionFinished)

	require.Equal(t, []change{
		{fmt.Sprint("block #", block), "failed", "forced", "alice"},
		{fmt.Sprint("submission #", id), "waiting", "cancelled: not needed", "dave"},
	}, b.newChanges(t, 0))
}

// failedBlock runs the task once with a block that fails, and returns the block's id.
func (b *testBundle) failedBlock(t *testing.T) int64 {
	t.Helper()
	e := b.start(t, nil)
	blocks, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 10, MaxSize: 10}, nil)
	require.NoError(t, err)
	require.NoError(t, blocks[0].Start(b.ctx))
	require.NoError(t, blocks[0].Fail(b.ctx, "on purpose"))
	require.NoError(t, e.Complete(b.ctx))
	return blocks[0].ID
}

// TestTaskChangesPages: pages of changes, newest first, follow each other without repeating.
func TestTaskChangesPages(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for n := 1; n <= 5; n++ {
		require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{ConcurrencyLimit: &n}))
	}
	page, err := b.client.TaskChanges(b.ctx, b.app, b.task, &taskling.ChangeFilter{Limit: 3})
	require.NoError(t, err)
	require.Len(t, page.Changes, 3)
	require.Equal(t, "5", *page.Changes[0].New)
	next, err := b.client.TaskChanges(b.ctx, b.app, b.task, &taskling.ChangeFilter{Limit: 3, Before: page.NextBefore})
	require.NoError(t, err)
	require.Len(t, next.Changes, 2)
	require.Equal(t, "2", *next.Changes[0].New)
	require.Nil(t, next.Changes[1].Old)
	require.Zero(t, next.NextBefore)
	_, err = b.client.TaskChanges(context.Background(), b.app, "nope", nil)
	require.ErrorIs(t, err, taskling.ErrNotFound)
}

// steady are settings with the default liveness (a 20 s threshold): tests that hold slots but
// do not judge liveness stay correct on a loaded machine.
func steady(limit int) *taskling.Config {
	return &taskling.Config{Defaults: taskling.TaskSettings{ConcurrencyLimit: limit}}
}
