package execution

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"pgregory.net/rapid"

	"github.com/taskling-go/taskling/tokens"
)

// keyWorld is a keyed task as the database would hold it between decisions: its row, its stored
// tickets and keys' rows, and its sessions' heartbeats. Decisions are applied to it as round trip
// 2 would write them.
type keyWorld struct {
	st      txState
	tickets map[int64]*keyTicket
	rounds  map[string]keyRoundRow
	dead    map[int64]bool // sessions that stopped heartbeating
	holders map[int64]worldHolder
	waiters map[int64]worldWaiter // by ticket
	nextID  int64
	limit   int // declared task limit; overridden by st.overrides
	keyDecl Settings
	// rated: the task is under keyDecl's rates, whose state is rates (rates_property_test.go);
	// grants are every grant made, at the decision's time.
	rated  bool
	rates  rateRow
	grants []worldGrant
}

type worldHolder struct {
	key     string
	cost    int
	token   uuid.UUID
	session int64
}

type worldWaiter struct {
	key      string
	cost     int
	session  int64
	priority int
}

const worldThreshold = 10 * time.Second

func newKeyWorld() *keyWorld {
	return &keyWorld{st: txState{protocol: ProtocolVersion, nowUS: nowUS, heartbeats: map[int64]int64{1: nowUS, 2: nowUS, 3: nowUS},
		keys: &keyRow{}, handoffs: map[int64]handoff{}}, tickets: map[int64]*keyTicket{}, rounds: map[string]keyRoundRow{},
		dead: map[int64]bool{}, holders: map[int64]worldHolder{}, waiters: map[int64]worldWaiter{}, nextID: 1, limit: 4,
		keyDecl: Settings{KeyLimit: 2}}
}

func (w *keyWorld) declared() Settings {
	s := settings(w.limit)
	s.KeyLimit, s.KeyLimits = w.keyDecl.KeyLimit, w.keyDecl.KeyLimits
	s.Rate, s.KeyRate = w.keyDecl.Rate, w.keyDecl.KeyRate
	return s
}

