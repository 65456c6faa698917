package execution

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskling-go/taskling/internal/codes"
)

// tokenTx is one token transaction serving a batch of acquires and releases of one or more tasks
// in two round trips: readState (round trip 1: BEGIN, write the task rows — which takes their
// locks, in id order — then read what the decisions need under them), decide (pure, per task),
// writePlans (round trip 2: token lists and holders, executions, claims, reclaims, ends, schedule
// claims, notifications; COMMIT).
//
// want names what round trip 1 must read beyond the usual: grantees without liveness terms, and
// keyed tasks' waiters (keys_io.go). It sets each op's
// outcome (or its own failure: a task whose stored state is corrupted fails only its ops); it
// returns an error when the whole transaction failed, errRollback when there was nothing to
// write.
func (s *Store) tokenTx(ctx context.Context, tx *txConn, ops []*op, want *txWant) error {
	tasks := map[int64][]*op{}
	for _, o := range ops {
		tasks[o.taskID()] = append(tasks[o.taskID()], o)
	}
	states, err := s.readState(ctx, tx, tasks, want)
	if err != nil {
		return err
	}
	plans := map[int64]*txPlan{}
	var need, needKeys []int64
	for id, tops := range tasks {
		st, ok := states[id]
		if !ok {
			failAll(tops, fmt.Errorf("task row %d is gone", id))
			continue
		}
		plan, err := decide(st, requestsOf(tops), uuid.New)
		var nl *errNeedLegacy
		var nk *errNeedKeys
		switch {
		case errors.As(err, &nl):
			need = append(need, nl.ids...)
		case errors.As(err, &nk):
			needKeys = append(needKeys, id)
		case err != nil:
			failAll(tops, err)
		default:
			plans[id] = &plan
		}
	}
	if len(need) > 0 {
		return &errNeedLegacy{ids: need}
	}
	if len(needKeys) > 0 {
		return &errNeedKeys{tasks: needKeys}
	}
	write := false
	for id, plan := range plans {
		write = write || !plan.nothingToWrite(states[id])
	}
	if !write {
		setOutcomes(tasks, plans)
		return errRollback
	}
	if err := s.writePlans(ctx, tx, tasks, states, plans); err != nil {
		return err
	}
	setOutcomes(tasks, plans)
	for id, plan := range plans {
		for i, o := range tasks[id] {
			o.outcome.acquire.Reclaimed = plan.results[i].reclaim // reported only once committed
		}
	}
	return nil
}

func requestsOf(ops []*op) []request {
	reqs := make([]request, len(ops))
	for i, o := range ops {
		reqs[i] = o.request
	}
	return reqs
}

func setOutcomes(tasks map[int64][]*op, plans map[int64]*txPlan) {
	for id, plan := range plans {
		for i, o := range tasks[id] {
			o.outcome = plan.results[i]
		}
	}
}

