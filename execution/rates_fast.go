package execution

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// A start a rate refuses is decided by the rate's state and the database clock alone, and the
// refusal writes nothing but the blocked execution that records it. Refusals outnumber grants
// under a busy rate (a dozen to one in the bench), and each one that took the task row's lock
// would queue the grants behind it. So a plain start of a rated task is first decided on this
// process's cached copy of the task row and of its rate state, at an estimate of the database
// clock that is never ahead of it; when that decision is a refusal by a rate, it is recorded by one
// statement that inserts the blocked execution only if the task row is still that version and the
// database clock is still before the moment the rate would have room. Room only grows with time
// and only shrinks with grants, and every grant or change of a rate rewrites the task row; so a
// refusal so recorded is one the usual transaction would have made. Anything else — a grant, a
// refusal by a limit, a row that changed — takes the usual path.

// rateAnchor is what a token transaction last read of a rated task's rates, with the database
// clock it read them at and the local time just after.
type rateAnchor struct {
	rates rateRow
	dbUS  int64
	local time.Time
}

// rateAnchors are the anchors by task.
type rateAnchors struct {
	mu sync.Mutex
	by map[int64]rateAnchor
}

// noteRates remembers what a transaction read of task id's rates at dbUS.
func (s *Store) noteRates(id int64, r *rateRow, dbUS int64) {
	a := &s.anchors
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.by == nil {
		a.by = map[int64]rateAnchor{}
	}
	c := *r
	c.keyTATs, c.keyTATRates = maps.Clone(r.keyTATs), maps.Clone(r.keyTATRates)
	a.by[id] = rateAnchor{rates: c, dbUS: dbUS, local: time.Now()}
}

// anchorOf is task id's anchor, and the database clock it estimates now (never ahead of it, but
// for a database clock that runs slower than this host's by more than the margin).
func (s *Store) anchorOf(id int64) (rateAnchor, int64, bool) {
	a := &s.anchors
	a.mu.Lock()
	defer a.mu.Unlock()
	an, ok := a.by[id]
	if !ok {
		return rateAnchor{}, 0, false
	}
	elapsed := time.Since(an.local)
	return an, an.dbUS + (elapsed - elapsed/1000 - time.Millisecond).Microseconds(), true
}

// fastRefuseSQL records a refusal by a rate ($15: the database clock, in µs, before which the
// rate has no room for it) as a blocked execution of task $1, if its row is still version $14.
const fastRefuseSQL = `
INSERT INTO taskling.task_execution (
    task_id, started_at, completed_at, last_keep_alive, host_name, session_id, death_mode,
    keep_alive_interval, keep_alive_death_threshold, override_threshold,
    reference_value, idempotent, header, blocked, blocked_reason, library_version, key, cost)
SELECT $1, clock_timestamp(), clock_timestamp(), clock_timestamp(), $2, nullif($3, 0), $4, $5, $6, $7,
    $8, false, $9::jsonb, true, $10, $11, $12, $13
FROM taskling.task_definition d
WHERE d.id = $1 AND d.xmin::text = $14 AND (extract(epoch FROM clock_timestamp()) * 1000000)::bigint < $15::bigint
RETURNING id, $15::bigint - (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`

// fastRefusable reports whether o is a plain start a rate may refuse on the cached state: no
// waiting, recorded when denied, nothing that needs other rows.
func fastRefusable(o *op) bool {
	a := o.acquire
	return a != nil && a.kind == opAcquire && a.Queue == nil && a.RecordDenial && a.Schedule == nil && a.Submission == 0 &&
		!(a.Idempotent && a.ReferenceValue != nil)
}

// refusal is a start decided on the cached state as refused by a rate.
type refusal struct {
	o      *op
	out    outcome
	xmin   string
	roomUS int64 // the database clock at which the rate has room for it
}

