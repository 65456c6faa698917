package execution

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/taskling-go/taskling/internal/codes"
	"github.com/taskling-go/taskling/tokens"
)

// A token transaction has three parts: read the state of its tasks under their row locks (round
// trip 1, readState), decide everything in decide — a pure function of one task's state and its
// requests, with no I/O and no clock — and write the plans (round trip 2, writePlans).

// ProtocolVersion is the version of the grant rules this binary follows. The migration that
// changes them bumps taskling.protocol; a binary older than the database refuses to grant.
// Protocol 2: holders judged by the liveness terms in their task row and their process's
// session heartbeat.
// Protocol 3: after a failover to a new timeline, no grant for one death threshold and fences
// in a new epoch (0012_epochs.sql).
// Protocol 4: a freed slot is granted to the direct ticket first in line by the transaction that
// frees it; the waiter takes it without the task row (0013_handoff.sql, handoff.go).
// Protocol 5: token transactions take their tasks' stripe locks first (0019_stripes.sql).
// Protocol 6: keys and costs — a holder of cost c holds c tokens, keyed holders are listed in the
// task row, keyed waiters queue in taskling.key_ticket and take turns across keys (0022_keys.sql,
// keys.go, fair.go).
// Protocol 7: rates — a grant moves its task's and its key's rate state (GCRA, on the DB clock);
// nothing is granted beyond a rate (0023_rates.sql, rates.go).
const ProtocolVersion = 7

// ErrUpgradeRequired: the database's grant protocol is newer than this binary's.
var ErrUpgradeRequired = errors.New("taskling: upgrade required")

// request is one acquire or release served by a token transaction.
type request struct {
	acquire *acquisition
	release *ReleaseRequest
}

func (r request) taskID() int64 {
	if r.acquire != nil {
		return r.acquire.TaskID
	}
	return r.release.TaskID
}

// txState is what round trip 1 read of one task, under its row lock.
type txState struct {
	reserved      []int64 // execution ids reserved for the task's acquires, in order
	tokens        string
	holders       string // liveness terms (holders.go)
	queue         string // waiters for a slot (queue.go)
	fence         int64
	overrides     Overrides
	declaredLimit *int
	declaredBy    *string
	waiters       bool  // someone waits for a slot: a freed one is announced
	protocol      int   // the database's grant protocol
	nowUS         int64 // the DB clock under the lock, µs since the Unix epoch
	// epoch is the timeline the server writes on, as recorded in taskling.epoch.
	epoch epoch
	// heartbeats are the last heartbeats (µs) of the holders' and waiters' sessions; nil when
	// not read (a transaction of releases only).
	heartbeats map[int64]int64
	// legacy is the liveness, judged by their rows, of grantees that have no terms: grants of
	// protocol 1, and holders whose row was deleted. nil: not read (decide then asks for it).
	legacy map[int64]holder
	// claims are the claims of the idempotent references requested, by reference value.
	claims map[string]claim
	// ended are the recorded ends (outcome) of executions whose release is a retry.
	ended map[int64]int16
	// handoffs are the task's slots granted to direct tickets and not taken yet, by ticket; nil
	// when not read (a schema without them, or a blind state).
	handoffs map[int64]handoff
	// keys is what the task row holds of keys (0022), nil on an older schema; keyReads the keyed
	// waiters and round-robin state read (keys.go), nil when not read.
	keys     *keyRow
	keyReads *keyReads
	// rates is what the task's rates read (0023), nil on an older schema or a cached state.
	rates *rateRow
	// estimated: a blind state whose nowUS and rates are an estimate never ahead of the database
	// (rates_fast.go): a refusal by a rate may be decided on it, nothing else.
	estimated bool
	// blind: the state is a cached copy, written back only if the row did not change; nothing
	// that needs the database's clock or other rows (liveness, claims, ends) is known. A decision
	// that needs any of it fails with errBlind.
	blind bool
}

// epoch is a timeline of the database (0012_epochs.sql). sinceUS is when it was first seen,
// 0 for the timeline the schema was installed or upgraded on (no hold); grants wait one death
// threshold after it. Fences on it start above base.
type epoch struct {
	timeline int32
	sinceUS  int64
	base     int64
}

