package execution

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskling-go/taskling/internal/codes"
	"github.com/taskling-go/taskling/tokens"
)

// Direct handoff (protocol 4, 0013_handoff.sql). A waiter's ticket is direct when its waiter can
// take a slot granted to it without a token transaction of its own. A token transaction that
// leaves a slot free while a direct ticket is first in line grants the slot to that ticket — the
// ticket's id is the execution's, its session the holder's — and records the grant in
// taskling.handoff. The waiter, woken by the notification that names its ticket, takes the grant
// (TakeHandoff): it deletes the row and inserts its execution in one statement, and the task row
// is not touched. So a handover is one transaction on the task row instead of two, and the slot
// is busy again as soon as the release commits.
//
// A grant not taken within the ticket's offer window lapses: the next token transaction of the
// task locks its row, judges its holder dead and takes the slot back, marking the row lapsed (it
// stays, the record of a fence no execution carries, until the cleanup). A take racing that
// waits for the row's lock and then finds nothing to take; a take that came first leaves no row,
// and its holder is judged like any other.

// handoff is a grant to a direct ticket not taken yet, as a token transaction read it.
type handoff struct {
	lapseUS int64 // when the grant lapses, on the DB clock
	lapsed  bool  // lapsed, and its row locked by this transaction: the slot may be taken back
}

func (h handoff) expiresIn(nowUS int64) time.Duration {
	if h.lapsed {
		return -time.Microsecond
	}
	return time.Duration(h.lapseUS-nowUS) * time.Microsecond
}

// handoffGrant is a grant to a direct ticket a plan writes.
type handoffGrant struct {
	exec, fence       int64
	token             uuid.UUID
	window, threshold time.Duration
	key               string
	cost              int
}

// handoffRows are the grants to direct tickets a transaction writes, as column arrays.
type handoffRows struct {
	execs, tasks, fences, windows, thresholds []int64
	tokens, keys                              []string
	costs                                     []int32
}

func (r *handoffRows) add(task int64, h handoffGrant) {
	r.execs, r.tasks, r.fences = append(r.execs, h.exec), append(r.tasks, task), append(r.fences, h.fence)
	r.tokens = append(r.tokens, h.token.String())
	r.windows, r.thresholds = append(r.windows, h.window.Microseconds()), append(r.thresholds, h.threshold.Microseconds())
	r.keys, r.costs = append(r.keys, h.key), append(r.costs, int32(max(h.cost, 1)))
}

// args are insertHandoffsSQL's arguments; keyed: with the keys and costs (a schema of 0022).
func (r *handoffRows) args(keyed bool) []any {
	a := []any{r.execs, r.tasks, r.tokens, r.fences, r.windows, r.thresholds}
	if keyed {
		a = append(a, r.keys, r.costs)
	}
	return a
}

// handOff grants the free slots to the direct tickets first in line. It stops at a ticket that
// is not direct (offered the slot, as before), so the line's order holds; and wherever a grant
// would need what the transaction does not know or an acquire would decide differently: a task
// disabled or whose limit an operator changed since the last acquire adjusted it, a new
// timeline's hold, holders whose liveness was not read. A transaction of releases only reads no
// heartbeats: it counts every holder alive (it grants unused slots only) and every ticket (one
// whose waiter died lets its grant lapse).
func (d *decider) handOff() error {
	st := d.st
	alive := d.alive
	if st.heartbeats == nil {
		alive = func(int64) bool { return true }
	}
	if !d.mayHandOff() {
		return nil
	}
	for len(d.queue.tickets) > 0 && d.free() > 0 {
		t := d.queue.tickets[0]
		if !t.direct {
			return nil
		}
		if hold, err := d.holdLeft(t.threshold); err != nil || hold > 0 {
			return err
		}
		var g tokens.GrantResult
		if d.list, g = d.list.Grant(t.id, alive); !g.Granted {
			return nil
		}
		d.queue.remove(t.id)
		if g.Reclaimed != 0 {
			d.reclaim(g.Reclaimed)
		}
		d.plan.fence = max(d.plan.fence, st.epoch.base) + 1
		d.addTerm(term{exec: t.id, session: t.session, grantedUS: pendingUS, threshold: t.threshold})
		d.plan.handoffs = append(d.plan.handoffs, handoffGrant{exec: t.id, fence: d.plan.fence, token: g.TokenID,
			window: t.window, threshold: t.threshold})
	}
	return nil
}