// readState runs round trip 1 for tasks. Each statement is queued with the code that reads its
// result, so the order in which results are read cannot drift from the order in which they were
// queued.
func (s *Store) readState(ctx context.Context, tx *txConn, tasks map[int64][]*op, want *txWant) (map[int64]txState, error) {
	legacy := want.legacy
	ids := make([]int64, 0, len(tasks))
	acquires := 0
	var refTasks []int64
	var refs []string
	var retries []int64
	for id, ops := range tasks {
		ids = append(ids, id)
		for _, o := range ops {
			if a := o.acquire; a != nil {
				acquires++
				if a.Idempotent && a.ReferenceValue != nil {
					refTasks, refs = append(refTasks, id), append(refs, *a.ReferenceValue)
				}
			} else if o.release.Retry {
				retries = append(retries, o.release.ExecutionID)
			}
		}
	}
	slices.Sort(ids)
	states := map[int64]txState{}
	var reserved *reservation
	heartbeats := map[int64]int64{}
	claims := map[int64]map[string]claim{}
	ended := map[int64]int16{}
	var legacyRows map[int64]holder

	clock := s.clockQuery()
	b := tx.begin(s.stripes(ids), true)
	keyed := s.epochs.keys.Load()
	b.Queue(s.lockTasksSQL(), ids).Query(func(rows pgx.Rows) error {
		return scanTaskRows(rows, keyed, func(r taskRow) {
			states[r.id] = r.state
			tx.see(r)
		})
	})
	var nowUS int64
	var ep epoch
	var known bool
	b.Queue(clock).QueryRow(func(row pgx.Row) error {
		return row.Scan(&nowUS, &ep.timeline, &known, &ep.sinceUS, &ep.base)
	})
	handoffs := s.epochs.handoffs.Load()
	if acquires > 0 { // only acquires judge liveness
		b.Queue(sessionsSQL, ids).Query(func(rows pgx.Rows) error {
			return scanInt64Pairs(rows, func(id, us int64) { heartbeats[id] = us })
		})
	} else {
		heartbeats = nil
	}
	taskHandoffs := map[int64]map[int64]handoff{}
	if handoffs {
		queueHandoffRead(b, ids, taskHandoffs)
	}
	if acquires > 0 {
		reserved = s.queueReserve(b, tx, acquires)
	}
	if len(refs) > 0 {
		b.Queue(claimsSQL, refTasks, refs).Query(func(rows pgx.Rows) error { return scanClaims(rows, claims) })
	}
	if len(legacy) > 0 {
		legacyRows = map[int64]holder{}
		queueLegacyRead(b, legacy, legacyRows)
	}
	if len(retries) > 0 {
		queueEndedRead(b, retries, ended)
	}
	keyReads, rateReads := s.queueKeyedReads(b, tasks, want.keys)
	if err := tx.send(ctx, b); err != nil {
		return nil, err
	}
	if !known {
		return nil, &errNewEpoch{timeline: ep.timeline}
	}
	s.sawEpoch(ep)
	tx.epoch = ep
	if reserved != nil {
		if err := reserved.confirm(ctx, tx, ep); err != nil {
			return nil, err
		}
	}
	for _, id := range ids {
		if st, ok := states[id]; ok && (st.protocol >= 3 && !s.epochs.has.Load() || st.protocol >= 4 && !handoffs ||
			st.protocol >= 5 && !s.epochs.stripes.Load() || st.protocol >= 6 && !keyed || st.protocol >= 7 && !s.epochs.rates.Load()) {
			s.epochs.known.Store(false) // migrated meanwhile: look again
		}
		st, ok := states[id]
		if !ok {
			continue
		}
		for _, o := range tasks[id] {
			if o.acquire != nil {
				st.reserved = append(st.reserved, reserved.ids[0])
				reserved.ids = reserved.ids[1:]
			}
		}
		st.nowUS, st.heartbeats, st.claims, st.ended, st.epoch = nowUS, heartbeats, claims[id], ended, ep
		st.keyReads = keyReads[id]
		if r := rateReads[id]; r != nil {
			st.rates = r
			s.noteRated(id, r, nowUS)
		}
		if h, ok := taskHandoffs[id]; ok {
			settleHandoffs(h, nowUS)
			st.handoffs = h
		}
		if legacyRows != nil {
			st.legacy = legacyRows
		} else if len(legacy) == 0 {
			st.legacy = nil
		}
		states[id] = st
	}
	return states, nil
}

// reservation holds the execution ids of a transaction's acquisitions.
type reservation struct {
	ids []int64
	// ahead is the epoch ids reserved ahead were taken on (nil: reserved in this transaction).
	ahead *epoch
}

