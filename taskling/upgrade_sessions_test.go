package taskling_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// protocol1Data is a database of migration 0004 (grant protocol 1) in use: a task of limit 2 whose
// slots are held by a live execution (10) and a dead one (11), and a history of every kind.
const protocol1Data = `
INSERT INTO taskling.task_definition (id, application_name, task_name, tokens, fence, declared_limit, declared_by)
OVERRIDING SYSTEM VALUE VALUES (1, 'app', 'task',
    'I:6f1c0f4e-8d0a-4c55-9d43-0c8a1b0e2f11,S:0,G:10|I:7a2d1f5e-9e1b-4d66-8e54-1d9b2c1f3a22,S:0,G:11', 20, 2, 'old');
INSERT INTO taskling.task_execution (id, task_id, started_at, completed_at, last_keep_alive, host_name, death_mode,
    keep_alive_interval, keep_alive_death_threshold, reference_value, idempotent, failed, blocked, blocked_reason,
    token_id, fence, reclaimed_at, library_version)
VALUES
 (10, 1, now() - interval '1 minute', NULL, now(), 'old-a', 1, '1 second', '1 hour', NULL, false, false, false, NULL,
     '6f1c0f4e-8d0a-4c55-9d43-0c8a1b0e2f11', 19, NULL, '0.1.0'),
 (11, 1, now() - interval '2 hours', NULL, now() - interval '1 hour', 'old-b', 1, '1 second', '1 second', NULL, false, false, false, NULL,
     '7a2d1f5e-9e1b-4d66-8e54-1d9b2c1f3a22', 18, NULL, '0.1.0'),
 (12, 1, now() - interval '3 hours', now() - interval '170 minutes', now() - interval '170 minutes', 'old-a', 1, '1 second', '1 second',
     'done.csv', true, false, false, NULL, gen_random_uuid(), 17, NULL, '0.1.0'),
 (13, 1, now() - interval '4 hours', now() - interval '230 minutes', now() - interval '230 minutes', 'old-a', 1, '1 second', '1 second',
     'bad.csv', true, true, false, NULL, gen_random_uuid(), 16, NULL, '0.1.0'),
 (14, 1, now() - interval '5 hours', NULL, now() - interval '5 hours', 'old-b', 1, '1 second', '1 second', NULL, false, false, false, NULL,
     gen_random_uuid(), 15, now() - interval '290 minutes', '0.1.0'),
 (15, 1, now() - interval '6 hours', now() - interval '6 hours', now() - interval '6 hours', 'old-b', 1, '1 second', '1 second', NULL, false, false, true,
     'limit reached', NULL, NULL, NULL, '0.1.0');
SELECT setval('taskling.task_execution_id_seq', 15);
INSERT INTO taskling.task_execution_event (execution_id, event_type, message, occurred_at) VALUES
 (12, 1, NULL, now() - interval '3 hours'), (12, 2, 'half way', now() - interval '175 minutes'), (12, 4, NULL, now() - interval '170 minutes'),
 (15, 5, 'limit reached', now() - interval '6 hours'), (15, 4, NULL, now() - interval '6 hours');`

// TestSessionsUpgradeKeepsHistoryAndHolders: 0005 (sessions, execution ends, reference claims) on
// a database of the previous version in use. Every status stays what it was, events are neither
// lost nor doubled, a succeeded idempotent reference is still refused, the live holder of the old
// protocol keeps its slot and the dead one's slot is reclaimed.
func TestSessionsUpgradeKeepsHistoryAndHolders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 4))
	_, err := pool.Exec(ctx, protocol1Data)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, pool))

	b := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, withLimit(2)), app: "app", task: "task"}
	infos, err := b.client.LastExecutions(ctx, "app", "task", 10)
	require.NoError(t, err)
	status := map[int64]taskling.Status{}
	for _, i := range infos {
		status[i.ID] = i.Status
	}
	require.Equal(t, map[int64]taskling.Status{10: taskling.StatusInProgress, 11: taskling.StatusDead, 12: taskling.StatusCompleted,
		13: taskling.StatusFailed, 14: taskling.StatusDead, 15: taskling.StatusBlocked}, status)
	require.Equal(t, []int64{10, 11, 12, 13, 14, 15}, idsOf(infos), "newest first")

	require.Equal(t, []taskling.EventType{taskling.EventStart, taskling.EventCheckpoint, taskling.EventEnd}, eventTypes(t, b, 12))
	require.Equal(t, []taskling.EventType{taskling.EventBlocked, taskling.EventEnd}, eventTypes(t, b, 15))

	require.ErrorIs(t, b.denied(t, &taskling.StartOptions{ReferenceValue: "done.csv", Idempotent: true}), taskling.ErrDuplicateReference)
	retry := b.start(t, &taskling.StartOptions{ReferenceValue: "bad.csv", Idempotent: true}) // its earlier run failed
	require.Equal(t, int64(21), retry.FencingToken(), "fences continue")
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached, "execution 10 still holds its slot")

	infos, err = b.client.LastExecutions(ctx, "app", "task", 10)
	require.NoError(t, err)
	reclaimed := infoByID(t, infos, 11)
	require.False(t, reclaimed.ReclaimedAt.IsZero(), "the dead holder's slot was taken")
	require.Equal(t, taskling.StatusInProgress, infoByID(t, infos, 10).Status)
}
