package execution

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/taskling-go/taskling/tokens"
)

// Keyed tasks (grant protocol 6; docs/keys.md, docs/how-it-works.md#keys-and-costs-grant-protocol-6).
// A decision is keyed when the schema has keys and the task or a request uses them: a holder with a
// key or a cost, a keyed ticket, a key limit declared or overridden, or a request with a key, a
// cost or a declared key limit. Otherwise it is the decision of before, unchanged.

// keyRow is what a task row holds of keys (0022_keys.sql).
type keyRow struct {
	holders       string // key_holders (keycodec.go)
	limit         *int   // the operator's override of KeyLimit
	overrides     string // key_overrides
	declaredLimit *int
	declared      string // declared_keys
	vtime         int64
	waiting       int // rows of key_ticket
}

// keyReads are the keyed waiters and round-robin state round trip 1 read for a task.
type keyReads struct {
	rounds map[string]keyRoundRow
	// candidates are the keys read in round-robin order (at most candidateLimit); perKey and
	// oldest the tickets asked for per candidate key and of the task's oldest.
	candidates                     []string
	candidateLimit, perKey, oldest int
	tickets                        []*keyTicket
	heartbeats                     map[int64]int64 // of the tickets' sessions, by ticket
	// final: the reads were as wide as they go; the decision takes them as complete.
	final bool
}

// keyRoundRow is a task_key row as read.
type keyRoundRow struct {
	keyRound
	waiting int
	top     int64
}

// errNeedKeys asks for another attempt that reads the keyed state of tasks (wider, if it was
// read already).
type errNeedKeys struct{ tasks []int64 }

func (e *errNeedKeys) Error() string {
	return fmt.Sprintf("tasks %v need their keys read (wider)", e.tasks)
}

// errKeysUnsupported: a keyed request on a schema without keys.
var errKeysUnsupported = errors.New("keys and costs need migration 0022 (grant protocol 6): run migrations.Up")

// keyed is a keyed task's state as one decision moves it.
type keyed struct {
	row   keyRow
	reads *keyReads
	holds map[int64]keyHold // holders with a key or a cost, by execution
	// waiting are the live tickets: the stored ones read, the task row's, and those queued now.
	waiting []*keyTicket
	// rowQueue is the task row's queue: its tickets leave it there.
	rowQueue *queue
	rounds   map[string]keyRound
	vtime    int64
	// declared is what limits keys when no request says (the last requester's declaration), and
	// lastDeclared that of the last acquire of the decision.
	declared     Settings
	lastDeclared *Settings
	pruned       bool
	// rated: the task or a request is under a rate; tat and keyTATs are the rates' state as the
	// decision moves it (rates.go), rateKeys the keys whose tat it moved.
	rated    bool
	tat      int64
	keyTATs  map[string]int64
	rateKeys map[string]bool
	// tatDelta and keyDeltas are the units (in µs) the decision's grants took of each rate;
	// baseTAT and baseKeyTATs the tats they were taken from (read, rescaled to the rates in force
	// now, tatRateNow and keyRateNow).
	tatDelta    int64
	keyDeltas   map[string]int64
	baseTAT     int64
	baseKeyTATs map[string]int64
	tatRateNow  string
	keyRateNow  func(key string) string

	// What the decision writes.
	inserted, updated []*keyTicket
	deleted           []*keyTicket
	joined            map[string]bool // keys that start waiting (their rows join at the virtual time)
	regranted         map[string]bool // keys whose round a grant changed
	touched           map[string]bool // keys whose waiters or holders changed
	unfit             []int64         // tickets refused: their cost no longer fits a limit
	incomplete        bool            // a plan needed tickets or keys not read
}

// keyedMode reports whether a decision of reqs on st is keyed.
func keyedMode(st txState, reqs []request) bool {
	if st.keys == nil {
		return false
	}
	k := st.keys
	if k.holders != "" || k.waiting > 0 || k.overrides != "" || k.limit != nil && *k.limit > 0 ||
		k.declaredLimit != nil && *k.declaredLimit > 0 || k.declared != "" || st.rates.configured() {
		return true
	}
	return slices.ContainsFunc(reqs, func(r request) bool { return r.acquire != nil && (r.acquire.keyed() || r.acquire.Declared.Rated()) })
}

// ratedMode reports whether a decision of reqs on st is under rates.
func ratedMode(st txState, reqs []request) bool {
	return st.rates.configured() || slices.ContainsFunc(reqs, func(r request) bool { return r.acquire != nil && r.acquire.Declared.Rated() })
}