// queueReserve reserves the execution ids of a transaction's acquisitions: ids reserved ahead on
// the epoch this process knows, when it has enough (no statement), else ids reserved now
// (reserveIDsSQL, read when b is sent). Either way it queues the reservation of ids ahead when
// fewer than half of a reservation are left; the cache takes them once the transaction ends.
func (s *Store) queueReserve(b *txBatch, tx *txConn, acquires int) *reservation {
	r := &reservation{}
	enough := false
	// Before taskling.epoch (0012) every epoch reads as zero: no failover would show.
	if ep := s.epoch.Load(); ep != nil && s.epochs.has.Load() {
		r.ids, enough = s.cache.takeIDs(acquires, *ep)
		if enough {
			r.ahead = ep
		}
	}
	n := s.cache.toReserve()
	if !enough {
		n += acquires
	}
	if n > 0 {
		b.Queue(reserveIDsSQL, n).Query(func(rows pgx.Rows) error {
			got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				return err
			}
			if !enough {
				r.ids, got = got[:min(acquires, len(got))], got[min(acquires, len(got)):]
			}
			tx.reservedAhead = got
			return nil
		})
	}
	return r
}

// confirm replaces ids reserved ahead on another epoch than ep, the one the transaction reads:
// after a failover the new primary's sequence may hand them out again (it rewinds with the WAL
// it lost), so they are reserved again here, in a round trip of their own.
func (r *reservation) confirm(ctx context.Context, tx *txConn, ep epoch) error {
	if r.ahead == nil || *r.ahead == ep {
		return nil
	}
	b := tx.batch()
	b.Queue(reserveIDsSQL, len(r.ids)).Query(collectIDs(&r.ids))
	r.ahead = nil
	return tx.send(ctx, b)
}

// collectIDs reads a reservation's ids into dst.
func collectIDs(dst *[]int64) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		var err error
		*dst, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	}
}

// queueKeyedReads queues the reads of the tasks' keyed waiters and of their rates, as the schema
// has them.
func (s *Store) queueKeyedReads(b *txBatch, tasks map[int64][]*op, want map[int64]int) (map[int64]*keyReads, map[int64]*rateRow) {
	keyReads := s.queueKeyReads(b, tasks, want)
	if !s.epochs.rates.Load() {
		return keyReads, nil
	}
	return keyReads, s.queueRateReads(b, tasks, want)
}

// queueLegacyRead queues the read of the liveness of grantees without terms, judged by their rows.
func queueLegacyRead(b *txBatch, legacy map[int64]bool, into map[int64]holder) {
	b.Queue(legacySQL, slices.Sorted(maps.Keys(legacy)), codes.DeathKeepAlive).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id, expiresUS int64
			var alive bool
			if err := rows.Scan(&id, &alive, &expiresUS); err != nil {
				return err
			}
			into[id] = holder{alive: alive, expiresIn: time.Duration(expiresUS) * time.Microsecond}
		}
		return nil
	})
}

// queueEndedRead queues the read of the recorded ends of the executions whose release is a retry.
func queueEndedRead(b *txBatch, retries []int64, into map[int64]int16) {
	b.Queue(endedSQL, retries).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id int64
			var outcome int16
			if err := rows.Scan(&id, &outcome); err != nil {
				return err
			}
			into[id] = outcome
		}
		return nil
	})
}

// scanClaims reads claimsSQL's rows into claims, by task and reference value.
func scanClaims(rows pgx.Rows, claims map[int64]map[string]claim) error {
	for rows.Next() {
		var task int64
		var ref string
		var c claim
		if err := rows.Scan(&task, &ref, &c.exec, &c.succeeded); err != nil {
			return err
		}
		if claims[task] == nil {
			claims[task] = map[string]claim{}
		}
		claims[task][ref] = c
	}
	return nil
}

// errNewEpoch: the server writes on a timeline taskling.epoch does not know yet (a failover or a
// restore happened): it is recorded, and the transaction retried.
type errNewEpoch struct{ timeline int32 }

func (e *errNewEpoch) Error() string {
	return fmt.Sprintf("the database writes on timeline %d, not seen before", e.timeline)
}

// registerEpoch records a timeline seen for the first time (registerEpochSQL).
func (s *Store) registerEpoch(ctx context.Context, timeline int32) error {
	if _, err := s.pool.Exec(ctx, registerEpochSQL, timeline); err != nil {
		return fmt.Errorf("record timeline %d: %w", timeline, err)
	}
	return nil
}