// mayHandOff reports whether a freed slot may be granted to a direct ticket now: not where a
// grant would need what the transaction does not know or an acquire would decide differently.
func (d *decider) mayHandOff() bool {
	st := d.st
	o := st.overrides
	switch {
	case st.handoffs == nil, st.protocol < 4, st.protocol > ProtocolVersion, d.list.IsUnlimited(),
		o.Enabled != nil && !*o.Enabled, o.ConcurrencyLimit != nil && *o.ConcurrencyLimit != d.list.Limit(),
		o.DeathMode != nil && *o.DeathMode != codes.DeathKeepAlive, // the grant lives by the waiter's session
		len(d.missingTerms()) > 0 && st.legacy == nil:
		return false
	}
	return true
}

// handed lists the tickets granted a slot now.
func (d *decider) handed() []int64 {
	ids := make([]int64, len(d.plan.handoffs))
	for i, h := range d.plan.handoffs {
		ids[i] = h.exec
	}
	return ids
}

// giveBack returns the slot granted to the ticket of a waiter that leaves: a grant it did not
// take, or one whose take's outcome it does not know (its execution then ends as failed).
func (d *decider) giveBack(ticket int64) {
	if _, ok := d.terms[ticket]; !ok {
		return
	}
	if d.st.blind { // whether its grant was taken is read under the lock
		d.tripped = true
		return
	}
	for _, t := range d.list.Tokens {
		if t.Grantee != ticket || (t.Status != tokens.Held && t.Status != tokens.Retiring) {
			continue
		}
		var held bool
		if d.list, held = d.list.Return(t.ID, ticket); held {
			d.freed = true
		}
		break
	}
	if d.keys != nil {
		d.keys.dropHold(ticket)
	}
	// Its row lapses (a take still in flight finishes first, and then there is no row to mark);
	// an execution a take started anyway ends as failed.
	d.plan.lapsed = append(d.plan.lapsed, ticket)
	d.plan.abandoned = append(d.plan.abandoned, ticket)
	d.dropTerm(ticket)
}

// handoffsSQL reads the grants to direct tickets of tasks $1 not taken yet, and locks those that
// lapsed (the only ones a transaction may take back). A row the lock no longer finds (a take
// deleted it since the statement's snapshot) reads as not lapsed: if its lapse passed, it was
// taken.
const handoffsSQL = `
WITH lapsed AS (
    SELECT l.exec_id FROM taskling.handoff l
    WHERE l.task_id = ANY($1) AND l.lapsed_at IS NULL AND l.lapses_at <= clock_timestamp()
    FOR UPDATE OF l)
SELECT h.task_id, h.exec_id, (extract(epoch FROM h.lapses_at) * 1000000)::bigint, h.exec_id IN (SELECT exec_id FROM lapsed)
FROM taskling.handoff h WHERE h.task_id = ANY($1) AND h.lapsed_at IS NULL`

// queueHandoffRead queues the read into handoffs (by task, then ticket); a task with none gets
// an empty map.
func queueHandoffRead(b *txBatch, ids []int64, handoffs map[int64]map[int64]handoff) {
	for _, id := range ids {
		handoffs[id] = map[int64]handoff{}
	}
	b.Queue(handoffsSQL, ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var task, exec int64
			var h handoff
			if err := rows.Scan(&task, &exec, &h.lapseUS, &h.lapsed); err != nil {
				return err
			}
			handoffs[task][exec] = h
		}
		return rows.Err()
	})
}

// settleHandoffs drops the grants taken meanwhile: lapsed by the clock but not locked.
func settleHandoffs(handoffs map[int64]handoff, nowUS int64) {
	for exec, h := range handoffs {
		if !h.lapsed && h.lapseUS <= nowUS {
			delete(handoffs, exec)
		}
	}
}

const (
	insertHandoffsSQL = `
INSERT INTO taskling.handoff (exec_id, task_id, token_id, fence, granted_at, lapses_at, death_threshold, key, cost)
SELECT r.exec, r.task, r.token::uuid, r.fence, clock_timestamp(), clock_timestamp() + r.window_us * interval '1 microsecond',
    r.threshold_us * interval '1 microsecond', r.key, r.cost
FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::text[], $8::integer[])
    AS r(exec, task, token, fence, window_us, threshold_us, key, cost)
ORDER BY r.fence`
	lapseHandoffsSQL = `UPDATE taskling.handoff SET lapsed_at = clock_timestamp() WHERE exec_id = ANY($1) AND lapsed_at IS NULL`
)