// keyed reports whether the request names a key or a cost, or declares key limits.
func (a *acquisition) keyed() bool {
	return a.Key != "" || a.Cost > 1 || a.Declared.Keyed()
}

// cost is the slots the request takes.
func (a *acquisition) cost() int { return max(a.Cost, 1) }

// newKeyed sets up a keyed decision: the holders' keys, the limits the row holds, the waiters
// read and those of the row's queue (key "", cost 1).
func (d *decider) newKeyed(reqs []request) error {
	st := d.st
	k := &keyed{row: *st.keys, reads: st.keyReads, rowQueue: &d.queue, rounds: map[string]keyRound{}, vtime: st.keys.vtime,
		joined: map[string]bool{}, regranted: map[string]bool{}, touched: map[string]bool{}}
	var err error
	if k.holds, err = parseKeyHolders(k.row.holders); err != nil {
		return err
	}
	if d.st.overrides.KeyLimits, err = ParseKeyLimits(k.row.overrides); err != nil {
		return err
	}
	if k.declared.KeyLimits, err = ParseKeyLimits(k.row.declared); err != nil {
		return err
	}
	if k.row.declaredLimit != nil {
		k.declared.KeyLimit = *k.row.declaredLimit
	}
	if k.rated = ratedMode(st, reqs); k.rated {
		switch {
		case st.blind && !st.estimated:
			return errBlind // a rate needs the database's clock and state
		case st.rates == nil:
			return fmt.Errorf("task %s: %w", taskNameOf(reqs), errRatesUnsupported)
		}
		if err := st.rates.apply(&d.st.overrides, &k.declared); err != nil {
			return fmt.Errorf("task %s: %w", taskNameOf(reqs), err)
		}
		k.tat, k.keyTATs, k.rateKeys, k.keyDeltas = st.rates.tat, maps.Clone(st.rates.keyTATs), map[string]bool{}, map[string]int64{}
	}
	if k.row.waiting > 0 && k.reads == nil {
		if st.blind {
			return errBlind
		}
		return &errNeedKeys{tasks: []int64{taskIDOf(reqs)}}
	}
	if r := k.reads; r != nil {
		for key, row := range r.rounds {
			k.rounds[key] = row.keyRound
		}
		k.waiting = slices.Clone(r.tickets)
	}
	d.keys = k
	k.addRowTickets()
	if k.rated {
		d.rescaleRates(reqs)
	}
	return nil
}

// rescaleRates takes the tats read as they stand under the rates in force now (the first
// acquire's declaration under the overrides, else the stored one): a tat moved under another rate
// is rescaled (rescale), so that a raised rate admits at once.
func (d *decider) rescaleRates(reqs []request) {
	k, st := d.keys, d.st.rates
	var decl *Settings
	if i := slices.IndexFunc(reqs, func(r request) bool { return r.acquire != nil }); i >= 0 {
		decl = &reqs[i].acquire.Declared
	}
	r := d.ratesFor(k.rateDeclared(decl))
	if from, err := decodeRate(st.tatRate); err == nil {
		k.tat = rescale(k.tat, d.st.nowUS, from, r.task)
	}
	for key, tat := range k.keyTATs {
		if from, err := decodeRate(st.keyTATRates[key]); err == nil {
			k.keyTATs[key] = rescale(tat, d.st.nowUS, from, r.keyRate(key))
		}
	}
	k.baseTAT, k.baseKeyTATs = k.tat, maps.Clone(k.keyTATs)
	k.tatRateNow, k.keyRateNow = encodeRate(r.task), func(key string) string { return encodeRate(r.keyRate(key)) }
}

// addRowTickets adds the tickets of the task row's queue to the waiters, as key "", cost 1.
func (k *keyed) addRowTickets() {
	for _, t := range k.rowQueue.tickets {
		k.waiting = append(k.waiting, &keyTicket{id: t.id, session: t.session, cost: 1, priority: t.priority, queuedUS: t.queuedUS,
			offeredUS: t.offeredUS, threshold: t.threshold, window: t.window, inRow: true, direct: t.direct})
	}
}

func taskIDOf(reqs []request) int64 {
	if len(reqs) == 0 {
		return 0
	}
	return reqs[0].taskID()
}

// holdOf is what a holder holds: key "", cost 1 unless the row says otherwise.
func (k *keyed) holdOf(exec int64) keyHold {
	if h, ok := k.holds[exec]; ok {
		return h
	}
	return keyHold{cost: 1}
}

// holders are the executions that may hold a slot: the list's grantees, or (unlimited) the terms.
func (d *decider) holders() []int64 {
	if d.list.IsUnlimited() {
		return slices.Clone(d.order)
	}
	return d.list.Grantees()
}