// writePlans runs round trip 2 and fills in what only the database knows (start times), then
// commits.
func (s *Store) writePlans(ctx context.Context, tx *txConn, tasks map[int64][]*op, states map[int64]txState, plans map[int64]*txPlan) error {
	var w planWrites
	ids := make([]int64, 0, len(plans))
	for id := range plans {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		w.add(id, requestsOf(tasks[id]), plans[id], states[id])
	}
	b := tx.batch()
	// Ends first, grants after: on the database clock a slot handed over in one transaction ends
	// before its next holder starts, as decide served them.
	if len(w.reclaimExecs) > 0 {
		b.Queue(reclaimSQL, w.reclaimExecs, w.reclaimSessions, w.reclaimGranted, w.reclaimThresholds, codes.OutcomeReclaimed)
	}
	if len(w.legacyReclaims) > 0 {
		b.Queue(legacyReclaimSQL, w.legacyReclaims, codes.DeathKeepAlive, codes.OutcomeReclaimed)
	}
	if len(w.endExecs) > 0 {
		b.Queue(endSQL, w.endExecs, w.endOutcomes)
	}
	if len(w.lapsed) > 0 {
		b.Queue(lapseHandoffsSQL, w.lapsed)
	}
	if len(w.abandoned) > 0 {
		b.Queue(endAbandonedSQL, w.abandoned, codes.OutcomeFailed)
	}
	if len(w.okTasks) > 0 {
		b.Queue(succeededSQL, w.okTasks, w.okRefs, w.okExecs)
	}
	keyed := s.epochs.keys.Load()
	switch {
	case len(w.taskIDs) > 0 && keyed:
		b.Queue(updateTasksSQL, w.taskIDs, w.tokens, w.holders, w.fences, w.declaredLimits, w.declaredBys, w.marks, w.queues,
			w.keys.holders, w.keys.vtimes, w.keys.waiting, w.keys.declaredLimits, w.keys.declared).Query(func(rows pgx.Rows) error {
			return scanTaskRows(rows, keyed, tx.see)
		})
	case len(w.taskIDs) > 0:
		b.Queue(p5UpdateTasksSQL, w.taskIDs, w.tokens, w.holders, w.fences, w.declaredLimits, w.declaredBys, w.marks, w.queues).Query(func(rows pgx.Rows) error {
			return scanTaskRows(rows, keyed, tx.see)
		})
	}
	for _, id := range ids {
		if p := plans[id].keys; p != nil {
			queueKeyWrites(b, id, p)
		}
	}
	if len(w.execs.ids) > 0 {
		b.Queue(s.insertExecutionsSQL(false), w.execs.args(s.opts.LibraryVersion, keyed)...).Query(w.readStartTimes)
	}
	if h := &w.handoffs; len(h.execs) > 0 {
		sql := p5InsertHandoffsSQL
		if keyed {
			sql = insertHandoffsSQL
		}
		b.Queue(sql, h.args(keyed)...)
	}
	for _, id := range ids {
		// After the grants' executions and handoffs: a rate moves from the latest start time.
		if p := plans[id].keys; p != nil && p.rates != nil {
			queueRateWrites(b, id, p.rates)
		}
	}
	w.queueLinks(b, linkSQL)
	if len(w.claimTasks) > 0 {
		b.Queue(claimRefsSQL, w.claimTasks, w.claimRefs, w.claimExecs)
	}
	for _, req := range w.scheduleClaims {
		queueClaim(b, *req)
	}
	if len(w.notify) > 0 {
		b.Queue(notifySQL, w.notify)
	}
	// A holder's lease is measured from here: its grant time is set by this round trip, so on the
	// DB clock it is later than this instant. (Measuring from the first round trip would spend the
	// lease on the wait for the row lock.)
	tx.granted = w.orphans
	sentAt := time.Now()
	for _, res := range w.granted {
		res.SentAt = sentAt
	}
	return tx.commit(ctx, b)
}

