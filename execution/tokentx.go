package execution

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// tokenTx is one token transaction on a task, serving a batch of acquires and releases in two
// round trips: readState (round trip 1: BEGIN, write the task row — which takes its lock and
// reserves execution ids — then read the holders' liveness and duplicate references under it),
// decide (pure), writePlan (round trip 2: the token list and fence, executions and events,
// reclaims, completions, schedule claims, a notification; COMMIT).
//
// It sets each op's outcome; it returns an error when the whole transaction failed, errRollback
// when there was nothing to write.
func (s *Store) tokenTx(ctx context.Context, tx *txConn, taskID int64, ops []*op) error {
	reqs := make([]request, len(ops))
	for i, o := range ops {
		reqs[i] = o.request
	}
	st, err := s.readState(ctx, tx, taskID, reqs)
	if err != nil {
		return err
	}
	plan, err := decide(st, reqs, uuid.New)
	if err != nil {
		return err
	}
	if plan.nothingToWrite(st.tokens) {
		for i, o := range ops {
			o.outcome = plan.outcomes[i]
		}
		return errRollback
	}
	if err := s.writePlan(ctx, tx, taskID, reqs, &plan); err != nil {
		return err
	}
	for i, o := range ops {
		o.outcome = plan.outcomes[i]
		o.outcome.acquire.Reclaimed = plan.outcomes[i].reclaim // reported only once committed
	}
	return nil
}

// readState runs round trip 1. Each statement is queued with the code that reads its result, so
// the order in which results are read cannot drift from the order in which they were queued.
func (s *Store) readState(ctx context.Context, tx *txConn, taskID int64, reqs []request) (txState, error) {
	st := txState{holders: map[int64]holder{}, duplicates: map[string][]int64{}}
	acquires := 0
	var refs []string
	for _, r := range reqs {
		if a := r.acquire; a != nil {
			acquires++
			if a.Idempotent && a.ReferenceValue != nil {
				refs = append(refs, *a.ReferenceValue)
			}
		}
	}
	b := tx.begin()
	found := false
	b.Queue(lockTaskSQL, taskID).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			found = true
			var reserved int64
			var mode *int16
			o := &st.overrides
			if err := rows.Scan(&reserved, &st.tokens, &st.fence, &o.ConcurrencyLimit, &o.Enabled, &mode, &o.KeepAliveInterval,
				&o.KeepAliveDeathThreshold, &o.OverrideThreshold, &st.declaredLimit, &st.declaredBy, &st.waiters, &st.protocol); err != nil {
				return err
			}
			o.DeathMode = mode
			st.reserved = append(st.reserved, reserved)
		}
		return nil
	})
	if acquires > 1 {
		b.Queue(moreIDsSQL, acquires-1).Query(func(rows pgx.Rows) error {
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			st.reserved = append(st.reserved, ids...)
			return err
		})
	}
	if acquires > 0 { // releases need no liveness: Return is identity-checked
		b.Queue(holdersSQL, taskID).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id, expiresUS int64
				var alive bool
				if err := rows.Scan(&id, &alive, &expiresUS); err != nil {
					return err
				}
				st.holders[id] = holder{alive: alive, expiresIn: time.Duration(expiresUS) * time.Microsecond}
			}
			return nil
		})
	}
	if len(refs) > 0 {
		b.Queue(duplicatesSQL, taskID, refs).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id int64
				var ref string
				if err := rows.Scan(&id, &ref); err != nil {
					return err
				}
				st.duplicates[ref] = append(st.duplicates[ref], id)
			}
			return nil
		})
	}
	if err := tx.send(ctx, b); err != nil {
		return st, err
	}
	if !found {
		return st, fmt.Errorf("task row %d is gone", taskID)
	}
	return st, nil
}