// fairFor is the task's capacity and round-robin state for a plan, with the keys' limits as
// declared (the request's declaration, or the last stored one when nil) under the overrides.
func (d *decider) fairFor(declared *Settings) *fair {
	k := d.keys
	alive := d.alive
	if d.st.heartbeats == nil { // releases only, or blind: count every holder
		alive = func(int64) bool { return true }
	}
	used := map[string]int{}
	inUse := 0
	for _, id := range d.holders() {
		if alive(id) {
			h := k.holdOf(id)
			used[h.key] += h.cost
			inUse += h.cost
		}
	}
	free := unlimitedFree
	if !d.list.IsUnlimited() {
		free = max(0, d.list.Limit()-inUse)
		if slices.ContainsFunc(d.list.Tokens, func(t tokens.Token) bool { return t.Status == tokens.Retiring }) {
			free = 0 // over a lowered limit: nothing is granted until it is back under
		}
	}
	decl := k.declared
	if declared != nil {
		decl = *declared
	}
	o := d.st.overrides
	round := maps.Clone(k.rounds)
	for _, t := range k.waiting {
		if _, ok := round[t.key]; !ok {
			round[t.key] = keyRound{pass: k.vtime} // its row joins at the virtual time as it is now
		}
	}
	f := &fair{free: free, used: used, round: round, vtime: k.vtime, nowUS: d.st.nowUS,
		limit: func(key string) int { l, _ := KeyLimitOf(key, decl, o); return l }}
	if k.rated {
		f.rates = d.ratesFor(decl)
	}
	return f
}

// ratesFor is the task's rates, with declared in force under the overrides, at their state now.
func (d *decider) ratesFor(declared Settings) *fairRates {
	k, o := d.keys, d.st.overrides
	task := declared.Rate
	if o.Rate != nil {
		task = *o.Rate
	}
	return &fairRates{task: task, tat: k.tat, keyTATs: maps.Clone(k.keyTATs), nowUS: d.st.nowUS, sinceUS: d.st.epoch.sinceUS,
		keyRate: func(key string) Rate { r, _ := RateOf(key, declared, o); return r }}
}

// rateDeclared is the declaration rates are taken from when no request gives one.
func (k *keyed) rateDeclared(declared *Settings) Settings {
	if declared != nil {
		return *declared
	}
	if k.lastDeclared != nil {
		return *k.lastDeclared
	}
	return k.declared
}

// unfitRate says which rate a cost exceeds the burst of ("" if none): a cost above its rate's
// burst never fits.
func (d *decider) unfitRate(key string, cost int, declared Settings) (string, int) {
	if d.keys == nil || !d.keys.rated {
		return "", 0
	}
	r := d.ratesFor(declared)
	if !r.task.IsZero() && int64(cost) > r.task.burst() {
		return UnfitRate, int(r.task.burst())
	}
	if kr := r.keyRate(key); !kr.IsZero() && int64(cost) > kr.burst() {
		return UnfitKeyRate, int(kr.burst())
	}
	return "", 0
}

// unfitLimit says which limit a cost does not fit ("" if both): the task's (limited) or its key's.
func unfitLimit(cost, taskLimit, keyLimit int) (string, int) {
	switch {
	case taskLimit != -1 && cost > taskLimit:
		return UnfitTask, taskLimit
	case keyLimit > 0 && cost > keyLimit:
		return UnfitKey, keyLimit
	}
	return "", 0
}

// pruneKeyed drops the tickets of dead waiters, those whose cost no longer fits a limit (their
// waiters are told), and those whose offer was not taken in time: a live session's ticket whose
// waiter gave up without leaving (its leave failed) would else be requeued for ever ahead of the
// key's live waiters, each lapse charging its key's round. A live waiter whose ticket went queues
// anew, at the back of its key, on its next attempt. Only a transaction that judges liveness prunes.
func (d *decider) pruneKeyed(limits Settings, taskLimit int) {
	k := d.keys
	now := d.st.nowUS
	kept := k.waiting[:0:0]
	for _, t := range slices.Clone(k.waiting) { // remove edits k.waiting
		hb := d.ticketHeartbeat(t)
		late := t.offeredUS != 0 && time.Duration(now-t.offeredUS)*time.Microsecond > t.window
		keyLimit, _ := KeyLimitOf(t.key, limits, d.st.overrides)
		which, _ := unfitLimit(t.cost, taskLimit, keyLimit)
		if which == "" {
			which, _ = d.unfitRate(t.key, t.cost, limits)
		}
		switch {
		case t.inRow: // the row's queue prunes its own (queue.prune)
			continue
		case which != "":
			k.unfit = append(k.unfit, t.id)
			k.remove(t)
			continue
		case late || !(ticket{queuedUS: t.queuedUS, threshold: t.threshold}).alive(now, hb):
			k.remove(t)
			continue
		}
		kept = append(kept, t)
	}
	// The row's queue was pruned by its own rules (queue.prune): its tickets are taken as they are now.
	k.waiting = slices.DeleteFunc(kept, func(t *keyTicket) bool { return t.inRow })
	k.addRowTickets()
	k.pruned = true
}