// holdLeft is how long the epoch still holds grants with threshold, on the DB clock; errBlind
// when the state cannot tell. A blind state's task was granted on this epoch already (its fence
// reached the base) once the hold had passed.
func (d *decider) holdLeft(threshold time.Duration) (time.Duration, error) {
	e := d.st.epoch
	switch {
	case e.sinceUS == 0 || d.st.fence >= e.base:
		return 0, nil
	case d.st.blind:
		return 0, errBlind
	}
	left := time.Duration(e.sinceUS+threshold.Microseconds()-d.st.nowUS) * time.Microsecond
	return max(left, 0), nil
}

// errBlind: a decision on a cached state needed what only a read under the row lock tells.
var errBlind = errors.New("decision needs the database's state")

type holder struct {
	alive     bool
	expiresIn time.Duration // until it may be judged dead
}

// claim is an idempotent reference value's claim: the last execution granted with it.
type claim struct {
	exec      int64
	succeeded bool
}

// errNeedLegacy asks for another attempt that reads the liveness of grantees without terms.
type errNeedLegacy struct{ ids []int64 }

func (e *errNeedLegacy) Error() string {
	return fmt.Sprintf("grantees %v have no liveness terms: read their rows", e.ids)
}

// txPlan is what round trip 2 writes for one task, with each request's outcome.
type txPlan struct {
	tokens        string
	holders       string
	queue         string
	fence         int64
	declaredLimit *int
	declaredBy    *string
	markWaiting   bool  // a waiter was denied: releases must notify for the next minute
	inserts       []int // acquire requests whose execution row is written, in order
	refClaims     []int // idempotent grants whose reference claim is written
	reclaims      []term
	legacyReclaim []int64        // holders of protocol 1 taken back
	completes     []int          // release requests, in order
	outcomes      []int16        // the end each completes[i] records
	succeeded     []int          // idempotent releases that mark their claim succeeded
	claims        []int          // acquire requests whose schedule claim is written
	notify        bool           // a slot went back and someone waits
	offered       []int64        // the tickets a freed slot is offered to (the notification names them)
	handoffs      []handoffGrant // slots granted to direct tickets now
	lapsed        []int64        // grants to direct tickets taken back (not taken in time, or left)
	abandoned     []int64        // grants of waiters that left: an execution a take started ends as failed
	results       []outcome      // one per request
	keys          *keyPlan       // a keyed task's writes (keys.go); nil otherwise
}

// outcome is one request's result.
type outcome struct {
	acquire AcquireResult
	release ReleaseResult
	err     error   // the request's own error (bad settings, protocol); others were served
	reclaim []int64 // the dead holders this acquire's grant or adjust took slots from
}

// nothingToWrite reports a plan whose task row needs no write: no row changes, nobody to mark
// as waiting.
func (p txPlan) nothingToWrite(st txState) bool {
	return len(p.inserts) == 0 && len(p.completes) == 0 && !p.markWaiting && p.tokens == st.tokens && p.holders == st.holders &&
		p.queue == st.queue && len(p.handoffs) == 0 && len(p.lapsed) == 0 && (p.keys == nil || p.keys.nothingToWrite(st))
}

