package taskling_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// lazyPool returns a pool on connString that never connects (no MinConns, never used): NewClient's
// checks of the pooler settings read only its configuration.
func lazyPool(t *testing.T, connString string, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(connString)
	require.NoError(t, err)
	if mode != 0 {
		cfg.ConnConfig.DefaultQueryExecMode = mode
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestNewClientPoolerChecks: each misconfiguration of a pool behind a transaction pooler that can
// be seen without connecting is refused by NewClient with an error naming the field to fix.
func TestNewClientPoolerChecks(t *testing.T) {
	t.Parallel()
	const bouncer = "postgres://u:p@127.0.0.1:6432/db?sslmode=disable"
	const server = "postgres://u:p@127.0.0.1:5432/db?sslmode=disable"
	cases := []struct {
		name    string
		url     string
		mode    pgx.QueryExecMode // 0: as the URL says (pgx's default: cache_statement)
		cfg     taskling.Config
		wantErr string // "" : accepted
	}{
		{name: "unknown pooler", url: server, cfg: taskling.Config{Pooler: taskling.PoolerMode(7)}, wantErr: "Config.Pooler is PoolerMode(7)"},
		{name: "pgx default, pooler with prepared statements", url: bouncer, cfg: taskling.Config{Pooler: taskling.PoolerTransactionPrepared, ListenerConnString: server}},
		{name: "describe_exec, pooler with prepared statements", url: bouncer, mode: pgx.QueryExecModeDescribeExec,
			cfg: taskling.Config{Pooler: taskling.PoolerTransactionPrepared}, wantErr: `ConnConfig.DefaultQueryExecMode is "describe exec"`},
		{name: "pgx default exec mode", url: bouncer, cfg: taskling.Config{Pooler: taskling.PoolerTransaction},
			wantErr: `ConnConfig.DefaultQueryExecMode is "cache statement"`},
		{name: "cache_statement from the URL", url: bouncer + "&default_query_exec_mode=cache_statement", cfg: taskling.Config{Pooler: taskling.PoolerTransaction},
			wantErr: `ConnConfig.DefaultQueryExecMode is "cache statement"`},
		{name: "describe_exec", url: bouncer, mode: pgx.QueryExecModeDescribeExec, cfg: taskling.Config{Pooler: taskling.PoolerTransaction},
			wantErr: `ConnConfig.DefaultQueryExecMode is "describe exec"`},
		{name: "listener without pooler", url: bouncer + "&default_query_exec_mode=cache_describe", cfg: taskling.Config{ListenerConnString: server},
			wantErr: "Config.ListenerConnString is set but Config.Pooler is PoolerNone"},
		{name: "listener unparsable", url: bouncer, mode: pgx.QueryExecModeExec,
			cfg: taskling.Config{Pooler: taskling.PoolerTransaction, ListenerConnString: "postgres://u:p@127.0.0.1:notaport/db"}, wantErr: "Config.ListenerConnString: "},
		{name: "listener through the pooler", url: bouncer, mode: pgx.QueryExecModeExec,
			cfg:     taskling.Config{Pooler: taskling.PoolerTransaction, ListenerConnString: "host=127.0.0.1 port=6432 user=u dbname=db"},
			wantErr: "Config.ListenerConnString names 127.0.0.1:6432, which the pool connects to"},
		{name: "cache_describe from the URL", url: bouncer + "&default_query_exec_mode=cache_describe",
			cfg: taskling.Config{Pooler: taskling.PoolerTransaction, ListenerConnString: server}},
		{name: "simple protocol", url: bouncer, mode: pgx.QueryExecModeSimpleProtocol, cfg: taskling.Config{Pooler: taskling.PoolerTransaction},
			wantErr: `ConnConfig.DefaultQueryExecMode is "simple protocol"`},
		{name: "unknown exec mode", url: bouncer, mode: pgx.QueryExecMode(99), cfg: taskling.Config{Pooler: taskling.PoolerTransaction},
			wantErr: "DefaultQueryExecMode is 99, unknown"},
		{name: "exec, polling", url: bouncer, mode: pgx.QueryExecModeExec, cfg: taskling.Config{Pooler: taskling.PoolerTransaction}},
		{name: "no pooler, pgx default", url: server},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.HostName = "test-host"
			c, err := taskling.NewClient(lazyPool(t, tc.url, tc.mode), &cfg)
			if tc.wantErr == "" {
				require.NoError(t, err)
				c.Close()
				return
			}
			require.Error(t, err)
			require.True(t, errors.Is(err, taskling.ErrInvalidArgument), "%v does not wrap ErrInvalidArgument", err)
			require.Contains(t, err.Error(), tc.wantErr)
			require.NotContains(t, err.Error(), ":p@", "the error must not show the password")
		})
	}
}
