package taskling_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/taskling"
)

// TestObjectAndListBlocksInExecMode: with pgx's QueryExecModeExec (a choice behind a transaction
// pooler) object and list blocks are stored and read back (their JSON values go as text).
func TestObjectAndListBlocksInExecMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, url := pgtest.NewDB(t)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c := newClient(t, pool, noAutoCleanup(withLimit(1)))
	e, err := c.StartExecution(ctx, "app", "task", nil)
	require.NoError(t, err)
	objects, err := e.ObjectBlocks(ctx, []any{map[string]int{"shard": 1}}, nil)
	require.NoError(t, err)
	require.Len(t, objects, 1)
	lists, err := e.ListBlocks(ctx, taskling.ListBlocksRequest{Items: []any{"a", 2}, MaxBlockSize: 10, Header: map[string]string{"h": "x"}}, nil)
	require.NoError(t, err)
	items, err := lists[0].Items(ctx)
	require.NoError(t, err)
	require.Len(t, items, 2)
	require.JSONEq(t, `"a"`, string(items[0].Value))
	require.NoError(t, e.Complete(ctx))
}
