package execution

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskling-go/taskling/internal/codes"
)

// A session is one client process: its executions in KeepAlive mode live by its heartbeat, which
// renews one row in place once per interval, however many executions it runs.

// RegisterSession creates the session of a client process and returns its id.
func (s *Store) RegisterSession(ctx context.Context, host string) (int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, `INSERT INTO taskling.session (host_name, pid, library_version) VALUES ($1, $2, $3) RETURNING id`,
		host, os.Getpid(), s.opts.LibraryVersion).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("register session: %w", err)
	}
	return id, nil
}

// CloseSession records that the client closed (informational: its executions still live by the
// session's heartbeat until they complete).
func (s *Store) CloseSession(ctx context.Context, id int64) error {
	if _, err := s.pool.Exec(ctx, `UPDATE taskling.session SET closed_at = clock_timestamp() WHERE id = $1`, id); err != nil {
		return fmt.Errorf("close session %d: %w", id, err)
	}
	return nil
}

// Lost says why a heartbeat found an execution no longer holding its slot.
type Lost int

const (
	NotLost   Lost = iota
	Reclaimed      // judged dead and its slot taken by another requester
	Ended          // its end is recorded (a release in flight, or a release given up on)
	Missing        // its row is gone (deleted by hand)
	// CancelRequested: it still holds its slot, but an operator cancelled the submission it runs.
	CancelRequested
)

// heartbeatSQL renews the session, then — in a second statement, whose snapshot follows the
// wait for any reclaim holding the session row's lock — reports the executions that ended or
// vanished — or whose id now names another session's execution (a failover that lost commits
// rewinds the id sequence). A reclaim locks the session row and rechecks it, so either the reclaim sees this
// heartbeat (and aborts), or this heartbeat sees the reclaim.
const (
	renewSessionSQL = `UPDATE taskling.session SET last_heartbeat = clock_timestamp() WHERE id = $1`
	lostSQL         = `
SELECT x.id, t.id IS NULL, e.outcome
FROM unnest($1::bigint[]) AS x(id)
LEFT JOIN taskling.task_execution t ON t.id = x.id AND t.session_id IS NOT DISTINCT FROM $2
LEFT JOIN taskling.execution_end e ON e.execution_id = x.id
WHERE t.id IS NULL OR e.execution_id IS NOT NULL`
	// cancelledSQL reports the submission runs among the executions whose submission an
	// operator cancelled, with the operator's reason (sent only for submission runs: a heartbeat
	// without any works on a database not yet migrated to submissions).
	cancelledSQL = `
SELECT s.execution_id, coalesce(s.cancel_reason, '') FROM taskling.submission s
WHERE s.execution_id = ANY($1) AND s.status = $2::smallint AND s.cancel_requested_at IS NOT NULL`
)

// Heartbeat renews session's lease for executions, in one transaction of one round trip, and
// returns those of them that no longer hold their slot. renewed is false when the session row is
// gone (every execution of the session must stop).
// submissionRuns, a subset of executions, run submissions: a cancelled one is reported
// CancelRequested, and the operator's reason (if any) is in cancelReasons.
func (s *Store) Heartbeat(ctx context.Context, session int64, executions, submissionRuns []int64) (lost map[int64]Lost, cancelReasons map[int64]string,
	renewed bool, err error) {
	lost, cancelReasons = map[int64]Lost{}, map[int64]string{}
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	b.Queue(renewSessionSQL, session).Exec(func(ct pgconn.CommandTag) error {
		renewed = ct.RowsAffected() == 1
		return nil
	})
	if len(executions) > 0 {
		b.Queue(lostSQL, executions, session).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id int64
				var missing bool
				var outcome *int16
				if err := rows.Scan(&id, &missing, &outcome); err != nil {
					return err
				}
				switch {
				case missing:
					lost[id] = Missing
				case outcome != nil && *outcome == codes.OutcomeReclaimed:
					lost[id] = Reclaimed
				default:
					lost[id] = Ended
				}
			}
			return nil
		})
	}
	if len(submissionRuns) > 0 {
		b.Queue(cancelledSQL, submissionRuns, codes.SubmissionInProgress).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id int64
				var reason string
				if err := rows.Scan(&id, &reason); err != nil {
					return err
				}
				if _, ended := lost[id]; !ended {
					lost[id] = CancelRequested
					cancelReasons[id] = reason
				}
			}
			return rows.Err()
		})
	}
	var timeline int32
	b.Queue(timelineSQL).QueryRow(func(row pgx.Row) error { return row.Scan(&timeline) })
	b.Queue("COMMIT")
	s.hb.mu.Lock()
	defer s.hb.mu.Unlock()
	if s.hb.conn == nil {
		conn, err := connectLike(ctx, s.pool.Pool)
		if err != nil {
			return nil, nil, false, fmt.Errorf("heartbeat of session %d: connect: %w", session, s.seen(err))
		}
		s.hb.conn = conn
	}
	if err := s.hb.conn.SendBatch(ctx, b).Close(); err != nil {
		// An aborted or cut-off batch may leave the transaction open: never reuse the connection.
		s.hb.closeLocked(ctx)
		return nil, nil, false, fmt.Errorf("heartbeat of session %d: %w", session, s.seen(err))
	}
	s.sawTimeline(timeline)
	return lost, cancelReasons, renewed, nil
}

// timelineExpr is taskling.timeline() written out: heartbeats also run on schemas older than it,
// and the function, STABLE around a volatile call, is not inlined: its body was parsed again at
// every call, once in every token transaction (the clock read, or the fast path's write).
const timelineExpr = `('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer`

const timelineSQL = `SELECT ` + timelineExpr

// heartbeatConn is the connection heartbeats are sent on: one of their own, opened like the
// pool's, so that a pool busy with token transactions (or exhausted by the application) never
// holds a heartbeat back past a holder's threshold.
type heartbeatConn struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

func (h *heartbeatConn) closeLocked(ctx context.Context) {
	if h.conn == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = h.conn.Close(cctx)
	h.conn = nil
}

// CloseHeartbeats closes the heartbeat connection; the next heartbeat opens it again.
func (s *Store) CloseHeartbeats(ctx context.Context) {
	s.hb.mu.Lock()
	defer s.hb.mu.Unlock()
	s.hb.closeLocked(ctx)
}
