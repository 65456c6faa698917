package taskling_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// settleUpgrade is a database migrated up to a version, with two submissions whose attempts run
// (linked by hand, as a binary of that version would): one to complete, one to fail.
type settleUpgrade struct {
	*testBundle
	completes, fails int64
	first, second    *taskling.Execution
}

func newSettleUpgrade(t *testing.T, version, limit int) *settleUpgrade {
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, version))
	u := &settleUpgrade{testBundle: &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, steady(limit)), app: "app", task: "task"}}
	link := func(sub, exec int64) {
		u.exec(t, `
WITH s AS (UPDATE taskling.submission SET status = 2, attempts = 1, execution_id = $2 WHERE id = $1 RETURNING id)
INSERT INTO taskling.submission_attempt (submission_id, attempt, execution_id) SELECT id, 1, $2 FROM s`, sub, exec)
	}
	var err error
	u.completes, err = u.client.Submit(ctx, u.app, u.task, &taskling.SubmitOptions{ReferenceValue: "completes"})
	require.NoError(t, err)
	u.fails, err = u.client.Submit(ctx, u.app, u.task, &taskling.SubmitOptions{ReferenceValue: "fails", MaxAttempts: 3})
	require.NoError(t, err)
	u.first, u.second = u.start(t, nil), u.start(t, nil)
	link(u.completes, u.first.ID())
	link(u.fails, u.second.ID())
	return u
}

// requireSettled checks the two submissions once their attempts ended: one completed, the other
// back to waiting with its error.
func (u *settleUpgrade) requireSettled(t *testing.T) {
	s, err := u.client.Submission(u.ctx, u.completes)
	require.NoError(t, err)
	require.Equal(t, taskling.SubmissionCompleted, s.Status)
	require.NotNil(t, s.FinishedAt)
	s, err = u.client.Submission(u.ctx, u.fails)
	require.NoError(t, err)
	require.Equal(t, taskling.SubmissionWaiting, s.Status, "one attempt of three spent")
	require.Nil(t, s.FinishedAt)
	require.Contains(t, s.LastError, "boom")
}

// TestSettlePlanUpgradeSettlesAttemptsStartedBefore: 0020 (the settlement as PL/pgSQL, which
// keeps its plan: as a SQL function it was planned at every ending, about a millisecond each) on
// a database of 0019 with two submissions whose attempts run: the one that completes is
// completed, the one whose attempt fails goes back to waiting with its error, as before.
func TestSettlePlanUpgradeSettlesAttemptsStartedBefore(t *testing.T) {
	t.Parallel()
	u := newSettleUpgrade(t, 19, 2)

	require.NoError(t, migrations.Up(u.ctx, u.pool))
	require.Equal(t, 1, u.count(t, `SELECT count(*) FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
        WHERE p.proname = 'settle_attempts' AND l.lanname = 'plpgsql'`), "a PL/pgSQL function keeps its plan")

	require.NoError(t, u.first.Complete(u.ctx))
	require.NoError(t, u.second.RecordError(u.ctx, "boom", true))
	require.NoError(t, u.second.Complete(u.ctx))
	u.requireSettled(t)
}

// TestSettleRunningUpgradeSettlesAttemptsStartedBefore: 0025 (the settlement trigger returns at
// once when no running submission names the executions ended) on a database of 0024 with two
// submissions whose attempts run and a holder that is no submission's attempt. After the upgrade
// the attempts, ended in one statement, are settled by the trigger alone (no Work runs, whose
// sweep would mend a missed settlement); the holder's ending fires the trigger, which settles
// nothing and no longer calls the settlement (it did before the migration).
func TestSettleRunningUpgradeSettlesAttemptsStartedBefore(t *testing.T) {
	t.Parallel()
	u := newSettleUpgrade(t, 24, 4)
	plain := u.start(t, nil)
	// end ends executions in one statement and returns how often the trigger and the settlement
	// ran for it (the counts a backend has not yet reported accumulate over its transactions).
	end := func(execs []int64, failed int64) (triggers, settlements int64) {
		require.NoError(t, pgx.BeginFunc(u.ctx, u.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(u.ctx, `SET LOCAL track_functions = 'pl'`); err != nil {
				return err
			}
			calls := func() (trig, settle int64, err error) {
				err = tx.QueryRow(u.ctx, `SELECT coalesce(sum(calls) FILTER (WHERE funcname = 'settle_submissions'), 0),
                    coalesce(sum(calls) FILTER (WHERE funcname = 'settle_attempts'), 0)
                    FROM pg_stat_xact_user_functions WHERE schemaname = 'taskling'`).Scan(&trig, &settle)
				return trig, settle, err
			}
			trig0, settle0, err := calls()
			if err != nil {
				return err
			}
			if _, err := tx.Exec(u.ctx, `INSERT INTO taskling.execution_end (execution_id, outcome, last_heartbeat)
                SELECT id, CASE WHEN id = $2 THEN taskling.end_outcome('failed') ELSE taskling.end_outcome('completed') END, clock_timestamp()
                FROM unnest($1::bigint[]) AS id`, execs, failed); err != nil {
				return err
			}
			trig1, settle1, err := calls()
			triggers, settlements = trig1-trig0, settle1-settle0
			return err
		}))
		return triggers, settlements
	}

	require.NoError(t, migrations.Up(u.ctx, u.pool))

	require.NoError(t, u.second.RecordError(u.ctx, "boom", true))
	triggers, settlements := end([]int64{u.first.ID(), u.second.ID()}, u.second.ID())
	require.Equal(t, [2]int64{1, 1}, [2]int64{triggers, settlements})
	u.requireSettled(t)
	triggers, settlements = end([]int64{plain.ID()}, 0)
	require.Equal(t, [2]int64{1, 0}, [2]int64{triggers, settlements}, "an ending no submission names is not settled")
	require.NoError(t, u.start(t, nil).Complete(u.ctx), "an ending alone, after the upgrade")
}