// decide serves reqs (one task's) on st exactly as if they ran one after another: every release
// first (identity-checked Return), then every acquire in order (Adjust to its effective limit,
// Grant). newID makes token ids. An error fails the task's requests: a corrupted stored state, or
// errNeedLegacy.
func decide(st txState, reqs []request, newID func() uuid.UUID) (txPlan, error) {
	list, err := tokens.Parse(st.tokens)
	if err != nil {
		return txPlan{}, fmt.Errorf("task %s: stored token list: %w", taskNameOf(reqs), err)
	}
	terms, err := parseTerms(st.holders)
	if err != nil {
		return txPlan{}, fmt.Errorf("task %s: stored holders: %w", taskNameOf(reqs), err)
	}
	tickets, err := parseQueue(st.queue)
	if err != nil {
		return txPlan{}, fmt.Errorf("task %s: stored queue: %w", taskNameOf(reqs), err)
	}
	if st.blind && len(tickets) > 0 {
		return txPlan{}, errBlind // a queue needs the clock and its waiters' heartbeats
	}
	d := decider{st: st, list: list, terms: map[int64]term{}, newID: newID, queue: queue{tickets: tickets, nowUS: st.nowUS},
		plan: txPlan{fence: st.fence, results: make([]outcome, len(reqs))}, releasedOK: map[int64]bool{}, grantedRefs: map[string]bool{}}
	for _, t := range terms {
		d.terms[t.exec] = t
		d.order = append(d.order, t.exec)
	}
	acquires := slices.ContainsFunc(reqs, func(r request) bool { return r.acquire != nil })
	if keyedMode(st, reqs) {
		if err := d.newKeyed(reqs); err != nil {
			return txPlan{}, err
		}
	} else if st.keys == nil && slices.ContainsFunc(reqs, func(r request) bool { return r.acquire != nil && r.acquire.keyed() }) {
		return txPlan{}, fmt.Errorf("task %s: %w", taskNameOf(reqs), errKeysUnsupported)
	}
	if d.keys == nil && ratedMode(st, reqs) {
		if st.blind {
			return txPlan{}, errBlind
		}
		return txPlan{}, fmt.Errorf("task %s: %w", taskNameOf(reqs), errRatesUnsupported)
	}
	if missing := d.missingTerms(); acquires && len(missing) > 0 && st.legacy == nil {
		if st.blind {
			return txPlan{}, errBlind
		}
		return txPlan{}, &errNeedLegacy{ids: missing} // only acquires judge liveness
	}
	for i, r := range reqs {
		if r.release != nil {
			d.release(i, r.release)
		}
	}
	if st.heartbeats != nil {
		d.queue.prune(st.heartbeats)
	}
	next := 0
	for i, r := range reqs {
		if r.acquire != nil {
			if err := d.acquire(i, r.acquire, st.reserved[next]); err != nil {
				return txPlan{}, err
			}
			next++
		}
	}
	d.settleTerms(acquires)
	fresh, err := d.offer(reqs)
	if err != nil {
		return txPlan{}, err
	}
	if d.tripped {
		return txPlan{}, errBlind
	}
	if d.keys != nil {
		if d.keys.incomplete {
			return txPlan{}, &errNeedKeys{tasks: []int64{taskIDOf(reqs)}}
		}
		d.plan.keys = d.keys.plan(&d)
	}
	d.plan.queue = formatQueue(d.queue.tickets)
	d.plan.tokens = d.list.String()
	d.plan.holders = formatTerms(d.termList())
	// A slot went back, or one was offered just now: a dead holder's, found free by a start that
	// may not take it (no barging) or by the queue's pruning. The waiter offered it must hear of
	// it now, not at its next poll.
	d.plan.notify = (d.freed && st.waiters) || fresh
	return d.plan, nil
}

// decider holds the state one decision moves through.
type decider struct {
	st          txState
	list        tokens.List
	terms       map[int64]term
	order       []int64 // terms in the order they were written or granted
	newID       func() uuid.UUID
	plan        txPlan
	freed       bool            // a slot went back
	releasedOK  map[int64]bool  // released in this transaction: true when it succeeded
	grantedRefs map[string]bool // idempotent references granted in this transaction
	tripped     bool            // a blind decision needed liveness
	queue       queue
	keys        *keyed // a keyed decision's state (keys.go); nil otherwise
}

// offer passes the capacity left to the waiters: a freed slot is granted to the direct ticket
// first in line or offered to the first tickets (a keyed task offers its plan's tickets). The
// releases learn whom. fresh reports a ticket granted or offered just now.
func (d *decider) offer(reqs []request) (fresh bool, err error) {
	if d.keys != nil {
		fresh = d.keyedOffers(d.keys.lastDeclared)
	} else {
		if err := d.handOff(); err != nil {
			return false, err
		}
		fresh = len(d.plan.handoffs) > 0
		if len(d.queue.tickets) == 0 && !fresh {
			return false, nil
		}
		offered, offeredNow := d.queue.offer(d.free())
		fresh = fresh || offeredNow
		d.plan.offered = slices.Concat(d.handed(), offered)
	}
	for i, r := range reqs {
		if r.release != nil {
			d.plan.results[i].release.Offered = d.plan.offered
		}
	}
	return fresh, nil
}