// writePlan runs round trip 2 and fills in what only the database knows (start times), then
// commits.
func (s *Store) writePlan(ctx context.Context, tx *txConn, taskID int64, reqs []request, plan *txPlan) error {
	b := &pgx.Batch{}
	b.Queue(updateTokensSQL, taskID, plan.tokens, plan.fence, plan.declaredLimit, plan.declaredBy, plan.markWaiting)
	if len(plan.inserts) > 0 {
		w := s.executionRows(reqs, plan)
		b.Queue(insertExecutionsSQL, w.args(taskID, s.opts.LibraryVersion)...).Query(func(rows pgx.Rows) error {
			startedAt := map[int64]time.Time{}
			for rows.Next() {
				var id int64
				var at time.Time
				if err := rows.Scan(&id, &at); err != nil {
					return err
				}
				startedAt[id] = at
			}
			for _, i := range plan.inserts {
				res := &plan.outcomes[i].acquire
				res.StartedAt = startedAt[res.ExecutionID]
			}
			return nil
		})
		b.Queue(insertEventsSQL, w.eventExec, w.eventType, w.eventMsg)
	}
	if len(plan.reclaims) > 0 {
		b.Queue(reclaimSQL, plan.reclaims)
	}
	for _, i := range plan.claims {
		queueClaim(b, *reqs[i].acquire)
	}
	if len(plan.completes) > 0 {
		ids, failed := make([]int64, len(plan.completes)), make([]bool, len(plan.completes))
		byID := make(map[int64]*ReleaseResult, len(plan.completes))
		for k, i := range plan.completes {
			r := reqs[i].release
			ids[k], failed[k] = r.ExecutionID, r.Failed
			byID[r.ExecutionID] = &plan.outcomes[i].release
		}
		b.Queue(completeSQL, ids, failed).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id int64
				var wasReclaimed bool
				if err := rows.Scan(&id, &wasReclaimed); err != nil {
					return err
				}
				if res := byID[id]; res != nil {
					res.LeaseLost = res.LeaseLost || wasReclaimed
				}
			}
			return nil
		})
	}
	if plan.notify {
		b.Queue(notifySQL, taskID)
	}
	// A holder's lease is measured from here: the execution row's last_keep_alive is set by this
	// round trip, so on the DB clock it is later than this instant. (Measuring from the first
	// round trip would spend the lease on the wait for the row lock.)
	sentAt := time.Now()
	for i, r := range reqs {
		if r.acquire != nil {
			plan.outcomes[i].acquire.SentAt = sentAt
		}
	}
	return tx.commit(ctx, b)
}

// txConn sends the two batches of one token transaction: the first carries BEGIN, the last
// COMMIT.
type txConn struct {
	conn      *pgx.Conn
	beginStmt string
	open      bool
}

// begin returns the first batch: BEGIN and the idle timeout.
func (t *txConn) begin() *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(t.beginStmt)
	// A client cut off between the two round trips would otherwise keep the task row locked until
	// its socket dies (TCP keepalive: hours). The server ends such a session instead.
	b.Queue(idleTimeoutSQL)
	return b
}

// send sends b, runs each queued statement's reader, and returns the first error.
func (t *txConn) send(ctx context.Context, b *pgx.Batch) error {
	t.open = true
	return t.conn.SendBatch(ctx, b).Close()
}

// commit sends b plus COMMIT; the transaction is over once it returns nil.
func (t *txConn) commit(ctx context.Context, b *pgx.Batch) error {
	b.Queue("COMMIT")
	if err := t.send(ctx, b); err != nil {
		return err
	}
	t.open = false
	return nil
}

// idleInTransactionTimeout bounds how long a token transaction may sit idle between its two round
// trips before the server ends its session, releasing the task row's lock.
const idleInTransactionTimeout = 5 * time.Second

var idleTimeoutSQL = fmt.Sprintf("SET LOCAL idle_in_transaction_session_timeout = %d", idleInTransactionTimeout.Milliseconds())

// errRollback ends a transaction that must write nothing; Acquire turns it into a result.
var errRollback = errors.New("rollback")

// isRetryable reports whether err is a serialization failure (40001) or a deadlock (40P01): the
// transaction did nothing and may simply run again.
func isRetryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}