// ticketHeartbeat is the last heartbeat of a ticket's session (0 if unknown).
func (d *decider) ticketHeartbeat(t *keyTicket) int64 {
	if t.inRow || d.keys.reads == nil {
		return d.st.heartbeats[t.session]
	}
	if hb, ok := d.keys.reads.heartbeats[t.id]; ok {
		return hb
	}
	return d.st.heartbeats[t.session]
}

// remove takes t out of the waiters: a stored ticket is deleted, a row ticket leaves the row's
// queue, a ticket queued in this decision is not inserted.
func (k *keyed) remove(t *keyTicket) {
	k.waiting = slices.DeleteFunc(k.waiting, func(w *keyTicket) bool { return w == t })
	if i := slices.Index(k.inserted, t); i >= 0 {
		k.inserted = slices.Delete(k.inserted, i, i+1)
		k.touched[t.key] = true
		return
	}
	k.updated = slices.DeleteFunc(k.updated, func(w *keyTicket) bool { return w == t })
	if t.inRow {
		k.rowQueue.remove(t.id)
	} else {
		k.deleted = append(k.deleted, t)
	}
	k.touched[t.key] = true
}

// roundOf is key's round-robin state; a key with no row joins at the virtual time.
func (k *keyed) roundOf(key string) keyRound {
	if r, ok := k.rounds[key]; ok {
		return r
	}
	return keyRound{pass: k.vtime}
}

func (k *keyed) find(id int64) *keyTicket {
	if i := slices.IndexFunc(k.waiting, func(t *keyTicket) bool { return t.id == id }); i >= 0 {
		return k.waiting[i]
	}
	return nil
}

// Limits a start's cost may exceed (Unfit.Limit): a limit, or a rate's burst.
const (
	UnfitTask    = "task"
	UnfitKey     = "key"
	UnfitRate    = "rate"
	UnfitKeyRate = "key_rate"
)

// Unfit says that a start's cost exceeds a limit in force, so it can never be granted: the task's
// or its key's. A queued ticket is refused so when a limit is lowered below its cost.
type Unfit struct {
	Limit string // UnfitTask, UnfitKey, UnfitRate or UnfitKeyRate
	Value int    // that limit, or that rate's burst
	Cost  int
}

// deniedFor is the denial of a start refused by limit ("" or UnfitTask: the task's).
func deniedFor(limit string) DenyReason {
	switch limit {
	case UnfitKey:
		return DeniedKeyLimit
	case UnfitRate:
		return DeniedRate
	case UnfitKeyRate:
		return DeniedKeyRate
	}
	return DeniedLimit
}