// free is the number of slots a grant could take now: unused ones and those of dead holders.
func (d *decider) free() int {
	if d.list.IsUnlimited() {
		return int(^uint(0) >> 1)
	}
	alive := d.alive
	if d.st.heartbeats == nil { // releases only: holders' heartbeats were not read, count them all
		alive = func(int64) bool { return true }
	}
	return max(0, d.list.Limit()-d.list.InUse(alive))
}

// queueAllows applies the queue to an acquisition: a waiter with a ticket is granted when its
// ticket is among the first free ones; a start without a ticket only when there are more free
// slots than tickets (no barging past the queue). A waiter that is not granted keeps or takes a
// ticket, whose position goes to res.
func (d *decider) queueAllows(req *acquisition, execID int64, res *AcquireResult) bool {
	if d.list.IsUnlimited() {
		return true
	}
	free := d.free()
	if req.ticket() != 0 {
		if d.st.blind {
			d.tripped = true
			return false
		}
		if _, granted := d.st.handoffs[req.ticket()]; granted && d.terms[req.ticket()].exec != 0 {
			res.Ticket, res.Direct, res.HandedOff = req.ticket(), true, true // its waiter takes it (TakeHandoff)
			return false
		}
		ticket := req.ticket()
		pos := d.queue.position(ticket)
		if pos < 0 {
			// Judged dead (its process paused), its grant lapsed, or never queued: back in line,
			// under a new id (a lapsed grant's record keeps the old one).
			ticket = execID
			d.queue.enqueue(d.newTicket(req, ticket, res.Effective))
			pos = d.queue.position(ticket)
		}
		if pos < free {
			d.queue.remove(ticket)
			return true
		}
		// Its waiter came and the slot went first to another (a ticket of higher priority, say): the
		// offer is withdrawn, so its window does not send the ticket to the back as late.
		d.queue.tickets[pos].offeredUS = 0
		res.Ticket, res.Position, res.Direct = ticket, pos+1, d.queue.tickets[pos].direct && res.Effective.KeepAlive()
		res.QueuedAt = time.UnixMicro(d.queue.tickets[pos].queuedUS)
		return false
	}
	if len(d.queue.tickets) < free {
		return true
	}
	if req.Queue != nil {
		if d.st.blind {
			d.tripped = true
			return false
		}
		t := d.newTicket(req, execID, res.Effective)
		d.queue.enqueue(t)
		res.Ticket, res.Position, res.Direct = execID, d.queue.position(execID)+1, t.direct
		res.QueuedAt = time.UnixMicro(t.queuedUS)
	}
	return false
}

// ticketTimes are a new ticket's death threshold (its waiter's) and offer window.
func ticketTimes(req *acquisition, effective Settings) (threshold, window time.Duration) {
	threshold = effective.KeepAliveDeathThreshold
	if threshold <= 0 {
		threshold = time.Minute
	}
	window = req.Queue.OfferWindow
	if window <= 0 {
		window = 3 * time.Second
	}
	return threshold, window
}

func (d *decider) newTicket(req *acquisition, id int64, effective Settings) ticket {
	threshold, window := ticketTimes(req, effective)
	// A direct ticket's grant is held by the waiter's session: only a KeepAlive waiter can take
	// one, and only where the schema records grants to take (protocol 4).
	direct := req.Queue.Direct && effective.KeepAlive() && d.st.handoffs != nil && d.st.protocol >= 4
	return ticket{id: id, session: req.SessionID, priority: int64(req.Queue.Priority), queuedUS: d.st.nowUS, threshold: threshold, window: window,
		direct: direct}
}

