package migrations_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/taskling-go/taskling/internal/devtools/testutil"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

func appliedRows(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM taskling.schema_migrations").Scan(&n))
	return n
}

func TestUpTwiceIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	all, err := migrations.All()
	require.NoError(t, err)
	require.NotEmpty(t, all)

	require.NoError(t, migrations.Up(ctx, pool))
	first, err := migrations.Status(ctx, pool)
	require.NoError(t, err)

	require.NoError(t, migrations.Up(ctx, pool))
	second, err := migrations.Status(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, first, second, "a second Up must change nothing")
	require.Equal(t, len(all), appliedRows(t, pool))
}

func TestConcurrentUpAppliesEachMigrationOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	const hosts = 8
	errs := make([]error, hosts)
	var wg sync.WaitGroup
	for i := range hosts {
		wg.Go(func() { errs[i] = migrations.Up(ctx, pool) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "Up #%d", i)
	}
	all, err := migrations.All()
	require.NoError(t, err)
	require.Equal(t, len(all), appliedRows(t, pool))
	var tables int
	require.NoError(t, pool.QueryRow(ctx,
		"SELECT count(*) FROM pg_tables WHERE schemaname = 'taskling' AND tablename = 'task_definition'").Scan(&tables))
	require.Equal(t, 1, tables)
}

func TestEditedAppliedMigrationIsRejected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.Up(ctx, pool))
	// As if 0001's file had been edited after it was applied.
	_, err := pool.Exec(ctx, "UPDATE taskling.schema_migrations SET checksum = 'edited' WHERE version = 1")
	require.NoError(t, err)

	err = migrations.Up(ctx, pool)
	require.ErrorIs(t, err, migrations.ErrChecksumMismatch)
	require.ErrorContains(t, err, "0001_")

	_, err = migrations.Status(ctx, pool)
	require.True(t, errors.Is(err, migrations.ErrChecksumMismatch), "Status: %v", err)
}

func TestStatusBeforeAndAfterUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)

	before, err := migrations.Status(ctx, pool)
	require.NoError(t, err)
	require.NotEmpty(t, before)
	for _, m := range before {
		require.False(t, m.Applied, "%04d_%s", m.Version, m.Name)
		require.True(t, m.AppliedAt.IsZero())
	}
	var schemaExists bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = 'taskling')").Scan(&schemaExists))
	require.False(t, schemaExists, "Status must write nothing")

	require.NoError(t, migrations.Up(ctx, pool))
	after, err := migrations.Status(ctx, pool)
	require.NoError(t, err)
	require.Len(t, after, len(before))
	for i, m := range after {
		require.True(t, m.Applied, "%04d_%s", m.Version, m.Name)
		require.False(t, m.AppliedAt.IsZero())
		require.Equal(t, before[i].Migration, m.Migration)
	}
}

func TestMigratedTemplateMatchesUp(t *testing.T) {
	t.Parallel()
	// pgtest's template is built with Up: a database made from it reports every migration applied.
	pool, _ := pgtest.NewDB(t)
	status, err := migrations.Status(context.Background(), pool)
	require.NoError(t, err)
	for _, m := range status {
		require.True(t, m.Applied, "%04d_%s", m.Version, m.Name)
	}
}

func TestHashNamesTheSchema(t *testing.T) {
	t.Parallel()
	h1, err := migrations.Hash()
	require.NoError(t, err)
	h2, err := migrations.Hash()
	require.NoError(t, err)
	require.Equal(t, h1, h2)
	require.Regexp(t, `^[0-9a-f]{16}$`, h1)
}

// TestLimitCapUpgradeClampsExistingLimits is issue 15 item 4 on a database of the previous
// version: a limit above 10000 (allowed before 0003) is clamped, and the CHECK refuses new ones.
func TestLimitCapUpgradeClampsExistingLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 2))
	_, err := pool.Exec(ctx, `INSERT INTO taskling.task_definition (application_name, task_name, concurrency_limit, declared_limit)
VALUES ('a', 'huge', 2000000000, 50000), ('a', 'fine', 3, -1), ('a', 'unlimited', -1, NULL)`)
	require.NoError(t, err)

	require.NoError(t, migrations.Up(ctx, pool))
	rows, err := pool.Query(ctx, `SELECT task_name, concurrency_limit, declared_limit FROM taskling.task_definition ORDER BY task_name`)
	require.NoError(t, err)
	type row struct {
		task            string
		limit, declared *int
	}
	var got []row
	for rows.Next() {
		var r row
		require.NoError(t, rows.Scan(&r.task, &r.limit, &r.declared))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	ptr := func(n int) *int { return &n }
	require.Equal(t, []row{{"fine", ptr(3), ptr(-1)}, {"huge", ptr(10000), ptr(10000)}, {"unlimited", ptr(-1), nil}}, got)

	_, err = pool.Exec(ctx, `UPDATE taskling.task_definition SET concurrency_limit = 10001 WHERE task_name = 'fine'`)
	require.ErrorContains(t, err, "task_definition_concurrency_limit_check")
}

// TestProtocolUpgradeKeepsExistingTasks: 0004 adds the grant protocol to a database holding a
// previous version's data, at version 1.
func TestProtocolUpgradeKeepsExistingTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 3))
	_, err := pool.Exec(ctx, `INSERT INTO taskling.task_definition (application_name, task_name, tokens, fence)
VALUES ('a', 't', 'I:6f1c0f4e-8d0a-4c55-9d43-0c8a1b0e2f11,S:1,G:0', 7)`)
	require.NoError(t, err)
	require.NoError(t, migrations.UpTo(ctx, pool, 4))
	var version, fence int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT version FROM taskling.protocol), fence FROM taskling.task_definition`).Scan(&version, &fence))
	require.Equal(t, 1, version)
	require.Equal(t, 7, fence)
	_, err = pool.Exec(ctx, `INSERT INTO taskling.protocol (singleton, version) VALUES (false, 9)`)
	require.Error(t, err, "one row")
}

// TestQueueUpgradeKeepsTasks: 0006 adds the waiters' queue to task rows of the previous version,
// empty.
func TestQueueUpgradeKeepsTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 5))
	_, err := pool.Exec(ctx, `INSERT INTO taskling.task_definition (application_name, task_name, tokens, holders, fence)
VALUES ('a', 't', 'I:6f1c0f4e-8d0a-4c55-9d43-0c8a1b0e2f11,S:0,G:7', 'E:7,P:0,A:1,D:1000000', 7)`)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, pool))
	var queue, holders string
	require.NoError(t, pool.QueryRow(ctx, `SELECT queue, holders FROM taskling.task_definition`).Scan(&queue, &holders))
	require.Empty(t, queue)
	require.Equal(t, "E:7,P:0,A:1,D:1000000", holders)
}
