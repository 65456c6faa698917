package execution

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// The order in which a keyed task's waiters are granted (grant protocol 6), as a pure function
// of its free capacity, its keys' costs in use and limits, their round-robin state and the
// tickets: docs/keys.md states the rules, docs/how-it-works.md where their state lives.

// keyTicket is a waiter of a keyed task: a row of taskling.key_ticket, or a ticket queued in the
// task row before the task had keys (key "", cost 1).
type keyTicket struct {
	id        int64 // the id of the first attempt that queued it
	session   int64
	key       string
	cost      int
	priority  int64
	queuedUS  int64
	offeredUS int64 // 0: not offered
	threshold time.Duration
	window    time.Duration
	// inRow: queued in the task row's queue column (direct as its flag says); else in
	// taskling.key_ticket.
	inRow, direct bool
}

// starving reports a ticket that has waited longer than its death threshold at nowUS.
func (t *keyTicket) starving(nowUS int64) bool {
	return time.Duration(nowUS-t.queuedUS)*time.Microsecond > t.threshold
}

// keyRound is a key's round-robin state (a row of taskling.task_key): its pass is the cost granted
// to it in the task's virtual time, grantedUS when it was last granted (0: never).
type keyRound struct {
	pass      int64
	grantedUS int64
}

// unlimitedFree stands for the free capacity of an unlimited task.
const unlimitedFree = math.MaxInt32

// fair is a keyed task's capacity and round-robin state as a decision moves it.
type fair struct {
	free  int            // task capacity free now (unlimitedFree: unlimited)
	used  map[string]int // cost in use by live holders, per key
	limit func(key string) int
	round map[string]keyRound
	vtime int64 // the task's virtual time: a key that starts waiting joins at it
	nowUS int64
	seq   int64 // grants in this decision, to order their times
	// granted are the keys whose round this decision changed.
	granted map[string]bool
	// rates are the task's and its keys' rates (nil: none).
	rates *fairRates
}

// fairRates are a rated task's rates as a decision moves them (rates.go): the task's rate and tat,
// each key's rate and the tats of the keys read.
type fairRates struct {
	task    Rate
	tat     int64
	keyRate func(key string) Rate
	keyTATs map[string]int64
	nowUS   int64
	// sinceUS is when the timeline was first seen (0: no hold): a rate grants nothing for one Per
	// after it.
	sinceUS int64
}

// holdUntil is the end of a new timeline's hold of r (0: none).
func (r *fairRates) holdUntil(rate Rate) int64 {
	if r.sinceUS == 0 {
		return 0
	}
	return r.sinceUS + rate.Per.Microseconds()
}

// taskRoom is the units the task's rate has room for now.
func (r *fairRates) taskRoom() int {
	if r == nil || r.task.IsZero() {
		return unlimitedFree
	}
	return int(min(rateRoom(r.task, r.tat, r.nowUS, r.holdUntil(r.task)), unlimitedFree))
}

// keyRoom is the units key's rate has room for now.
func (r *fairRates) keyRoom(key string) int {
	if r == nil {
		return unlimitedFree
	}
	rate := r.keyRate(key)
	if rate.IsZero() {
		return unlimitedFree
	}
	return int(min(rateRoom(rate, r.keyTATs[key], r.nowUS, r.holdUntil(rate)), unlimitedFree))
}

// take records a grant of cost under key in the rates.
func (r *fairRates) take(key string, cost int) {
	if r == nil {
		return
	}
	if !r.task.IsZero() {
		r.tat = rateTake(r.task, r.tat, r.nowUS, cost)
	}
	if rate := r.keyRate(key); !rate.IsZero() {
		r.keyTATs[key] = rateTake(rate, r.keyTATs[key], r.nowUS, cost)
	}
}

// refusal says which rate has no room for cost under key now, the rate, and how long until it
// has (NotDenied: both have room).
func (r *fairRates) refusal(key string, cost int) (DenyReason, Rate, time.Duration) {
	if r == nil {
		return NotDenied, Rate{}, 0
	}
	if cost > r.taskRoom() {
		return DeniedRate, r.task, rateWait(r.task, r.tat, r.nowUS, r.holdUntil(r.task), cost)
	}
	if cost > r.keyRoom(key) {
		rate := r.keyRate(key)
		return DeniedKeyRate, rate, rateWait(rate, r.keyTATs[key], r.nowUS, r.holdUntil(rate), cost)
	}
	return NotDenied, Rate{}, 0
}

func (r *fairRates) clone() *fairRates {
	if r == nil {
		return nil
	}
	c := *r
	c.keyTATs = make(map[string]int64, len(r.keyTATs))
	for k, v := range r.keyTATs {
		c.keyTATs[k] = v
	}
	return &c
}

// room is what key may still take (unlimitedFree when it has no limit).
func (f *fair) room(key string) int {
	l := f.limit(key)
	if l <= 0 {
		return unlimitedFree
	}
	return l - f.used[key]
}