// keyedAllows applies a keyed task's queue to an acquisition, as queueAllows does an unkeyed one: a
// waiter is granted when its ticket is among those the plan grants now; a start without a ticket
// only when it fits what the waiting tickets' plan leaves (no barging). A waiter that is not
// granted keeps or takes a ticket. It sets the denial (task or key limit) when it refuses.
func (d *decider) keyedAllows(req *acquisition, execID int64, res *AcquireResult) bool {
	k := d.keys
	key, cost := req.Key, req.cost()
	keyLimit, _ := KeyLimitOf(key, req.Declared, d.st.overrides)
	res.KeyLimit = keyLimit
	which, limit := unfitLimit(cost, res.Effective.ConcurrencyLimit, keyLimit)
	if which == "" {
		which, limit = d.unfitRate(key, cost, req.Declared)
	}
	if which != "" {
		if t := k.find(req.ticket()); t != nil && req.ticket() != 0 {
			k.remove(t)
		}
		res.Unfit, res.Denied = &Unfit{Limit: which, Value: limit, Cost: cost}, deniedFor(which)
		return false
	}
	if !k.pruned && d.st.heartbeats != nil {
		d.pruneKeyed(req.Declared, res.Effective.ConcurrencyLimit)
	}
	if ticket := req.ticket(); ticket != 0 {
		if d.st.blind {
			d.tripped = true
			return false
		}
		if _, granted := d.st.handoffs[ticket]; granted && d.terms[ticket].exec != 0 {
			// Granted to its ticket: its waiter takes it (TakeHandoff); this attempt starts nothing.
			res.Ticket, res.Direct, res.HandedOff, res.Denied = ticket, true, true, DeniedLimit
			return false
		}
	}
	f := d.fairFor(&req.Declared)
	mine := k.find(req.ticket())
	if req.ticket() == 0 {
		mine = nil
	}
	if mine == nil && req.Queue == nil { // a plain start
		plan, held := f.plan(k.waiting)
		k.checkComplete(f, plan, held)
		if ok := !held && f.fits(&keyTicket{key: key, cost: cost}) && d.unblocked(f, plan, key); ok {
			return true
		}
		f.deny(key, cost, res)
		// Dead holders may have left room: the database can tell. (A rate's refusal does not
		// depend on the holders.)
		d.tripped = d.tripped || d.st.blind && res.Denied != DeniedRate && res.Denied != DeniedKeyRate
		return false
	}
	if mine == nil {
		if d.st.blind && len(k.waiting) > 0 {
			d.tripped = true
			return false
		}
		mine = k.enqueue(req, execID, d.st.nowUS, res.Effective)
		// As a row ticket: a direct one's grant is held by the waiter's session (KeepAlive), where
		// the schema records grants to take.
		mine.direct = req.Queue.Direct && res.Effective.KeepAlive() && d.st.handoffs != nil && d.st.protocol >= 4
	}
	plan, held := f.plan(k.waiting)
	k.checkComplete(f, plan, held)
	if slices.Contains(plan, mine) {
		k.remove(mine)
		return true
	}
	if d.st.blind {
		d.tripped = true // a ticket is written by the usual path only
		return false
	}
	if mine.offeredUS != 0 {
		// Its waiter came and the plan no longer grants it (something took the slots first): the
		// offer is withdrawn, so its window does not drop the ticket as late.
		k.setOffered(d, mine, 0)
	}
	res.Ticket, res.Position = mine.id, k.position(mine)
	f.deny(key, cost, res)
	res.Direct = mine.direct
	return false
}

// unblocked reports whether key's room is not kept for a starving ticket of its own, once plan
// was granted.
func (d *decider) unblocked(f *fair, plan []*keyTicket, key string) bool {
	left := slices.DeleteFunc(slices.Clone(d.keys.waiting), func(t *keyTicket) bool { return slices.Contains(plan, t) })
	_, blocked := f.reservations(left)
	return blocked[key] == nil
}

// deny sets the reason a start of cost under key is refused on f (after the plan): its key's
// limit when the task has room for it; else a rate with no room for it, with how long until it
// has, when the slots have room; else the task's limit.
func (f *fair) deny(key string, cost int, res *AcquireResult) {
	res.Denied = DeniedLimit
	switch {
	case cost > f.free:
	case cost > f.room(key):
		res.Denied = DeniedKeyLimit
	default:
		if why, rate, wait := f.rates.refusal(key, cost); why != NotDenied {
			res.Denied, res.Rate, res.RetryAfter = why, rate, wait
		}
	}
}

// enqueue queues a ticket for req (its first attempt's id), at the back of its key.
func (k *keyed) enqueue(req *acquisition, id, nowUS int64, effective Settings) *keyTicket {
	threshold, window := ticketTimes(req, effective)
	t := &keyTicket{id: id, session: req.SessionID, key: req.Key, cost: req.cost(), priority: int64(req.Queue.Priority),
		queuedUS: nowUS, threshold: threshold, window: window}
	k.waiting = append(k.waiting, t)
	k.inserted = append(k.inserted, t)
	k.touched[t.key] = true
	return t
}

// position is t's place in its key's line (1: next) among the tickets the decision knows, and
// behind those it did not read.
func (k *keyed) position(t *keyTicket) int {
	pos := 1
	for _, o := range k.waiting {
		if o != t && o.key == t.key && (o.priority > t.priority || o.priority == t.priority && (o.queuedUS < t.queuedUS || o.queuedUS == t.queuedUS && o.id < t.id)) {
			pos++
		}
	}
	if k.reads != nil && slices.Contains(k.inserted, t) {
		known := 0
		for _, o := range k.reads.tickets {
			if o.key == t.key {
				known++
			}
		}
		pos += max(0, k.reads.rounds[t.key].waiting-known)
	}
	return pos
}

