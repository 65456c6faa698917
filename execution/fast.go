package execution

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskling-go/taskling/internal/backoff"
)

// The fast path serves a batch in one round trip instead of two when the decision needs nothing
// but the task rows, and this process knows them: it decides on its cached copy of each row (the
// version its last transaction on the task read or wrote), then writes each row only if it is
// still that version (compare-and-swap on xmin, which every write of the row changes), and
// everything else of the task only if its row was written. A task whose row changed meanwhile is
// served again the usual way. Grants of free slots and releases take this path; anything that
// needs the database's clock or other rows — judging a holder's liveness, idempotent references,
// retried releases — takes the usual one.

// rowCache holds the last known version of task rows, and execution ids reserved ahead for
// acquisitions on the fast path.
type rowCache struct {
	mu   sync.Mutex
	rows map[int64]taskRow
	ids  []int64
	// idsEpoch is the epoch ids were reserved on: after a failover the new primary's sequence
	// may hand them out again.
	idsEpoch epoch
	// ahead is how many ids to reserve ahead (below reserveAhead: reserveAhead).
	ahead int
	// contended are the tasks whose last fast attempt failed (their stripe was held, or their
	// row had changed): how many batches still skip the fast path, and how many the next failure
	// makes skip.
	contended map[int64]*fastBackoff
}

type fastBackoff struct{ skip, next int }

// fastBackoffMax bounds the batches a contended task skips the fast path for. A failed attempt
// costs a round trip and an aborted transaction before the usual path runs: with several
// processes on one task nearly every attempt fails (their stripe is held, or another process
// wrote the row), so under steady contention one batch in fastBackoffMax tries.
const fastBackoffMax = 32

// skipFast reports whether a batch of tasks skips the fast path: one of them failed it lately.
func (c *rowCache) skipFast(tasks map[int64][]*op) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	skip := false
	for id := range tasks {
		if b := c.contended[id]; b != nil && b.skip > 0 {
			b.skip--
			skip = true
		}
	}
	return skip
}

// fastTried records how a fast attempt on task id went: a success clears its backoff, a failure
// doubles it.
func (c *rowCache) fastTried(id int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok {
		delete(c.contended, id)
		return
	}
	if c.contended == nil {
		c.contended = map[int64]*fastBackoff{}
	}
	b := c.contended[id]
	if b == nil {
		b = &fastBackoff{}
		c.contended[id] = b
	}
	b.next = min(max(1, 2*b.next), fastBackoffMax)
	b.skip = b.next
}

const (
	// reserveAhead is how many execution ids a transaction reserves for later fast acquisitions
	// when fewer than half of that are left, at first: a batch that finds too few for its
	// acquisitions (it then takes the usual path) makes later reservations cover twice as many,
	// up to maxReserveAhead. (Ids reserved ahead make ids slightly out of start order across
	// processes.)
	reserveAhead    = 16
	maxReserveAhead = 2 * maxBatch
)

// remember records the rows a committed transaction saw, and the ids it reserved ahead on epoch
// ep (they replace any reserved on another).
func (s *Store) remember(rows map[int64]taskRow, ids []int64, ep epoch) {
	c := &s.cache
	c.mu.Lock()
	if c.rows == nil {
		c.rows = map[int64]taskRow{}
	}
	for id, r := range rows {
		c.rows[id] = r
	}
	if len(ids) > 0 {
		if c.idsEpoch != ep {
			c.ids, c.idsEpoch = nil, ep
		}
		c.ids = append(c.ids, ids...)
	}
	c.mu.Unlock()
	for id, r := range rows {
		s.comb.notePage(id, r.block)
	}
}

// forget drops what is known of tasks whose transaction failed.
func (s *Store) forget(ops []*op) {
	c := &s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range ops {
		delete(c.rows, o.taskID())
	}
}

// takeIDs takes n ids reserved ahead on epoch ep, or none if there are fewer.
func (c *rowCache) takeIDs(n int, ep epoch) ([]int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idsEpoch != ep {
		c.ids = nil
	}
	if len(c.ids) < n {
		c.ahead = min(max(c.ahead, 2*n), maxReserveAhead)
		return nil, false
	}
	ids := slices.Clone(c.ids[:n])
	c.ids = c.ids[n:]
	return ids, true
}

