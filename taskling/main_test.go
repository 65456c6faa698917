package taskling_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskling-go/taskling/internal/devtools/testutil"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/taskling"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

type testBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	client *taskling.Client
	app    string
	task   string
}

// fast are settings that make liveness tests take about a second.
var fast = taskling.TaskSettings{KeepAliveInterval: 100 * time.Millisecond, KeepAliveDeathThreshold: time.Second}

func setup(t *testing.T, cfg *taskling.Config) *testBundle {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	return &testBundle{ctx: context.Background(), pool: pool, client: newClient(t, pool, cfg), app: "app", task: "task"}
}

func newClient(t *testing.T, pool *pgxpool.Pool, cfg *taskling.Config) *taskling.Client {
	t.Helper()
	if cfg == nil {
		cfg = &taskling.Config{}
	}
	if cfg.HostName == "" {
		cfg.HostName = "test-host"
	}
	c, err := taskling.NewClient(pool, cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func withLimit(limit int) *taskling.Config {
	s := fast
	s.ConcurrencyLimit = limit
	return &taskling.Config{Defaults: s}
}

// start starts an execution and registers its completion at cleanup.
func (b *testBundle) start(t *testing.T, opts *taskling.StartOptions) *taskling.Execution {
	t.Helper()
	e, err := b.client.StartExecution(b.ctx, b.app, b.task, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Complete(context.Background()) })
	return e
}

// startDead starts an execution in a client of its own (another process), then makes that
// process stop and age on the database by an hour: its execution is dead, reclaimable by the next
// start.
func (b *testBundle) startDead(t *testing.T, cfg *taskling.Config, opts *taskling.StartOptions) *taskling.Execution {
	t.Helper()
	e, err := newClient(t, b.pool, cfg).StartExecution(b.ctx, b.app, b.task, opts)
	require.NoError(t, err)
	e.StopHeartbeatForTest()
	b.exec(t, ageSQL, e.ID(), time.Hour)
	return e
}

// ageSQL moves an execution's start, its session's last heartbeat and its grant time in its task's
// liveness terms back by $2.
const ageSQL = `
WITH e AS (
    UPDATE taskling.task_execution SET started_at = started_at - $2::interval, last_keep_alive = last_keep_alive - $2::interval
    WHERE id = $1 RETURNING task_id, session_id
), s AS (
    UPDATE taskling.session SET last_heartbeat = last_heartbeat - $2::interval WHERE id = (SELECT session_id FROM e)
)
UPDATE taskling.task_definition d SET holders = (
    SELECT string_agg(CASE WHEN h LIKE 'E:' || $1 || ',%'
        THEN regexp_replace(h, 'A:[0-9]+', 'A:' || (substring(h FROM 'A:([0-9]+)')::bigint - (extract(epoch FROM $2::interval) * 1000000)::bigint))
        ELSE h END, '|' ORDER BY n)
    FROM unnest(string_to_array(d.holders, '|')) WITH ORDINALITY AS x(h, n))
WHERE d.id = (SELECT task_id FROM e)`

func (b *testBundle) denied(t *testing.T, opts *taskling.StartOptions) error {
	t.Helper()
	e, err := b.client.StartExecution(b.ctx, b.app, b.task, opts)
	if e != nil {
		_ = e.Complete(context.Background())
	}
	require.Error(t, err)
	return err
}

func (b *testBundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, sql, args...)
	require.NoError(t, err)
}

func (b *testBundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, sql, args...).Scan(&n))
	return n
}

func leaseLost(e *taskling.Execution) bool {
	return e.Context().Err() != nil && errors.Is(context.Cause(e.Context()), taskling.ErrLeaseLost)
}

// settingsVar is a SettingsSource whose limit a test changes while executions run.
type settingsVar struct{ limit atomic.Int64 }

func (s *settingsVar) TaskSettings(context.Context, string, string) (taskling.TaskSettings, error) {
	st := fast
	st.ConcurrencyLimit = int(s.limit.Load())
	return st, nil
}