// granted records a grant of cost under key to exec: its hold, and, while others wait, its key's
// round (so the key goes behind those served less).
func (k *keyed) granted(exec int64, key string, cost int, nowUS int64, rates *fairRates) {
	if key != "" || cost != 1 {
		k.holds[exec] = keyHold{key: key, cost: cost}
	}
	if k.rated && rates != nil {
		rates.tat, rates.keyTATs = k.tat, k.keyTATs
		rates.take(key, cost)
		k.tat = rates.tat
		if !rates.task.IsZero() {
			k.tatDelta += int64(cost) * rates.task.intervalUS()
		}
		if kr := rates.keyRate(key); !kr.IsZero() {
			k.rateKeys[key] = true
			k.keyDeltas[key] += int64(cost) * kr.intervalUS()
		}
	}
	if len(k.waiting) == 0 && k.row.waiting == 0 {
		return // nobody waits: no round to keep
	}
	f := &fair{free: unlimitedFree, used: map[string]int{}, round: k.rounds, vtime: k.vtime, nowUS: nowUS + int64(len(k.regranted)),
		limit: func(string) int { return 0 }}
	f.take(&keyTicket{key: key, cost: cost})
	k.vtime = f.vtime
	k.regranted[key] = true
}

// dropHold forgets what exec held (released or reclaimed): its key may lose its row.
func (k *keyed) dropHold(exec int64) {
	h := k.holdOf(exec)
	delete(k.holds, exec)
	k.touched[h.key] = true
}

// checkComplete marks the decision incomplete when plan, taken on the tickets and keys read, could
// differ with those not read: capacity is left and keys were not read, or a key with room has
// tickets not read, or a ticket granted has a lower priority than one not read may have.
func (k *keyed) checkComplete(f *fair, plan []*keyTicket, held bool) {
	r := k.reads
	if r == nil || r.final || k.incomplete {
		return
	}
	room := !held && f.capacity() > 0
	allKeys := len(r.candidates) < r.candidateLimit
	if room && !allKeys {
		k.incomplete = true
		return
	}
	read := map[string]int{}
	lowest := map[string]int64{}
	for _, t := range r.tickets {
		read[t.key]++
		if p, ok := lowest[t.key]; !ok || t.priority < p {
			lowest[t.key] = t.priority
		}
	}
	bound := int64(-1 << 62)
	for _, key := range r.candidates {
		row := r.rounds[key]
		if row.waiting > read[key] {
			if room && f.roomOf(key) > 0 {
				k.incomplete = true
				return
			}
			bound = max(bound, lowest[key])
		}
	}
	if !allKeys && len(r.candidates) > 0 { // a key not read has a top priority at most the last one read
		bound = max(bound, r.rounds[r.candidates[len(r.candidates)-1]].top)
	}
	if slices.ContainsFunc(plan, func(t *keyTicket) bool { return t.priority < bound }) {
		k.incomplete = true
	}
}

// keyedOffers grants the free capacity to the tickets the plan grants now: a direct ticket is
// handed the slot in this transaction, the others are offered it (their waiters take it in their
// own transactions). It tells the waiters of the tickets refused, and reports whether a ticket was
// handed off or offered just now.
func (d *decider) keyedOffers(declared *Settings) bool {
	k := d.keys
	if !k.pruned && d.st.heartbeats != nil {
		limits := k.declared
		if declared != nil {
			limits = *declared
		}
		d.pruneKeyed(limits, d.list.Limit())
	}
	var handed []int64
	plan := d.planKeyed(declared)
	// A handoff is a grant and moves its key's pass; an offer does not. So after handing off, plan
	// again on the state as it now stands: the tickets offered are those the next decision grants.
	handing := d.mayHandOff()
	for handing {
		n := len(handed)
		if handed = d.handOffPlanned(plan, handed); len(handed) == n {
			break
		}
		plan = d.planKeyed(declared)
	}
	fresh := len(handed) > 0
	for _, t := range plan {
		if t.offeredUS == 0 {
			k.setOffered(d, t, d.st.nowUS)
			fresh = true
		}
		d.plan.offered = append(d.plan.offered, t.id)
	}
	d.plan.offered = append(append(handed, d.plan.offered...), k.unfit...)
	return fresh || len(k.unfit) > 0
}

// planKeyed is the plan of the waiting tickets on the capacity and rounds as they stand now.
func (d *decider) planKeyed(declared *Settings) []*keyTicket {
	f := d.fairFor(declared)
	plan, held := f.plan(d.keys.waiting)
	d.keys.checkComplete(f, plan, held)
	return plan
}

// handOffPlanned hands the slots to plan's direct tickets, appending their ids to handed, but not
// to one behind an older ticket of its key that is only offered: first in, first out.
func (d *decider) handOffPlanned(plan []*keyTicket, handed []int64) []int64 {
	offeredKey := map[string]bool{}
	for _, t := range plan {
		if t.direct && !offeredKey[t.key] && d.handOffKeyed(t) {
			handed = append(handed, t.id)
			continue
		}
		offeredKey[t.key] = true
	}
	return handed
}

