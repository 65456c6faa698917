package submitstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/store/submitstore"
)

// statementLog records the statements a pool sends.
type statementLog struct {
	mu  sync.Mutex
	sql []string
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	l.sql = append(l.sql, d.SQL)
	l.mu.Unlock()
	return ctx
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// taken returns the statements sent since the last call that read or claim submissions.
func (l *statementLog) taken() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.sql {
		if strings.Contains(s, "taskling.submission") {
			n++
		}
	}
	l.sql = nil
	return n
}

// A worker's poll of an empty queue of a task that limits no key is two statements: the plain
// claim, which finds nothing, and the read of the task's bounds that says why. It must not claim a
// second time (idle workers poll at every MaxPollInterval). With a key limit set by an operator,
// the plain claim stands aside and the full claim decides.
func TestAnEmptyPollOfAPlainTaskClaimsOnce(t *testing.T) {
	ctx := context.Background()
	_, url := pgtest.NewDB(t)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	log := &statementLog{}
	cfg.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store := submitstore.New(execution.NewStore(pool, nil))

	var task, session int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO taskling.task_definition (application_name, task_name) VALUES ('a', 't') RETURNING id`).Scan(&task))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO taskling.session (host_name, pid, library_version) VALUES ('h', 1, 'test') RETURNING id`).Scan(&session))
	claim := func() []submitstore.ClaimedSubmission {
		t.Helper()
		log.taken()
		out, err := store.ClaimSubmissions(ctx, task, session, time.Minute, 4, execution.Settings{}, nil)
		require.NoError(t, err)
		return out
	}

	require.Empty(t, claim())
	require.Equal(t, 2, log.taken(), "an empty poll: the plain claim and the bounds")

	_, err = pool.Exec(ctx, `INSERT INTO taskling.submission (task_id, max_attempts) VALUES ($1, 1), ($1, 1)`, task)
	require.NoError(t, err)
	require.Len(t, claim(), 2)
	require.Equal(t, 1, log.taken(), "a poll that finds work: the plain claim alone")

	// An operator's limit for another key: the plain claim stands aside, the full claim claims.
	_, err = pool.Exec(ctx, `UPDATE taskling.task_definition SET key_overrides = $2 WHERE id = $1`, task,
		execution.FormatKeyLimits(map[string]int{"acme": 1}))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO taskling.submission (task_id, max_attempts) VALUES ($1, 1)`, task)
	require.NoError(t, err)
	require.Len(t, claim(), 1)
	require.Equal(t, 3, log.taken(), "the plain claim, the bounds, the unkeyed claim")
}

// A claim never takes more of a key than its room: those the statement claimed past it are given
// back in the same call, unclaimed, for a claim once the key has room.
func TestAClaimGivesBackWhatIsPastItsKeysRoom(t *testing.T) {
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	store := submitstore.New(execution.NewStore(pool, nil))
	var task, session int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO taskling.task_definition (application_name, task_name) VALUES ('a', 't') RETURNING id`).Scan(&task))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO taskling.session (host_name, pid, library_version) VALUES ('h', 1, 'test') RETURNING id`).Scan(&session))
	_, err := pool.Exec(ctx, `INSERT INTO taskling.submission (task_id, max_attempts, key) VALUES ($1, 1, 'a'), ($1, 1, 'a'), ($1, 1, 'a'), ($1, 1, 'b')`, task)
	require.NoError(t, err)

	out, err := store.ClaimSubmissions(ctx, task, session, time.Minute, 4, execution.Settings{KeyLimit: 1}, nil)
	require.NoError(t, err)
	keys := []string{}
	for _, sub := range out {
		keys = append(keys, sub.Key)
	}
	require.ElementsMatch(t, []string{"a", "b"}, keys, "one of each key: each has room for one")
	var claimed int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskling.submission WHERE claimed_by IS NOT NULL`).Scan(&claimed))
	require.Equal(t, 2, claimed, "the claims past key a's room were given back")
}