// roomOf is what key may take now: the room its limit leaves and its rate's.
func (f *fair) roomOf(key string) int { return min(f.room(key), f.rates.keyRoom(key)) }

// capacity is the task's free capacity now: its free slots and its rate's room.
func (f *fair) capacity() int { return min(f.free, f.rates.taskRoom()) }

func (f *fair) fits(t *keyTicket) bool { return t.cost <= f.capacity() && t.cost <= f.roomOf(t.key) }

// roundOf is key's state; a key with no row joins at the virtual time.
func (f *fair) roundOf(key string) keyRound {
	if r, ok := f.round[key]; ok {
		return r
	}
	return keyRound{pass: f.vtime}
}

// take records the grant of t: its cost leaves the free capacity and its key's room, and its
// key's pass moves on by the cost from the later of its pass and the virtual time.
func (f *fair) take(t *keyTicket) {
	if f.free != unlimitedFree {
		f.free -= t.cost
	}
	f.used[t.key] += t.cost
	f.rates.take(t.key, t.cost)
	r := f.roundOf(t.key)
	start := max(r.pass, f.vtime)
	f.seq++
	f.round[t.key] = keyRound{pass: start + int64(t.cost), grantedUS: f.nowUS + f.seq}
	f.vtime = max(f.vtime, start)
	if f.granted == nil {
		f.granted = map[string]bool{}
	}
	f.granted[t.key] = true
}

// before reports whether a goes before b: higher priority first, then the key with the lower
// pass (the one served least, in cost), then the key granted least recently, then the key
// waiting longest; within a key, first in, first out.
func (f *fair) before(a, b *keyTicket, firstQueued map[string]int64) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	if a.key != b.key {
		ra, rb := f.roundOf(a.key), f.roundOf(b.key)
		if c := cmp.Or(cmp.Compare(ra.pass, rb.pass), cmp.Compare(ra.grantedUS, rb.grantedUS),
			cmp.Compare(firstQueued[a.key], firstQueued[b.key])); c != 0 {
			return c < 0
		}
		return a.key < b.key
	}
	return a.queuedUS < b.queuedUS || a.queuedUS == b.queuedUS && a.id < b.id
}

// reservations finds the starving tickets among waiting: those that waited longer than their
// death threshold while a ticket of smaller cost waits. Per key, the oldest of them either fits its
// key's room — then the oldest such over every key is reserving: granted first once it fits the
// free capacity, which nothing else takes meanwhile — or does not, and then its key is blocked:
// no other ticket of the key takes its room.
func (f *fair) reservations(waiting []*keyTicket) (reserving *keyTicket, blocked map[string]*keyTicket) {
	smallest := math.MaxInt
	for _, t := range waiting {
		smallest = min(smallest, t.cost)
	}
	oldest := map[string]*keyTicket{}
	for _, t := range waiting {
		if t.cost <= smallest || !t.starving(f.nowUS) {
			continue
		}
		if o := oldest[t.key]; o == nil || t.queuedUS < o.queuedUS || t.queuedUS == o.queuedUS && t.id < o.id {
			oldest[t.key] = t
		}
	}
	for key, t := range oldest {
		if t.cost > f.roomOf(key) {
			if blocked == nil {
				blocked = map[string]*keyTicket{}
			}
			blocked[key] = t
			continue
		}
		if reserving == nil || t.queuedUS < reserving.queuedUS || t.queuedUS == reserving.queuedUS && t.id < reserving.id {
			reserving = t
		}
	}
	return reserving, blocked
}

// plan grants, in order, the waiting tickets that take capacity now, moving f as it goes; it
// stops when none fits (or a reserving ticket does not). held reports, at the end, whether a
// reserving ticket holds the free capacity left.
func (f *fair) plan(waiting []*keyTicket) (grants []*keyTicket, held bool) {
	left := slices.Clone(waiting)
	firstQueued := map[string]int64{}
	for _, t := range left {
		if q, ok := firstQueued[t.key]; !ok || t.queuedUS < q {
			firstQueued[t.key] = t.queuedUS
		}
	}
	for len(left) > 0 && f.capacity() > 0 {
		reserving, blocked := f.reservations(left)
		next := reserving
		if reserving != nil && !f.fits(reserving) {
			return grants, true
		}
		if next == nil {
			for _, t := range left {
				if b := blocked[t.key]; (b != nil && b != t) || !f.fits(t) {
					continue
				}
				if next == nil || f.before(t, next, firstQueued) {
					next = t
				}
			}
		}
		if next == nil {
			break
		}
		f.take(next)
		grants = append(grants, next)
		left = slices.DeleteFunc(left, func(t *keyTicket) bool { return t == next })
	}
	return grants, false
}

// clone copies f, so that a plan can be tried without moving f.
func (f *fair) clone() *fair {
	c := *f
	c.used = make(map[string]int, len(f.used))
	for k, v := range f.used {
		c.used[k] = v
	}
	c.round = make(map[string]keyRound, len(f.round))
	for k, v := range f.round {
		c.round[k] = v
	}
	c.granted = nil
	c.rates = f.rates.clone()
	return &c
}