// handOffKeyed grants t's cost to its direct ticket in this transaction (handoff.go): its waiter
// takes the grant, with its key and cost, without the task row. false: it cannot be granted now
// (a new timeline's hold, or the tokens are not free), and is offered instead.
func (d *decider) handOffKeyed(t *keyTicket) bool {
	if hold, err := d.holdLeft(t.threshold); err != nil || hold > 0 {
		return false
	}
	alive := d.alive
	if d.st.heartbeats == nil {
		alive = func(int64) bool { return true }
	}
	var g tokens.GrantNResult
	if d.list, g = d.list.GrantN(t.id, t.cost, alive); !g.Granted {
		return false
	}
	d.keys.remove(t)
	for _, id := range g.Reclaimed {
		d.reclaim(id)
	}
	d.plan.fence = max(d.plan.fence, d.st.epoch.base) + 1
	d.addTerm(term{exec: t.id, session: t.session, grantedUS: pendingUS, threshold: t.threshold})
	d.plan.handoffs = append(d.plan.handoffs, handoffGrant{exec: t.id, fence: d.plan.fence, token: g.TokenIDs[0],
		window: t.window, threshold: t.threshold, key: t.key, cost: t.cost})
	d.keys.granted(t.id, t.key, t.cost, d.st.nowUS, d.grantRates(nil))
	return true
}

// setOffered records when t was offered the slots (0: its offer is withdrawn), in the ticket
// written back.
func (k *keyed) setOffered(d *decider, t *keyTicket, us int64) {
	t.offeredUS = us
	switch {
	case t.inRow:
		if i := d.queue.position(t.id); i >= 0 {
			d.queue.tickets[i].offeredUS = us
		}
	case !slices.Contains(k.inserted, t) && !slices.Contains(k.updated, t):
		k.updated = append(k.updated, t)
	}
}

// keyTicket is the keyed decision's waiter with ticket id, if any.
func (d *decider) keyTicket(id int64) *keyTicket {
	if d.keys == nil || id == 0 {
		return nil
	}
	return d.keys.find(id)
}

// keyPlan is what a keyed decision writes beside the task row's usual columns.
type keyPlan struct {
	holders       string // key_holders
	vtime         int64
	waiting       int     // key_waiting
	declaredLimit *int    // nil: keep the stored one
	declared      *string // nil: keep the stored one
	insert        []*keyTicket
	update        []*keyTicket
	delete        []int64
	// rounds are keys' round-robin state to write (a join has no grant time: the row joins at the
	// later of its pass and the virtual time).
	rounds map[string]keyRound
	deltas map[string]int // waiters added minus removed, per key
	drops  []string       // keys left with no holder (their rows go once they have no waiter)
	rates  *ratePlan      // a rated task's writes (rates_io.go); nil: none
}

// nothingToWrite reports a keyed plan that changes nothing.
func (p *keyPlan) nothingToWrite(st txState) bool {
	k := st.keys
	return p.holders == k.holders && p.vtime == k.vtime && p.waiting == k.waiting && p.declaredLimit == nil && p.declared == nil &&
		len(p.insert)+len(p.update)+len(p.delete)+len(p.rounds)+len(p.drops) == 0 && p.rates == nil
}