// toReserve is how many ids a transaction reserves ahead now: none while at least half of a
// reservation is left.
func (c *rowCache) toReserve() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	ahead := max(c.ahead, reserveAhead)
	if len(c.ids) >= ahead/2 {
		return 0
	}
	return ahead
}

// fastEligible reports whether ops may take the fast path at all.
func fastEligible(ops []*op) bool {
	for _, o := range ops {
		if a := o.acquire; a != nil && (a.Schedule != nil || (a.Idempotent && a.ReferenceValue != nil)) {
			return false
		}
		if r := o.release; r != nil && (r.Retry || (r.Idempotent && r.ReferenceValue != nil)) {
			return false
		}
	}
	return true
}

// fastPlans decides ops on the cached rows; ok is false when any task's decision needs more.
func (s *Store) fastPlans(tasks map[int64][]*op) (plans map[int64]*txPlan, rows map[int64]taskRow, ep *epoch, ok bool) {
	acquires := 0
	for _, ops := range tasks {
		for _, o := range ops {
			if o.acquire != nil {
				acquires++
			}
		}
	}
	s.cache.mu.Lock()
	rows = map[int64]taskRow{}
	for id := range tasks {
		r, known := s.cache.rows[id]
		if !known || s.isRated(id) {
			s.cache.mu.Unlock()
			return nil, nil, nil, false
		}
		rows[id] = r
	}
	s.cache.mu.Unlock()
	ep = s.epoch.Load() // the CAS checks that the server still writes on its timeline
	if ep == nil {
		return nil, nil, nil, false
	}
	ids, enough := s.cache.takeIDs(acquires, *ep)
	if !enough {
		return nil, nil, nil, false
	}
	taken := ids
	plans = map[int64]*txPlan{}
	for id, ops := range tasks {
		st := rows[id].state
		st.blind, st.epoch = true, *ep
		for _, o := range ops {
			if o.acquire != nil {
				st.reserved = append(st.reserved, ids[0])
				ids = ids[1:]
			}
		}
		plan, err := decide(st, requestsOf(ops), uuid.New)
		// Grants to tickets are written by the usual path only (it reads and locks them).
		if err != nil || plan.nothingToWrite(st) || plan.hasErrors() || len(plan.handoffs)+len(plan.lapsed)+len(plan.abandoned) > 0 ||
			!plan.keys.fastKeyWrites() {
			s.cache.mu.Lock()
			if s.cache.idsEpoch == *ep {
				s.cache.ids = append(taken, s.cache.ids...) // unused: keep them, in order
			}
			s.cache.mu.Unlock()
			return nil, nil, nil, false
		}
		plans[id] = &plan
	}
	return plans, rows, ep, true
}

// hasErrors reports a request refused with an error of its own: the usual path reports those.
func (p txPlan) hasErrors() bool {
	return slices.ContainsFunc(p.results, func(o outcome) bool { return o.err != nil })
}

// tryFast serves what it can of ops on the fast path and returns the ops left for the usual one.
func (s *Store) tryFast(ctx context.Context, ops []*op) []*op {
	if !fastEligible(ops) {
		return ops
	}
	tasks := map[int64][]*op{}
	for _, o := range ops {
		tasks[o.taskID()] = append(tasks[o.taskID()], o)
	}
	if s.cache.skipFast(tasks) {
		return ops
	}
	plans, rows, ep, ok := s.fastPlans(tasks)
	if !ok {
		return ops
	}
	var tx *txConn
	written := map[int64]bool{}
	var reserved []int64
	err := s.runTx(ctx, func(ctx context.Context, t *txConn) error {
		tx = t
		return s.fastTx(ctx, t, tasks, rows, plans, ep.timeline, written, &reserved)
	})
	if err != nil {
		s.forget(ops)
		for id := range tasks {
			s.cache.fastTried(id, false)
		}
		if tx != nil && tx.committing && IsConnectionError(err) {
			s.releaseOrphans(ctx, tx.granted)
		}
		return ops // served the usual way, which reports the error if it persists
	}
	s.transactions.Add(1)
	seen := map[int64]taskRow{}
	var left []*op
	for id, tops := range tasks {
		s.cache.fastTried(id, written[id])
		if !written[id] {
			left = append(left, tops...)
			continue
		}
		seen[id] = tx.seen[id]
		for i, o := range tops {
			o.outcome = plans[id].results[i]
		}
		s.operations.Add(int64(len(tops)))
	}
	s.remember(seen, reserved, *ep)
	s.forget(left)
	return left
}