// readStartTimes reads the start times of the executions inserted.
func (w *planWrites) readStartTimes(rows pgx.Rows) error {
	startedAt := map[int64]time.Time{}
	for rows.Next() {
		var id int64
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			return err
		}
		startedAt[id] = at
	}
	for _, res := range w.inserted {
		res.StartedAt = startedAt[res.ExecutionID]
	}
	return rows.Err()
}

// planWrites collects the plans' writes as column arrays, one statement per kind.
type planWrites struct {
	taskIDs, fences         []int64
	tokens, holders, queues []string
	declaredLimits          []*int
	declaredBys             []*string
	marks                   []bool
	keys                    keyColumns

	execs    executionRows
	inserted []*AcquireResult
	granted  []*AcquireResult

	claimTasks, claimExecs []int64
	claimRefs              []string

	reclaimExecs, reclaimSessions, reclaimGranted, reclaimThresholds []int64
	legacyReclaims                                                   []int64

	endExecs, endTasks []int64
	endOutcomes        []int16
	// orphans release the grants written, should the commit's outcome be unknown.
	orphans []ReleaseRequest

	okTasks, okExecs []int64
	okRefs           []string

	scheduleClaims []*acquisition
	notify         []string // payloads (notifyPayload)

	handoffs  handoffRows
	lapsed    []int64
	abandoned []int64

	linkSubs, linkSessions, linkExecs, linkTasks []int64
	linked                                       map[int64]*AcquireResult // by execution
}

// queueLinks starts the attempts of the submissions granted now (sql: linkSQL or fastLinkSQL).
func (w *planWrites) queueLinks(b *txBatch, sql string) {
	if len(w.linkSubs) == 0 {
		return
	}
	b.Queue(sql, w.linkSubs, w.linkSessions, w.linkExecs, w.linkTasks, codes.SubmissionInProgress, codes.SubmissionWaiting).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var exec int64
			var attempt int
			if err := rows.Scan(&exec, &attempt); err != nil {
				return err
			}
			if res := w.linked[exec]; res != nil {
				res.Attempt = attempt
			}
		}
		return rows.Err()
	})
}

func (w *planWrites) add(taskID int64, reqs []request, plan *txPlan, st txState) {
	if !plan.nothingToWrite(st) {
		w.taskIDs = append(w.taskIDs, taskID)
		w.tokens, w.holders, w.fences = append(w.tokens, plan.tokens), append(w.holders, plan.holders), append(w.fences, plan.fence)
		w.queues = append(w.queues, plan.queue)
		w.declaredLimits, w.declaredBys = append(w.declaredLimits, plan.declaredLimit), append(w.declaredBys, plan.declaredBy)
		w.marks = append(w.marks, plan.markWaiting)
		w.keys.add(plan.keys, st.keys)
	}
	for i, r := range reqs {
		if r.acquire != nil {
			w.granted = append(w.granted, &plan.results[i].acquire)
		}
	}
	for _, i := range plan.inserts {
		res := &plan.results[i].acquire
		w.execs.add(reqs[i].acquire, res)
		w.inserted = append(w.inserted, res)
		if res.Denied == NotDenied {
			a := reqs[i].acquire
			w.orphans = append(w.orphans, ReleaseRequest{TaskID: taskID, TaskName: a.TaskName, ExecutionID: res.ExecutionID,
				TokenID: res.TokenID, Retry: true, Failed: true})
			if a.Submission != 0 {
				w.linkSubs, w.linkSessions = append(w.linkSubs, a.Submission), append(w.linkSessions, a.SessionID)
				w.linkExecs, w.linkTasks = append(w.linkExecs, res.ExecutionID), append(w.linkTasks, taskID)
				if w.linked == nil {
					w.linked = map[int64]*AcquireResult{}
				}
				w.linked[res.ExecutionID] = res
			}
		}
	}
	for _, i := range plan.refClaims {
		a := reqs[i].acquire
		w.claimTasks, w.claimRefs, w.claimExecs = append(w.claimTasks, taskID), append(w.claimRefs, *a.ReferenceValue), append(w.claimExecs, plan.results[i].acquire.ExecutionID)
	}
	for _, t := range plan.reclaims {
		w.reclaimExecs, w.reclaimSessions = append(w.reclaimExecs, t.exec), append(w.reclaimSessions, t.session)
		w.reclaimGranted, w.reclaimThresholds = append(w.reclaimGranted, t.grantedUS), append(w.reclaimThresholds, t.threshold.Microseconds())
	}
	w.legacyReclaims = append(w.legacyReclaims, plan.legacyReclaim...)
	for _, h := range plan.handoffs {
		w.handoffs.add(taskID, h)
	}
	w.lapsed = append(w.lapsed, plan.lapsed...)
	w.abandoned = append(w.abandoned, plan.abandoned...)
	for k, i := range plan.completes {
		if plan.outcomes[k] != codes.OutcomeReclaimed { // a reclaim recorded that end already
			w.endExecs, w.endOutcomes = append(w.endExecs, reqs[i].release.ExecutionID), append(w.endOutcomes, plan.outcomes[k])
			w.endTasks = append(w.endTasks, taskID)
		}
	}
	for _, i := range plan.succeeded {
		r := reqs[i].release
		w.okTasks, w.okRefs, w.okExecs = append(w.okTasks, taskID), append(w.okRefs, *r.ReferenceValue), append(w.okExecs, r.ExecutionID)
	}
	for _, i := range plan.claims {
		w.scheduleClaims = append(w.scheduleClaims, reqs[i].acquire)
	}
	if plan.notify {
		w.notify = append(w.notify, notifyPayload(taskID, plan.offered))
	}
}