// tryFastRefusals records the refusals by a rate that the cached state decides, and returns the
// ops left for the other paths.
func (s *Store) tryFastRefusals(ctx context.Context, ops []*op) []*op {
	if !s.epochs.rates.Load() {
		return ops
	}
	tasks := map[int64][]*op{}
	for _, o := range ops {
		tasks[o.taskID()] = append(tasks[o.taskID()], o)
	}
	var refusals []refusal
	for id, tops := range tasks {
		if !s.isRated(id) || !slices.ContainsFunc(tops, fastRefusable) || slices.ContainsFunc(tops, func(o *op) bool { return !fastRefusable(o) }) {
			continue
		}
		refusals = append(refusals, s.refusedOnCache(id, tops)...)
	}
	if len(refusals) == 0 {
		return ops
	}
	served := s.recordRefusals(ctx, refusals)
	return slices.DeleteFunc(slices.Clone(ops), func(o *op) bool { return served[o] })
}

// refusedOnCache decides task id's ops on the cached row and rates at the estimated database
// clock; it returns them if each is refused by a rate (and nothing else is to be written), else none.
func (s *Store) refusedOnCache(id int64, ops []*op) []refusal {
	s.cache.mu.Lock()
	row, known := s.cache.rows[id]
	s.cache.mu.Unlock()
	anchor, nowUS, anchored := s.anchorOf(id)
	ep := s.epoch.Load()
	if !known || !anchored || ep == nil {
		return nil
	}
	st := row.state
	rates := anchor.rates
	st.blind, st.estimated, st.rates, st.nowUS, st.epoch = true, true, &rates, nowUS, *ep
	for range ops {
		st.reserved = append(st.reserved, 0) // a refusal's execution id comes from its insert
	}
	plan, err := decide(st, requestsOf(ops), uuid.New)
	if err != nil || plan.hasErrors() || plan.tokens != st.tokens || plan.holders != st.holders || plan.queue != st.queue ||
		len(plan.handoffs)+len(plan.lapsed)+len(plan.reclaims)+len(plan.legacyReclaim) > 0 || plan.keys != nil && !plan.keys.nothingToWrite(st) {
		return nil
	}
	out := make([]refusal, 0, len(ops))
	for i, o := range ops {
		res := plan.results[i].acquire
		if res.Denied != DeniedRate && res.Denied != DeniedKeyRate || res.Unfit != nil {
			return nil
		}
		out = append(out, refusal{o: o, out: plan.results[i], xmin: row.xmin, roomUS: nowUS + res.RetryAfter.Microseconds()})
	}
	return out
}

// recordRefusals inserts the refusals' blocked executions, each only if its decision still
// holds, in one round trip; it returns the ops served.
func (s *Store) recordRefusals(ctx context.Context, refusals []refusal) map[*op]bool {
	b := &pgx.Batch{}
	served := map[*op]bool{}
	for _, r := range refusals {
		a, res := r.o.acquire, &r.out.acquire
		var header any
		if a.Header != nil {
			header = string(a.Header)
		}
		b.Queue(fastRefuseSQL, a.TaskID, a.Host, a.SessionID, res.Effective.DeathMode, res.Effective.KeepAliveInterval,
			res.Effective.KeepAliveDeathThreshold, res.Effective.OverrideThreshold, a.ReferenceValue, header,
			denyMessage(res.Denied, res.Effective.ConcurrencyLimit), s.opts.LibraryVersion, a.Key, int32(a.cost()), r.xmin, r.roomUS).
			QueryRow(func(row pgx.Row) error {
				var id, waitUS int64
				switch err := row.Scan(&id, &waitUS); err {
				case nil:
					res.ExecutionID, res.RetryAfter = id, usDuration(max(waitUS, 0))
					r.o.outcome = r.out
					served[r.o] = true
				case pgx.ErrNoRows: // the row changed, or the rate has room by now: the usual path decides
				default:
					return err
				}
				return nil
			})
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return map[*op]bool{} // the usual path serves them, and reports an error that persists
	}
	s.operations.Add(int64(len(served)))
	return served
}