// takeHandoffSQL takes the grant to ticket $1 of task $2: its row goes, its execution comes, with
// the ticket's key and cost, in one statement. The execution starts at its grant, as every
// grant's does. A start of claimed submission $11 starts its attempt there too, as linkSQL does
// ($12 in progress, $13 waiting): the attempt is 0 when the submission is no longer this
// session's to start (cancelled, or claimed by another worker), as for a grant of an acquire.
const takeHandoffSQL = `
WITH h AS (DELETE FROM taskling.handoff WHERE exec_id = $1 AND task_id = $2 AND lapsed_at IS NULL
           RETURNING exec_id, token_id, fence, granted_at, death_threshold, key, cost),
e AS (
    INSERT INTO taskling.task_execution (
        id, task_id, started_at, last_keep_alive, host_name, session_id,
        death_mode, keep_alive_interval, keep_alive_death_threshold, override_threshold,
        reference_value, idempotent, header, blocked, token_id, fence, library_version, key, cost)
    SELECT h.exec_id, $2, h.granted_at, clock_timestamp(), $3, $4, $5, $6, h.death_threshold, $7,
        $8, false, $9::jsonb, false, h.token_id, h.fence, $10, h.key, h.cost
    FROM h
    RETURNING id, token_id, fence, started_at, keep_alive_death_threshold),
s AS (
    UPDATE taskling.submission s
    SET status = $12::smallint, attempts = s.attempts + 1, execution_id = e.id, claimed_by = NULL, updated_at = clock_timestamp()
    FROM e WHERE s.id = $11 AND s.status = $13::smallint AND s.claimed_by = $4
    RETURNING s.id, s.attempts, e.id AS exec),
a AS (INSERT INTO taskling.submission_attempt (submission_id, attempt, execution_id) SELECT id, attempts, exec FROM s RETURNING attempt)
SELECT e.id, e.token_id, e.fence, e.started_at, e.keep_alive_death_threshold, coalesce((SELECT attempt FROM a), 0) FROM e`

// ErrNotHandedOff: no slot was granted to the ticket, or it was taken back.
var ErrNotHandedOff = errors.New("no slot granted to the ticket")

// TakeHandoffRequest takes the slot granted to a direct ticket.
type TakeHandoffRequest struct {
	Requester
	Ticket int64
	// Submission is the claimed submission whose attempt the grant starts (0: none).
	Submission     int64
	ReferenceValue *string
	Header         []byte // JSON, or nil
	// Effective are the settings the waiter's last attempt was told; the death threshold is the
	// one its grant was made with.
	Effective Settings
}

// TakeHandoff takes the slot granted to req.Ticket and starts its execution. It returns
// ErrNotHandedOff when there is none to take. Its one statement is not cancelled with ctx once
// sent (see txConn.commit): a taken slot is never left unknown to its waiter for a cancellation.
func (s *Store) TakeHandoff(ctx context.Context, req TakeHandoffRequest) (AcquireResult, error) {
	effective := req.Effective
	effective.DeathMode = codes.DeathKeepAlive // as its grant's term: it lives by the session's heartbeat
	res := AcquireResult{Effective: effective}
	var header any
	if req.Header != nil {
		header = string(req.Header)
	}
	tctx, cancel := lastRoundTrip(ctx)
	defer cancel()
	take := p5TakeHandoffSQL
	if s.epochs.keys.Load() {
		take = takeHandoffSQL
	}
	err := s.pool.QueryRow(tctx, take, req.Ticket, req.TaskID, req.Host, req.SessionID, effective.DeathMode,
		effective.KeepAliveInterval, effective.OverrideThreshold, req.ReferenceValue, header, s.opts.LibraryVersion,
		req.Submission, codes.SubmissionInProgress, codes.SubmissionWaiting).
		Scan(&res.ExecutionID, &res.TokenID, &res.Fence, &res.StartedAt, &res.Effective.KeepAliveDeathThreshold, &res.Attempt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return AcquireResult{}, ErrNotHandedOff
	case IsRetryable(err): // a deadlock or serialization failure: it did nothing, try again
		return AcquireResult{}, fmt.Errorf("%w: %w", ErrNotHandedOff, err)
	case err != nil:
		return AcquireResult{}, fmt.Errorf("take the slot granted to ticket %d of %s: %w", req.Ticket, req.TaskName, err)
	}
	return res, nil
}

// endAbandonedSQL ends the executions of $1 that were started (after lapseHandoffsSQL, in a
// statement of its own: its snapshot sees a take that committed while the delete waited) with
// outcome $2 (failed).
const endAbandonedSQL = `
INSERT INTO taskling.execution_end (execution_id, outcome, last_heartbeat)
SELECT e.id, $2::smallint, clock_timestamp() FROM taskling.task_execution e WHERE e.id = ANY($1)
ON CONFLICT (execution_id) DO NOTHING`