// reads are the complete keyed reads: every stored ticket and key row.
func (w *keyWorld) reads() *keyReads {
	r := &keyReads{rounds: maps.Clone(w.rounds), heartbeats: map[int64]int64{}, candidateLimit: 1 << 20, perKey: 1 << 20, oldest: 1 << 20, final: true}
	for _, k := range slices.Sorted(maps.Keys(w.rounds)) {
		if w.rounds[k].waiting > 0 {
			r.candidates = append(r.candidates, k)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(w.tickets)) {
		t := *w.tickets[id]
		r.tickets = append(r.tickets, &t)
		r.heartbeats[id] = w.st.heartbeats[t.session]
	}
	return r
}

func (w *keyWorld) acquisition(key string, cost int, session int64) *acquisition {
	return &acquisition{AcquireRequest: AcquireRequest{Requester: Requester{TaskName: "app/task", Host: "h", SessionID: session,
		Declared: w.declared()}, Key: key, Cost: cost}}
}

// start decides a start of key and cost by session without a queue (a refusal is recorded).
func (w *keyWorld) start(t *rapid.T, key string, cost int, session int64) txPlan {
	a := w.acquisition(key, cost, session)
	a.RecordDenial = true
	return w.decide(t, []request{{acquire: a}})
}

// wait decides an attempt of key and cost by session that waits as q says.
func (w *keyWorld) wait(t *rapid.T, key string, cost int, session int64, q Queue) txPlan {
	a := w.acquisition(key, cost, session)
	a.Queue = &q
	return w.decide(t, []request{{acquire: a}})
}

// complete decides the release of holder id.
func (w *keyWorld) complete(t *rapid.T, id int64) txPlan {
	return w.decide(t, []request{{release: &ReleaseRequest{TaskName: "app/task", ExecutionID: id, TokenID: w.holders[id].token}}})
}

// decide runs one decision of reqs on the world, applies it and checks the invariants.
func (w *keyWorld) decide(t *rapid.T, reqs []request) txPlan {
	st := w.st
	st.keyReads = w.reads()
	if w.rated {
		r := w.rates
		r.keyTATs, r.keyTATRates = maps.Clone(w.rates.keyTATs), maps.Clone(w.rates.keyTATRates)
		st.rates = &r
	}
	for _, r := range reqs {
		if r.acquire != nil {
			st.reserved = append(st.reserved, w.nextID)
			w.nextID++
		}
	}
	plan, err := decide(st, reqs, uuid.New)
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	if w.rated {
		w.applyRates(t, reqs, plan)
	}
	w.apply(t, reqs, plan)
	w.check(t, reqs, plan)
	return plan
}

func (w *keyWorld) apply(t *rapid.T, reqs []request, plan txPlan) {
	w.st.tokens, w.st.queue, w.st.fence = plan.tokens, plan.queue, plan.fence
	w.st.holders = strings.ReplaceAll(plan.holders, grantMark, "A:"+strconv.FormatInt(w.st.nowUS, 10))
	if p := plan.keys; p != nil {
		k := w.st.keys
		k.holders, k.vtime, k.waiting = p.holders, p.vtime, p.waiting
		if p.declaredLimit != nil {
			k.declaredLimit = p.declaredLimit
		}
		if p.declared != nil {
			k.declared = *p.declared
		}
		w.applyTickets(p)
	}
	for i, r := range reqs {
		out := plan.results[i]
		for _, id := range out.reclaim {
			delete(w.holders, id)
		}
		switch a := r.acquire; {
		case r.release != nil:
			delete(w.holders, r.release.ExecutionID)
		case a.kind == opLeave:
			delete(w.waiters, a.ticket())
		case out.acquire.Denied == NotDenied:
			w.holders[out.acquire.ExecutionID] = worldHolder{key: a.Key, cost: a.cost(), token: out.acquire.TokenID, session: a.SessionID}
			delete(w.waiters, a.ticket())
		case out.acquire.Unfit != nil:
			delete(w.waiters, a.ticket())
		case out.acquire.Ticket != 0 && out.acquire.Ticket != a.ticket():
			delete(w.waiters, a.ticket())
			w.waiters[out.acquire.Ticket] = worldWaiter{key: a.Key, cost: a.cost(), session: a.SessionID, priority: a.Queue.Priority}
		}
	}
	for _, tm := range plan.reclaims {
		delete(w.holders, tm.exec)
	}
	for _, h := range plan.handoffs { // the waiter takes its grant at once
		wt := w.waiters[h.exec]
		w.holders[h.exec] = worldHolder{key: h.key, cost: max(h.cost, 1), token: h.token, session: wt.session} // an unkeyed grant's cost is 1
		delete(w.waiters, h.exec)
	}
	terms, err := parseTerms(w.st.holders)
	if err != nil {
		t.Fatalf("holders: %v", err)
	}
	for id, h := range w.holders {
		if slices.ContainsFunc(terms, func(tm term) bool { return tm.exec == id }) {
			continue
		}
		if s := h.session; !w.dead[s] || time.Duration(w.st.nowUS-w.st.heartbeats[s])*time.Microsecond <= worldThreshold {
			t.Fatalf("live holder %d has no terms: %q", id, w.st.holders)
		}
		delete(w.holders, id) // dead, its slot gone with a list made anew
	}
}

func (w *keyWorld) applyTickets(p *keyPlan) {
	for _, id := range p.delete {
		delete(w.tickets, id)
	}
	for _, tk := range p.insert {
		c := *tk
		w.tickets[tk.id] = &c
	}
	for _, tk := range p.update {
		if s, ok := w.tickets[tk.id]; ok {
			s.queuedUS, s.offeredUS = tk.queuedUS, tk.offeredUS
		}
	}
	for key, r := range p.rounds {
		old := w.rounds[key]
		if r.grantedUS == 0 {
			old.pass = max(old.pass, r.pass)
		} else {
			old.keyRound = r
		}
		w.rounds[key] = old
	}
	for key, n := range p.deltas {
		r, ok := w.rounds[key]
		if !ok {
			continue // as the UPDATE: no row, nothing counted
		}
		r.waiting += n
		r.top = 0
		first := true
		for _, tk := range w.tickets {
			if tk.key == key && (first || tk.priority > r.top) {
				r.top, first = tk.priority, false
			}
		}
		w.rounds[key] = r
	}
	for _, key := range p.drops {
		if w.rounds[key].waiting == 0 {
			delete(w.rounds, key)
		}
	}
}

// check verifies the invariants after a decision: a grant never takes the task, or a key, over
// its limit in force; every holder holds its cost in tokens; the waiting tickets counted agree
// with those stored; and no capacity is left that a waiting ticket could take now without it
// being offered to it (work-conserving).
func (w *keyWorld) check(t *rapid.T, reqs []request, plan txPlan) {
	list, err := tokens.Parse(w.st.tokens)
	if err != nil {
		t.Fatalf("tokens: %v", err)
	}
	grantedKeys := map[string]bool{}
	for i, o := range plan.results {
		if a := reqs[i].acquire; a != nil && o.acquire.Denied == NotDenied && o.acquire.ExecutionID != 0 {
			grantedKeys[a.Key] = true
		}
	}
	granted := len(grantedKeys) > 0
	limit := w.st.overrides.Apply(w.declared()).ConcurrencyLimit
	total, byKey := 0, map[string]int{}
	costs := list.Costs()
	for id, h := range w.holders {
		total += h.cost
		byKey[h.key] += h.cost
		if !list.IsUnlimited() && costs[id] != h.cost {
			t.Fatalf("holder %d of cost %d holds %d tokens: %v", id, h.cost, costs[id], list.Tokens)
		}
	}
	if granted && limit != -1 && total > limit {
		t.Fatalf("a grant took the task to %d with limit %d", total, limit)
	}
	for key, n := range byKey {
		if l, _ := KeyLimitOf(key, w.declared(), w.overridesParsed()); grantedKeys[key] && l > 0 && n > l {
			t.Fatalf("a grant took key %q to %d with limit %d", key, n, l)
		}
	}
	if w.st.keys.waiting != len(w.tickets) {
		t.Fatalf("key_waiting %d, %d tickets stored", w.st.keys.waiting, len(w.tickets))
	}
	if !slices.ContainsFunc(reqs, func(r request) bool { return r.acquire != nil }) {
		return // releases alone judge no liveness: nothing more is known
	}
	w.checkWorkConserving(t, list)
}

func (w *keyWorld) overridesParsed() Overrides {
	o := w.st.overrides
	o.KeyLimits, _ = ParseKeyLimits(w.st.keys.overrides)
	return o
}

// checkWorkConserving: with every holder alive (the decision reaped the dead), the plan of the
// stored live tickets on the capacity left grants only tickets already offered (or handed the
// slot: they hold it now).
func (w *keyWorld) checkWorkConserving(t *rapid.T, list tokens.List) {
	// The limits as the row stores them: the last acquire's declaration (a decision without one,
	// a departure say, uses it).
	var decl Settings
	if l := w.st.keys.declaredLimit; l != nil {
		decl.KeyLimit = *l
	}
	decl.KeyLimits, _ = ParseKeyLimits(w.st.keys.declared)
	o := w.overridesParsed()
	used := map[string]int{}
	inUse := 0
	for _, h := range w.holders {
		used[h.key] += h.cost
		inUse += h.cost
	}
	free := unlimitedFree
	if !list.IsUnlimited() {
		free = max(0, list.Limit()-inUse)
		if slices.ContainsFunc(list.Tokens, func(tk tokens.Token) bool { return tk.Status == tokens.Retiring }) {
			free = 0
		}
	}
	f := &fair{free: free, used: used, round: map[string]keyRound{}, vtime: w.st.keys.vtime, nowUS: w.st.nowUS,
		limit: func(k string) int { l, _ := KeyLimitOf(k, decl, o); return l }}
	if w.rated {
		f.rates = &fairRates{task: w.keyDecl.Rate, tat: w.rates.tat, keyTATs: maps.Clone(w.rates.keyTATs), nowUS: w.st.nowUS,
			keyRate: func(string) Rate { return w.keyDecl.KeyRate }}
	}
	for k, r := range w.rounds {
		f.round[k] = r.keyRound
	}
	var waiting []*keyTicket
	for _, id := range slices.Sorted(maps.Keys(w.tickets)) {
		tk := w.tickets[id]
		if (ticket{queuedUS: tk.queuedUS, threshold: tk.threshold}).alive(w.st.nowUS, w.st.heartbeats[tk.session]) {
			waiting = append(waiting, tk)
		}
	}
	plan, _ := f.plan(waiting)
	for _, tk := range plan {
		if tk.offeredUS == 0 {
			t.Fatalf("ticket %d (key %q, cost %d) fits the capacity left (free %d, key room %d) and was not offered",
				tk.id, tk.key, tk.cost, free, f.room(tk.key))
		}
	}
}

var worldKeys = []string{"", "a", "b", "c"}

// TestKeyedDecisionsKeepEveryLimitAndLeaveNoFittingTicketWaiting runs random starts, waits,
// retries, departures, completions, limit changes, session deaths and clock jumps through the
// keyed decision, applying each plan as the database would.
func TestKeyedDecisionsKeepEveryLimitAndLeaveNoFittingTicketWaiting(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := newKeyWorld()
		t.Repeat(map[string]func(*rapid.T){
			"start": func(t *rapid.T) {
				w.start(t, rapid.SampledFrom(worldKeys).Draw(t, "key"), rapid.IntRange(1, 3).Draw(t, "cost"), rapid.Int64Range(1, 3).Draw(t, "session"))
			},
			"wait": func(t *rapid.T) {
				w.wait(t, rapid.SampledFrom(worldKeys).Draw(t, "key"), rapid.IntRange(1, 3).Draw(t, "cost"), rapid.Int64Range(1, 3).Draw(t, "session"),
					Queue{Priority: rapid.IntRange(0, 1).Draw(t, "priority"), OfferWindow: 3 * time.Second, Direct: rapid.Bool().Draw(t, "direct")})
			},
			"retry": func(t *rapid.T) {
				if len(w.waiters) == 0 {
					t.Skip("no waiter")
				}
				id := rapid.SampledFrom(slices.Sorted(maps.Keys(w.waiters))).Draw(t, "ticket")
				wt := w.waiters[id]
				w.wait(t, wt.key, wt.cost, wt.session, Queue{Ticket: id, Priority: wt.priority, OfferWindow: 3 * time.Second})
			},
			"leave": func(t *rapid.T) {
				if len(w.waiters) == 0 {
					t.Skip("no waiter")
				}
				id := rapid.SampledFrom(slices.Sorted(maps.Keys(w.waiters))).Draw(t, "ticket")
				a := w.acquisition(w.waiters[id].key, 1, w.waiters[id].session)
				a.kind, a.Queue = opLeave, &Queue{Ticket: id}
				w.decide(t, []request{{acquire: a}})
			},
			"complete": func(t *rapid.T) {
				if len(w.holders) == 0 {
					t.Skip("no holder")
				}
				w.complete(t, rapid.SampledFrom(slices.Sorted(maps.Keys(w.holders))).Draw(t, "holder"))
			},
			"limits": func(t *rapid.T) {
				l := rapid.SampledFrom([]int{-1, 1, 2, 3, 4, 6}).Draw(t, "limit")
				w.st.overrides.ConcurrencyLimit = &l
				w.keyDecl.KeyLimit = rapid.IntRange(0, 3).Draw(t, "key limit")
				if rapid.Bool().Draw(t, "override a key") {
					w.st.keys.overrides = FormatKeyLimits(map[string]int{rapid.SampledFrom(worldKeys).Draw(t, "named"): rapid.IntRange(1, 4).Draw(t, "its limit")})
				}
			},
			"clock": func(t *rapid.T) {
				w.st.nowUS += rapid.Int64Range(-5e6, 15e6).Draw(t, "jump µs")
				for s := int64(1); s <= 3; s++ {
					if !w.dead[s] {
						w.st.heartbeats[s] = w.st.nowUS
					}
				}
			},
			"die": func(t *rapid.T) {
				w.dead[rapid.Int64Range(1, 3).Draw(t, "session")] = true
			},
		})
	})
}

