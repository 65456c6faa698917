package pgtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/taskling-go/taskling/internal/devtools/testutil"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

func currentDatabase(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var name string
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT current_database()").Scan(&name))
	return name
}

func hasTaskTable(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT to_regclass('taskling.task_definition') IS NOT NULL").Scan(&ok))
	return ok
}

func TestNewDBGivesDistinctMigratedDatabases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool1, url1 := NewDB(t)
	pool2, url2 := NewDB(t)
	require.NotEqual(t, url1, url2)
	require.NotEqual(t, currentDatabase(t, pool1), currentDatabase(t, pool2))
	require.True(t, hasTaskTable(t, pool1))
	require.True(t, hasTaskTable(t, pool2))

	_, err := pool1.Exec(ctx, "INSERT INTO taskling.task_definition (application_name, task_name) VALUES ('app', 'task')")
	require.NoError(t, err)
	var n1, n2 int
	require.NoError(t, pool1.QueryRow(ctx, "SELECT count(*) FROM taskling.task_definition").Scan(&n1))
	require.NoError(t, pool2.QueryRow(ctx, "SELECT count(*) FROM taskling.task_definition").Scan(&n2))
	require.Equal(t, 1, n1)
	require.Equal(t, 0, n2, "databases must not share rows")
}

func TestNewDBIsParallelSafe(t *testing.T) {
	t.Parallel()
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			pool, _ := NewDB(t)
			require.True(t, hasTaskTable(t, pool))
			_, err := pool.Exec(context.Background(), "INSERT INTO taskling.task_definition (application_name, task_name) VALUES ('app', $1)", fmt.Sprint(i))
			require.NoError(t, err)
		})
	}
}

func TestNewEmptyDBHasNoSchema(t *testing.T) {
	t.Parallel()
	pool, url := NewEmptyDB(t)
	require.Contains(t, url, currentDatabase(t, pool))
	require.False(t, hasTaskTable(t, pool))
}

func TestDatabaseIsDroppedWhenTheTestEnds(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("uses a database", func(t *testing.T) {
		pool, _ := NewDB(t)
		name = currentDatabase(t, pool)
	})
	admin, err := pgxpool.New(context.Background(), DatabaseURL(t))
	require.NoError(t, err)
	defer admin.Close()
	var exists bool
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	require.False(t, exists, "database %s outlived its test", name)
}

func TestTemplateIsReadOnlyAndClosed(t *testing.T) {
	t.Parallel()
	NewDB(t) // makes sure the template exists
	name, err := ensureTemplate(context.Background(), DatabaseURL(t))
	require.NoError(t, err)
	admin, err := pgxpool.New(context.Background(), DatabaseURL(t))
	require.NoError(t, err)
	defer admin.Close()
	var isTemplate, allowConn bool
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT datistemplate, datallowconn FROM pg_database WHERE datname = $1", name).Scan(&isTemplate, &allowConn))
	require.True(t, isTemplate)
	require.False(t, allowConn, "a connection to the template would make CREATE DATABASE … TEMPLATE fail")
}

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable": "postgres://postgres@127.0.0.1:5432/test_x?sslmode=disable",
		"postgresql://u:p@h/db":      "postgresql://u:p@h/test_x",
		"postgres://h":               "postgres://h/test_x",
		"host=h user=u dbname=other": "host=h user=u dbname=other dbname=test_x",
	} {
		got, err := withDatabase(in, "test_x")
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
}

func TestRandomNamesAreSafeIdentifiers(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		name, err := randomName("test_")
		require.NoError(t, err)
		require.Regexp(t, `^test_[0-9a-f]{16}$`, name)
		require.False(t, seen[name])
		seen[name] = true
	}
	require.Equal(t, `"test_0a"`, ident("test_0a"))
	require.Equal(t, `"a""b"`, ident(`a"b`))
}
