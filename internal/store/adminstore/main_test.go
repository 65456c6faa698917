package adminstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
	"github.com/taskling-go/taskling/internal/store/adminstore"
	"github.com/taskling-go/taskling/internal/store/blockstore"
	"github.com/taskling-go/taskling/internal/store/schedulestore"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// testBundle is a process of its own on a database of its own: the grant protocol's store, the
// feature stores on it, a task and a session.
type testBundle struct {
	ctx     context.Context
	pool    *pgxpool.Pool
	store   *execution.Store
	admin   *adminstore.Store
	blocks  *blockstore.Store
	scheds  *schedulestore.Store
	taskID  int64
	session int64
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	store := execution.NewStore(pool, nil)
	b := &testBundle{ctx: context.Background(), pool: pool, store: store, admin: adminstore.New(store),
		blocks: blockstore.New(store), scheds: schedulestore.New(store)}
	var err error
	b.taskID, err = store.EnsureTask(b.ctx, "app", "task")
	require.NoError(t, err)
	b.session, err = store.RegisterSession(b.ctx, "h")
	require.NoError(t, err)
	return b
}

func (b *testBundle) request(limit int) execution.AcquireRequest {
	return execution.AcquireRequest{
		Requester: execution.Requester{TaskID: b.taskID, TaskName: "app/task", Host: "h", SessionID: b.session,
			Declared: execution.Settings{ConcurrencyLimit: limit, Enabled: true, DeathMode: 1,
				KeepAliveInterval: time.Second, KeepAliveDeathThreshold: 10 * time.Second}},
		RecordDenial: true,
	}
}

func (b *testBundle) acquire(t *testing.T, limit int) execution.AcquireResult {
	t.Helper()
	res, err := b.store.Acquire(b.ctx, b.request(limit))
	require.NoError(t, err)
	require.Equal(t, execution.NotDenied, res.Denied)
	return res
}

func (b *testBundle) release(t *testing.T, res execution.AcquireResult) {
	t.Helper()
	_, err := b.store.Release(b.ctx, execution.ReleaseRequest{TaskID: b.taskID, TaskName: "app/task", ExecutionID: res.ExecutionID, TokenID: res.TokenID})
	require.NoError(t, err)
}