// fastTx is the fast path's transaction: one round trip.
func (s *Store) fastTx(ctx context.Context, tx *txConn, tasks map[int64][]*op, rows map[int64]taskRow, plans map[int64]*txPlan,
	timeline int32, written map[int64]bool, reserved *[]int64) error {
	ids := make([]int64, 0, len(plans))
	for id := range plans {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var w planWrites
	var xmins []string
	protocol := 0
	for _, id := range ids {
		w.add(id, requestsOf(tasks[id]), plans[id], rows[id].state)
		xmins = append(xmins, rows[id].xmin)
		protocol = rows[id].state.protocol
	}
	b := tx.begin(s.stripes(ids), false)
	keyed := s.epochs.keys.Load()
	args := []any{w.taskIDs, w.tokens, w.holders, w.fences, w.declaredLimits, w.declaredBys, w.marks, w.queues, xmins, protocol, timeline}
	cas := casTasksSQL
	switch {
	case !s.epochs.has.Load():
		cas = legacyCASTasksSQL
	case !keyed && s.epochs.handoffs.Load():
		cas = p5HandoffCasTasksSQL
	case !keyed:
		cas = p5CasTasksSQL
	default:
		args = append(args, w.keys.holders, w.keys.vtimes, w.keys.waiting, w.keys.declaredLimits, w.keys.declared)
	}
	b.Queue(cas, args...).Query(func(rows pgx.Rows) error {
		return scanTaskRows(rows, keyed, func(r taskRow) {
			written[r.id] = true
			tx.see(r)
		})
	})
	if len(w.endExecs) > 0 {
		b.Queue(fastEndSQL, w.endExecs, w.endOutcomes, w.endTasks)
	}
	for _, id := range ids {
		if p := plans[id].keys; p != nil && len(p.drops) > 0 {
			b.Queue(fastDropKeysSQLs[id%stripeCount], int16(id%stripeCount), id, p.drops)
		}
	}
	if len(w.execs.ids) > 0 {
		b.Queue(s.insertExecutionsSQL(true), w.execs.args(s.opts.LibraryVersion, keyed)...).Query(w.readStartTimes)
	}
	w.queueLinks(b, fastLinkSQL)
	// A slot freed is announced if the cached row has waiters: had one marked the row since,
	// its version would differ, and a mark seen expired stays expired.
	var freed []int64
	var payloads []string
	for _, id := range ids {
		if plans[id].notify {
			freed, payloads = append(freed, id), append(payloads, notifyPayload(id, plans[id].offered))
		}
	}
	if len(freed) > 0 {
		b.Queue(fastNotifySQL, freed, payloads)
	}
	if n := s.cache.toReserve(); n > 0 {
		reserve, reserveArgs := reserveIDsSQL, []any{n}
		if s.epochs.has.Load() {
			// Remembered as reserved on the timeline the CAS checks: none from another server.
			reserve, reserveArgs = reserveOnTimelineSQL, []any{n, timeline}
		}
		b.Queue(reserve, reserveArgs...).Query(collectIDs(reserved))
	}
	tx.granted = w.orphans
	sentAt := time.Now()
	for _, res := range w.granted {
		res.SentAt = sentAt
	}
	return tx.commit(ctx, b)
}

// releaseOrphans gives back, in the background, the grants of a transaction whose commit's
// outcome is unknown (its connection failed): if it committed, nobody knows of those executions,
// and their session's heartbeats would keep them alive. Each release is identity-checked, so one
// that was never granted changes nothing. It tries for a few minutes.
func (s *Store) releaseOrphans(ctx context.Context, grants []ReleaseRequest) {
	if len(grants) == 0 {
		return
	}
	go func() {
		ctx := context.WithoutCancel(ctx)
		deadline := time.Now().Add(3 * time.Minute)
		for _, g := range grants {
			for attempt := 0; ; attempt++ {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := s.Release(rctx, g)
				cancel()
				if err == nil || !IsConnectionError(err) && !errors.Is(err, context.DeadlineExceeded) || time.Now().After(deadline) {
					break
				}
				_ = backoff.Sleep(ctx, attempt, 100*time.Millisecond, 5*time.Second)
			}
		}
	}()
}