// txConn sends the two batches of one token transaction: the first carries BEGIN, the last
// COMMIT.
type txConn struct {
	conn         *pgx.Conn
	beginStmt    string
	serializable bool
	open         bool
	// committing: the batch with COMMIT was sent; if its answer is lost, the transaction may
	// have committed.
	committing bool
	// seen are the task rows the transaction read or wrote, as they are once it committed.
	seen map[int64]taskRow
	// granted are the grants the transaction writes: if its commit's outcome is unknown, they
	// must be given back (see Store.releaseOrphans).
	granted []ReleaseRequest
	// reservedAhead are execution ids reserved for later acquisitions, on epoch.
	reservedAhead []int64
	epoch         epoch
}

// taskRow is a task row as the token logic reads it (statements.go).
type taskRow struct {
	id    int64
	state txState
	block int64  // the heap page of the row version
	xmin  string // the transaction that wrote the row version
}

func (t *txConn) see(r taskRow) {
	if t.seen == nil {
		t.seen = map[int64]taskRow{}
	}
	t.seen[r.id] = r
}

// scanTaskRows reads task rows (lockTasksSQL, updateTasksSQL, casTasksSQL), with what they hold of
// keys when keyed (a schema of 0022: the statements of protocol 5 return none).
func scanTaskRows(rows pgx.Rows, keyed bool, fn func(taskRow)) error {
	for rows.Next() {
		var r taskRow
		st := &r.state
		o := &st.overrides
		dest := []any{&r.id, &st.tokens, &st.holders, &st.queue, &st.fence, &o.ConcurrencyLimit, &o.Enabled, &o.DeathMode,
			&o.KeepAliveInterval, &o.KeepAliveDeathThreshold, &o.OverrideThreshold, &st.declaredLimit, &st.declaredBy,
			&st.waiters, &st.protocol, &r.block, &r.xmin}
		if keyed {
			k := &keyRow{}
			st.keys = k
			dest = append(dest, &k.holders, &o.KeyLimit, &k.overrides, &k.declaredLimit, &k.declared, &k.vtime, &k.waiting)
		}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if st.keys != nil {
			st.keys.limit = o.KeyLimit
		}
		fn(r)
	}
	return rows.Err()
}

// txBatch is a batch of a token transaction. Under SERIALIZABLE its statements carry a prefix, so
// that a connection's cached generic plans (chosen with sequential scans allowed) are never
// reused by transactions that rule them out.
type txBatch struct {
	pgx.Batch
	prefix string
}