// plan is what the keyed decision writes, once every request was served.
func (k *keyed) plan(d *decider) *keyPlan {
	p := &keyPlan{vtime: k.vtime, waiting: k.row.waiting + len(k.inserted) - len(k.deleted), rounds: map[string]keyRound{},
		deltas: map[string]int{}, insert: k.inserted, update: k.updated}
	holds := map[int64]keyHold{}
	held := map[string]bool{}
	for _, id := range d.holders() {
		h := k.holdOf(id)
		holds[id] = h
		held[h.key] = true
	}
	p.holders = formatKeyHolders(holds)
	for _, t := range k.deleted {
		p.delete = append(p.delete, t.id)
		p.deltas[t.key]--
	}
	for _, t := range k.inserted {
		p.deltas[t.key]++
		if r, ok := k.reads.roundRow(t.key); !ok || r.waiting == 0 {
			if !k.regranted[t.key] {
				p.rounds[t.key] = keyRound{pass: k.vtime} // joins at the virtual time
			}
		}
	}
	for key := range k.regranted {
		p.rounds[key] = k.rounds[key]
	}
	for key, n := range p.deltas {
		if n == 0 {
			delete(p.deltas, key)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(k.touched)) {
		if !held[key] {
			p.drops = append(p.drops, key)
		}
	}
	if k.rated {
		p.rates = k.ratePlan(d, held)
	}
	if decl := k.lastDeclared; decl != nil {
		if old := k.row.declaredLimit; old == nil || *old != decl.KeyLimit {
			p.declaredLimit = &decl.KeyLimit
		}
		if s := FormatKeyLimits(decl.KeyLimits); s != k.row.declared {
			p.declared = &s
		}
	}
	return p
}

// roundRow is key's row as read, if it was.
func (r *keyReads) roundRow(key string) (keyRoundRow, bool) {
	if r == nil {
		return keyRoundRow{}, false
	}
	row, ok := r.rounds[key]
	return row, ok
}

// grantRates is the rates a grant moves (declared by its request, or the stored declaration when
// nil); nil when the task is not rated.
func (d *decider) grantRates(declared *Settings) *fairRates {
	if d.keys == nil || !d.keys.rated {
		return nil
	}
	return d.ratesFor(d.keys.rateDeclared(declared))
}

// ratePlan is what a rated decision writes of its rates (nil: nothing changed): the task's tat and
// declaration, the tats its grants moved, and the rows of keys whose rate is long spent
// (longSpent) and that have no holder or waiter.
func (k *keyed) ratePlan(d *decider, held map[string]bool) *ratePlan {
	stored := d.st.rates
	p := &ratePlan{tat: stored.tat, tatRate: stored.tatRate, tatDelta: k.tatDelta, nowUS: d.st.nowUS, keyTATs: map[string]int64{},
		keyDeltas: map[string]int64{}, keyTATRates: map[string]string{},
		declaredRate: stored.declaredRate, declaredKeyRate: stored.declaredKeyRate, declaredKeyRates: stored.declaredKeyRates}
	if k.tatDelta > 0 || k.baseTAT != stored.tat && stored.tatRate != k.tatRateNow {
		// Granted, or rescaled to a changed rate: the rescale is kept, so that the units owed
		// are counted once at the new interval, not afresh from each later decision's clock.
		p.tat, p.tatRate = k.baseTAT, k.tatRateNow
	}
	for key, tat := range k.baseKeyTATs {
		if tat != stored.keyTATs[key] && stored.keyTATRates[key] != k.keyRateNow(key) {
			k.rateKeys[key] = true // rescaled: written with what the grants add (maybe nothing)
		}
	}
	if decl := k.lastDeclared; decl != nil {
		p.declaredRate, p.declaredKeyRate, p.declaredKeyRates = encodeRate(decl.Rate), encodeRate(decl.KeyRate), FormatKeyRates(decl.KeyRates)
	}
	for key := range k.rateKeys {
		p.keyTATs[key], p.keyDeltas[key], p.keyTATRates[key] = k.baseKeyTATs[key], k.keyDeltas[key], k.keyRateNow(key)
	}
	waiting := map[string]bool{}
	for _, t := range k.waiting {
		waiting[t.key] = true
	}
	if k.reads != nil {
		for key, r := range k.reads.rounds {
			waiting[key] = waiting[key] || r.waiting > 0
		}
	}
	for _, key := range slices.Sorted(maps.Keys(stored.keyTATs)) {
		if longSpent(stored.keyTATs[key], d.st.nowUS, stored.keyTATRates[key]) && !k.rateKeys[key] && !held[key] && !waiting[key] {
			p.drops = append(p.drops, key)
		}
	}
	if stored.present && p.tat == stored.tat && p.tatDelta == 0 && len(p.keyDeltas)+len(p.drops) == 0 && p.declaredRate == stored.declaredRate &&
		p.declaredKeyRate == stored.declaredKeyRate && p.declaredKeyRates == stored.declaredKeyRates {
		return nil
	}
	return p
}

// clockStepBack is how far behind the latest time it showed the database clock may step back (an
// NTP step, a restart on a skewed clock) without a key's rate letting a burst through early.
const clockStepBack = time.Minute

// longSpent reports whether a key's rate state (its tat, under the stored rate) may go. A missing
// state decides like a spent one only while the clock does not go back behind it: a tat that has
// just passed, dropped, then the clock a moment back, would admit a whole burst within one Per of
// the grants that moved it. So it is kept until it is spent by the rate's Per and clockStepBack.
func longSpent(tatUS, nowUS int64, rate string) bool {
	if tatUS > nowUS-clockStepBack.Microseconds() {
		return false // most keys with state, at every rated decision: no decode
	}
	var per time.Duration
	if r, err := decodeRate(rate); err == nil {
		per = r.Per
	}
	return tatUS <= nowUS-(per+clockStepBack).Microseconds()
}