// missingTerms lists the grantees that have no terms.
func (d *decider) missingTerms() []int64 {
	var ids []int64
	for _, id := range d.list.Grantees() {
		if _, ok := d.terms[id]; !ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// holderOf judges an execution that may hold a slot, on the DB clock under the lock.
func (d *decider) holderOf(id int64) (holder, bool) {
	if d.st.blind {
		d.tripped = true
		return holder{alive: true}, true // the safe answer; the decision is dropped anyway
	}
	if t, ok := d.terms[id]; ok {
		in := t.expiresIn(d.st.nowUS, d.st.heartbeats[t.session])
		if h, granted := d.st.handoffs[id]; granted {
			// Not taken yet: alive until it lapses, whatever its session (a grant is taken back
			// only once lapsed, with its row locked, so that a take cannot race it).
			in = h.expiresIn(d.st.nowUS)
		}
		return holder{alive: in >= 0, expiresIn: in}, true
	}
	h, ok := d.st.legacy[id]
	return h, ok
}

func (d *decider) alive(id int64) bool { h, ok := d.holderOf(id); return ok && h.alive }

func (d *decider) release(i int, r *ReleaseRequest) {
	out := &d.plan.results[i].release
	if r.Retry && d.st.blind {
		d.tripped = true
	}
	if prior, ended := d.st.ended[r.ExecutionID]; ended {
		// A retry whose earlier attempt committed (its answer was lost), or an execution
		// reclaimed meanwhile: its end is recorded, nothing more to write.
		out.LeaseLost = prior == codes.OutcomeReclaimed
		return
	}
	if _, pending := d.st.handoffs[r.ExecutionID]; pending {
		// Its grant's row is still here, so this database never saw the take that started it:
		// a failover lost it. The slot goes back as a leaving waiter's would, and the lease is
		// reported lost rather than a completion this database cannot record.
		d.giveBack(r.ExecutionID)
		out.LeaseLost = true
		return
	}
	held := false
	if d.list.IsUnlimited() {
		_, held = d.terms[r.ExecutionID] // an unlimited task's holder holds while its terms do
	} else {
		d.list, held = d.list.Return(r.TokenID, r.ExecutionID)
		d.freed = d.freed || held
	}
	d.dropTerm(r.ExecutionID)
	if d.keys != nil {
		d.keys.dropHold(r.ExecutionID)
	}
	end := r.outcome()
	if !held {
		end = codes.OutcomeReclaimed // its reclaim wrote the end already; this one is not recorded
	}
	out.LeaseLost = !held
	d.plan.completes = append(d.plan.completes, i)
	d.plan.outcomes = append(d.plan.outcomes, end)
	ok := held && end == codes.OutcomeCompleted
	d.releasedOK[r.ExecutionID] = ok
	if ok && r.Idempotent && r.ReferenceValue != nil {
		d.plan.succeeded = append(d.plan.succeeded, i)
	}
}

func (d *decider) acquire(i int, req *acquisition, execID int64) error {
	out := &d.plan.results[i]
	if d.st.protocol > ProtocolVersion {
		out.err = fmt.Errorf("%w: the database runs grant protocol %d; this binary speaks protocol %d and must not grant by older rules: upgrade it (README: Upgrading)",
			ErrUpgradeRequired, d.st.protocol, ProtocolVersion)
		return nil
	}
	res := &out.acquire
	switch req.kind {
	case opLeave:
		if pos := d.queue.position(req.ticket()); pos >= 0 && pos < d.free() {
			d.freed = true // its offer passes to the next ticket: tell that waiter
		}
		if t := d.keyTicket(req.ticket()); t != nil {
			d.freed = d.freed || t.offeredUS != 0
			d.keys.remove(t)
		}
		d.queue.remove(req.ticket())
		d.giveBack(req.ticket())
		res.Denied = DeniedLimit
		return nil
	case opReap:
		d.reap(out)
		res.Denied = DeniedLimit
		return nil
	}
	res.Effective = d.st.overrides.Apply(req.Declared)
	res.Overridden = !d.st.overrides.IsZero()
	// The declaration was valid on its own; an override set earlier may not fit it.
	if err := d.st.overrides.Check(req.Declared, "declared by "+req.Host); err != nil {
		out.err = fmt.Errorf("task %s: %w", req.TaskName, err)
		return nil
	}
	if !res.Effective.Enabled {
		res.Denied = DeniedDisabled // nothing is written for a disabled task
		return nil
	}
	if st := d.st; st.declaredLimit != nil && st.declaredBy != nil && *st.declaredLimit != req.Declared.ConcurrencyLimit && *st.declaredBy != req.Host {
		res.ConflictingDeclaration = &Declaration{Limit: *st.declaredLimit, Host: *st.declaredBy}
	}
	d.plan.declaredLimit, d.plan.declaredBy = &req.Declared.ConcurrencyLimit, &req.Host

	if err := d.adjust(req, out); err != nil {
		return err
	}
	hold, err := d.holdLeft(res.Effective.Threshold())
	if err != nil {
		return err
	}
	var grant tokens.GrantNResult
	switch {
	case req.Idempotent && req.ReferenceValue != nil && d.duplicate(*req.ReferenceValue):
		res.Denied = DeniedDuplicate
	case hold > 0:
		// A new timeline: holders of grants it lost may still run until their threshold.
		res.Denied, res.NextExpiry = DeniedLimit, hold
	case d.keys == nil && !d.queueAllows(req, execID, res):
		res.Denied = DeniedLimit
	case d.keys != nil && !d.keyedAllows(req, execID, res):
		// denied by the task's limit or its key's (keyedAllows says which), or its cost is unfit
	default:
		if d.list, grant = d.list.GrantN(execID, req.cost(), d.alive); !grant.Granted {
			res.Denied = DeniedLimit
		}
	}
	switch {
	case grant.Granted:
		d.plan.fence = max(d.plan.fence, d.st.epoch.base) + 1
		res.ExecutionID, res.Fence, res.TokenID = execID, d.plan.fence, grant.TokenIDs[0]
		for _, id := range grant.Reclaimed {
			out.reclaim = append(out.reclaim, d.reclaim(id))
		}
		if d.keys != nil {
			d.keys.granted(execID, req.Key, req.cost(), d.st.nowUS, d.grantRates(&req.Declared))
		}
		session := req.SessionID
		if !res.Effective.KeepAlive() {
			session = 0
		}
		d.addTerm(term{exec: execID, session: session, grantedUS: pendingUS, threshold: res.Effective.Threshold()})
		if req.Idempotent && req.ReferenceValue != nil {
			d.grantedRefs[*req.ReferenceValue] = true
			d.plan.refClaims = append(d.plan.refClaims, i)
		}
	case res.Denied == DeniedLimit || res.Denied == DeniedKeyLimit:
		res.NextExpiry = d.nextExpiry()
	}
	switch {
	case res.Unfit != nil: // refused for its cost: nothing recorded
	case res.Denied == NotDenied || req.RecordDenial:
		res.ExecutionID = execID
		d.plan.inserts = append(d.plan.inserts, i)
		if req.Schedule != nil && req.ScheduledFor != nil {
			d.plan.claims = append(d.plan.claims, i)
		}
	case res.Denied == DeniedLimit || res.Denied == DeniedKeyLimit:
		d.plan.markWaiting = true
	}
	return nil
}

// adjust reconciles the list to the limit in force for req, reclaiming the dead holders whose
// slots it removes. A keyed task's dead holders all go first, before an unlimited list's live
// ones are adopted: their keys' rooms are computed without them.
func (d *decider) adjust(req *acquisition, out *outcome) error {
	newID := req.NewTokenID
	if newID == nil {
		newID = d.newID
	}
	limit := out.acquire.Effective.ConcurrencyLimit
	var next tokens.List
	var gone []int64
	var err error
	if d.keys != nil && d.st.heartbeats != nil {
		d.reap(out)
		d.keys.lastDeclared = &req.Declared
	}
	if d.keys != nil {
		next, gone, err = d.list.AdjustCosts(limit, d.alive, d.adoptable(), func(id int64) int { return d.keys.holdOf(id).cost }, newID)
	} else {
		next, gone, err = d.list.Adjust(limit, d.alive, d.adoptable(), newID)
	}
	if err != nil {
		return fmt.Errorf("task %s: %w", req.TaskName, err)
	}
	d.list = next
	for _, id := range gone {
		out.reclaim = append(out.reclaim, d.reclaim(id))
	}
	return nil
}

// reap takes back the slots of the holders judged dead.
func (d *decider) reap(out *outcome) {
	for _, t := range d.list.Tokens {
		if (t.Status == tokens.Held || t.Status == tokens.Retiring) && t.Grantee != 0 && !d.alive(t.Grantee) {
			var held bool
			if d.list, held = d.list.Return(t.ID, t.Grantee); held {
				d.freed = true
				out.reclaim = append(out.reclaim, d.reclaim(t.Grantee))
			}
		}
	}
	if d.list.IsUnlimited() { // its holders share one token: their terms are what they hold
		for _, id := range slices.Clone(d.order) {
			if _, ok := d.terms[id]; ok && !d.alive(id) {
				out.reclaim = append(out.reclaim, d.reclaim(id))
			}
		}
	}
}

// duplicate reports whether an idempotent start with ref must be refused: an execution with it
// succeeded, or runs (alive), or was granted or succeeded in this very transaction.
func (d *decider) duplicate(ref string) bool {
	if d.grantedRefs[ref] {
		return true
	}
	if d.st.blind {
		d.tripped = true
		return true
	}
	c, ok := d.st.claims[ref]
	switch {
	case !ok:
		return false
	case c.succeeded:
		return true
	}
	if ok, released := d.releasedOK[c.exec]; released {
		return ok
	}
	return d.alive(c.exec)
}

// reclaim takes the slot of the dead holder id: its terms go, and the reclaim is written (with a
// recheck of its session under lock, so a heartbeat that raced the decision wins).
func (d *decider) reclaim(id int64) int64 {
	if d.keys != nil {
		d.keys.dropHold(id)
	}
	if _, granted := d.st.handoffs[id]; granted { // never taken: there is no execution to end
		d.plan.lapsed = append(d.plan.lapsed, id)
		d.dropTerm(id)
		return id
	}
	if t, ok := d.terms[id]; ok {
		d.plan.reclaims = append(d.plan.reclaims, t)
		d.dropTerm(id)
	} else {
		d.plan.legacyReclaim = append(d.plan.legacyReclaim, id)
	}
	return id
}

func (d *decider) addTerm(t term) {
	if _, ok := d.terms[t.exec]; !ok {
		d.order = append(d.order, t.exec)
	}
	d.terms[t.exec] = t
}

func (d *decider) dropTerm(id int64) {
	if _, ok := d.terms[id]; ok {
		delete(d.terms, id)
		d.order = slices.DeleteFunc(d.order, func(x int64) bool { return x == id })
	}
}

// settleTerms keeps the terms that may still hold a slot: a limited list's grantees; for an
// unlimited list, the live holders sharing its token (the dead ones are reclaimed, when the
// transaction judges liveness: it has acquires).
func (d *decider) settleTerms(judge bool) {
	if d.list.IsUnlimited() {
		if !judge {
			return
		}
		for _, id := range slices.Clone(d.order) {
			if !d.alive(id) {
				d.reclaim(id)
			}
		}
		return
	}
	granted := map[int64]bool{}
	for _, id := range d.list.Grantees() {
		granted[id] = true
	}
	for _, id := range slices.Clone(d.order) {
		switch _, handedOff := d.st.handoffs[id]; {
		case granted[id]:
		case handedOff:
			// A grant to a ticket left out of a new list (not adopted: it lapsed, so its row is
			// locked): taken back like any lapsed grant, so a late take finds nothing.
			d.reclaim(id)
		default:
			d.dropTerm(id) // its token went with Adjust, which reported it
		}
	}
}

func (d *decider) termList() []term {
	out := make([]term, len(d.order))
	for i, id := range d.order {
		out[i] = d.terms[id]
	}
	return out
}

// adoptable are the live executions that Adjust adopts when an unlimited (or new) list gets a
// limit, in id order.
func (d *decider) adoptable() []int64 {
	if !d.list.IsUnlimited() && len(d.list.Tokens) > 0 {
		return nil
	}
	var ids []int64
	for _, id := range d.order {
		if d.alive(id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// nextExpiry is how long until the earliest live grantee could be judged dead (0 if none).
func (d *decider) nextExpiry() time.Duration {
	var next time.Duration
	for _, id := range d.list.Grantees() {
		if h, ok := d.holderOf(id); ok && h.alive && (next == 0 || h.expiresIn < next) {
			next = max(h.expiresIn, time.Millisecond)
		}
	}
	return next
}

func taskNameOf(reqs []request) string {
	if len(reqs) == 0 {
		return ""
	}
	if a := reqs[0].acquire; a != nil {
		return a.TaskName
	}
	return reqs[0].release.TaskName
}