func (b *txBatch) Queue(sql string, args ...any) *pgx.QueuedQuery {
	return b.Batch.Queue(b.prefix+sql, args...)
}

func (t *txConn) batch() *txBatch {
	if t.serializable {
		return &txBatch{prefix: "/* serializable */ "}
	}
	return &txBatch{}
}

// begin returns the first batch: BEGIN, the locks of stripes (stripes.go; wait: waiting for
// them, else NOWAIT) and the transaction's settings. The locks come before the first SELECT,
// which takes a serializable transaction's snapshot.
func (t *txConn) begin(stripes []int, wait bool) *txBatch {
	b := t.batch()
	b.Queue(t.beginStmt)
	for _, i := range stripes {
		if wait {
			b.Queue(lockStripeSQL[i])
		} else {
			b.Queue(lockStripeNowaitSQL[i])
		}
	}
	if t.serializable {
		b.Queue(serializableSettingsSQL)
	} else {
		b.Queue(settingsSQL)
	}
	return b
}

// settingsSQL sets, for the transaction:
//   - an idle timeout of 5 s: a client cut off between the two round trips would otherwise keep
//     the task rows locked until its socket dies (TCP keepalive: hours); the server ends such a
//     session, releasing the locks;
//   - generic plans: the token statements are planned once per connection, not at every call
//     (planning them cost more than running them).
const settingsSQL = `SELECT set_config('idle_in_transaction_session_timeout', '5000', true),
    set_config('plan_cache_mode', 'force_generic_plan', true)`

// serializableSettingsSQL adds, under SERIALIZABLE: no sequential scans, which take a predicate
// lock on the whole table that any write of an unrelated task would conflict with (index scans
// lock only what they read; the planner picks sequential scans for small tables); and no JIT
// compilation, which the cost of a ruled-out plan would otherwise trigger (tens of milliseconds a
// statement).
const serializableSettingsSQL = `SELECT set_config('idle_in_transaction_session_timeout', '5000', true),
    set_config('plan_cache_mode', 'force_generic_plan', true),
    set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)`

// send sends b, runs each queued statement's reader, and returns the first error.
func (t *txConn) send(ctx context.Context, b *txBatch) error {
	t.open = true
	return t.conn.SendBatch(ctx, &b.Batch).Close()
}

// commit sends b plus COMMIT; the transaction is over once it returns nil.
func (t *txConn) commit(ctx context.Context, b *txBatch) error {
	b.Queue("COMMIT")
	t.committing = true
	// The last round trip is not cancelled with its requests: cancelled midway, its outcome would
	// be unknown, and a ticket it queued (a waiter whose wait just timed out) would stay in the
	// queue unknown to its waiter, offered the slot again and again. A caller whose context ended
	// meanwhile waits for this one round trip (at most commitTimeout) and learns what it wrote.
	cctx, cancel := lastRoundTrip(ctx)
	defer cancel()
	if err := t.send(cctx, b); err != nil {
		return err
	}
	t.open = false
	return nil
}

// lastRoundTrip is the context of a round trip whose outcome must not be left unknown for a
// cancellation: ctx's values, not its cancellation, and at most commitTimeout or ctx's deadline,
// whichever is later (the caller allowed longer: a synchronous standby, say).
func lastRoundTrip(ctx context.Context) (context.Context, context.CancelFunc) {
	wait := commitTimeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) > wait {
		wait = time.Until(d)
	}
	return context.WithTimeout(context.WithoutCancel(ctx), wait)
}

// commitTimeout bounds the last round trip of a token transaction once sent (or the caller's
// deadline, if later).
const commitTimeout = 5 * time.Second

// errRollback ends a transaction that must write nothing; Acquire turns it into a result.
var errRollback = errors.New("rollback")

// IsRetryable reports whether err is a serialization failure (40001) or a deadlock (40P01): the
// transaction did nothing and may simply run again.
func IsRetryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}
