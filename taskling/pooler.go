package taskling

import (
	"fmt"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolerMode names the connection pooler between a Client's pool and PostgreSQL (Config.Pooler).
type PoolerMode int

const (
	// PoolerNone (the default): the pool connects to PostgreSQL itself, or through a pooler in
	// session mode, which keeps one server connection per client connection.
	PoolerNone PoolerMode = iota
	// PoolerTransaction: the pool connects through a pooler in transaction mode (PgBouncer's
	// pool_mode = transaction) that cannot carry prepared statements (PgBouncer before 1.21, or
	// max_prepared_statements = 0), which lends a server connection for one transaction at a
	// time. A statement prepared on one would be run on whichever comes next: NewClient requires
	// a pool whose ConnConfig.DefaultQueryExecMode prepares none across round trips,
	// QueryExecModeCacheDescribe (recommended) or QueryExecModeExec. A LISTEN would land on a
	// lent connection too, so the client listens only on Config.ListenerConnString; without it,
	// waiters in other processes learn of a freed slot by polling (Config.MaxPollInterval).
	PoolerTransaction
	// PoolerTransactionPrepared is PoolerTransaction for a pooler that carries protocol-level
	// prepared statements (PgBouncer 1.21 or later with max_prepared_statements > 0): pgx's
	// default exec mode is allowed too, QueryExecModeDescribeExec still not. (Untested here:
	// the tests run Debian 12's PgBouncer 1.18.)
	PoolerTransactionPrepared
)

func (m PoolerMode) String() string {
	switch m {
	case PoolerNone:
		return "PoolerNone"
	case PoolerTransaction:
		return "PoolerTransaction"
	case PoolerTransactionPrepared:
		return "PoolerTransactionPrepared"
	}
	return "PoolerMode(" + strconv.Itoa(int(m)) + ")"
}

// transaction reports whether the pooler lends server connections per transaction.
func (m PoolerMode) transaction() bool {
	return m == PoolerTransaction || m == PoolerTransactionPrepared
}

// listenerConfig checks Config.Pooler and Config.ListenerConnString against the pool, and
// returns the listener's connection settings (nil: listen like the pool, or not at all).
func (cfg *Config) listenerConfig(pool *pgxpool.Pool) (*pgx.ConnConfig, error) {
	if cfg.Pooler != PoolerNone && !cfg.Pooler.transaction() {
		return nil, fmt.Errorf("%w: Config.Pooler is %s; want PoolerNone, PoolerTransaction or PoolerTransactionPrepared", ErrInvalidArgument, cfg.Pooler)
	}
	conn := pool.Config().ConnConfig
	if cfg.Pooler.transaction() {
		if err := checkExecMode(cfg.Pooler, conn.DefaultQueryExecMode); err != nil {
			return nil, err
		}
	}
	if cfg.ListenerConnString == "" {
		return nil, nil
	}
	if !cfg.Pooler.transaction() {
		return nil, fmt.Errorf("%w: Config.ListenerConnString is set but Config.Pooler is %s: it is for a pool behind a transaction pooler "+
			"(set Config.Pooler to PoolerTransaction); a pool without one listens on a connection like its own", ErrInvalidArgument, cfg.Pooler)
	}
	listener, err := pgx.ParseConfig(cfg.ListenerConnString)
	if err != nil {
		return nil, fmt.Errorf("%w: Config.ListenerConnString: %w", ErrInvalidArgument, err)
	}
	if addr, ok := sameServer(conn, listener); ok {
		return nil, fmt.Errorf("%w: Config.ListenerConnString names %s, which the pool connects to: the transaction pooler, "+
			"where a LISTEN does not last; name the PostgreSQL server itself", ErrInvalidArgument, addr)
	}
	return listener, nil
}

// checkExecMode refuses the exec modes that fail behind the transaction pooler m.
func checkExecMode(m PoolerMode, mode pgx.QueryExecMode) error {
	const fix = "set it to pgx.QueryExecModeCacheDescribe (URL: default_query_exec_mode=cache_describe)"
	switch mode {
	case pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeExec:
		return nil
	case pgx.QueryExecModeCacheStatement:
		if m == PoolerTransactionPrepared {
			return nil
		}
		return fmt.Errorf("%w: Config.Pooler is %s but the pool's ConnConfig.DefaultQueryExecMode is %q, "+
			"which prepares a statement on one server connection and runs it on whichever the pooler lends next "+
			"(\"prepared statement … already exists\"); %s, or, with PgBouncer 1.21+ and max_prepared_statements > 0, "+
			"set Config.Pooler to PoolerTransactionPrepared", ErrInvalidArgument, m, mode, fix)
	case pgx.QueryExecModeDescribeExec:
		return fmt.Errorf("%w: Config.Pooler is %s but the pool's ConnConfig.DefaultQueryExecMode is %q, "+
			"whose describe and execute may reach different server connections; %s", ErrInvalidArgument, m, mode, fix)
	case pgx.QueryExecModeSimpleProtocol:
		return fmt.Errorf("%w: Config.Pooler is %s but the pool's ConnConfig.DefaultQueryExecMode is %q, "+
			"which sends parameters without the types the block functions need; %s", ErrInvalidArgument, m, mode, fix)
	}
	return fmt.Errorf("%w: the pool's ConnConfig.DefaultQueryExecMode is %d, unknown to this version of taskling; %s", ErrInvalidArgument, mode, fix)
}

// sameServer reports an address (host:port) that both configurations connect to, if any.
func sameServer(a, b *pgx.ConnConfig) (string, bool) {
	addrs := func(c *pgx.ConnConfig) []string {
		out := []string{net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))}
		for _, f := range c.Fallbacks {
			out = append(out, net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))))
		}
		return out
	}
	seen := map[string]bool{}
	for _, s := range addrs(a) {
		seen[s] = true
	}
	for _, s := range addrs(b) {
		if seen[s] {
			return s, true
		}
	}
	return "", false
}