// TestAWaiterRefusedAfterItsOfferKeepsItsPlace: an offer can be withdrawn before its waiter comes
// (here a waiter of higher priority takes the slots first). The waiter that then comes and is
// refused has answered: its ticket is not dropped as late when the offer's window passes, so it
// keeps its place in line.
func TestAWaiterRefusedAfterItsOfferKeepsItsPlace(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := newKeyWorld()
		w.keyDecl = Settings{}
		w.start(t, "a", 3, 1)
		w.wait(t, "b", 2, 2, Queue{OfferWindow: 3 * time.Second})
		for id := range w.holders {
			w.complete(t, id)
		}
		var ticket int64
		for id, tk := range w.tickets {
			if tk.offeredUS == 0 {
				t.Fatalf("b's ticket %d was not offered the freed slots", id)
			}
			ticket = id
		}
		w.wait(t, "c", 3, 2, Queue{Priority: 1, OfferWindow: 3 * time.Second}) // takes the slots before b's waiter comes
		w.wait(t, "b", 2, 2, Queue{Ticket: ticket, OfferWindow: 3 * time.Second})
		if w.tickets[ticket] == nil {
			t.Fatalf("b's ticket went at its refused retry")
		}
		w.st.nowUS += 5e6 // past the offer's window
		for s := int64(1); s <= 3; s++ {
			w.st.heartbeats[s] = w.st.nowUS
		}
		w.start(t, "", 1, 3)
		if w.tickets[ticket] == nil {
			t.Fatalf("b's ticket was dropped as late, though its waiter came when offered")
		}
	})
}
