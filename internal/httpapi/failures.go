package httpapi

import (
	"container/list"
	"sync"
	"time"
)

// Refused credentials (a wrong token on the sign-in form or as a bearer token) are counted in
// this process's memory, per client address (an IPv6 address by its /64) and server-wide. Only
// refusals are counted and throttled: a right credential is checked first and always passes, so
// that one client sending wrong tokens cannot lock out everyone behind the same proxy or NAT.
// A wrong credential is answered 429 instead of 401 while its address is locked out —
// maxFailures refusals within failureWindow lock it for lockout, renewed while it keeps failing —
// or while the whole server has refused failureBudget within failureWindow, so that spreading
// guesses over many addresses, or flooding the table to evict a locked address, gains nothing.
// Each replica counts its own.
const (
	maxFailures   = 10
	failureWindow = time.Minute
	lockout       = 60 * time.Second
	// maxTracked bounds the memory: past it, the address that failed least recently is
	// forgotten. Evicting one still locked out takes maxTracked refusals within its lockout,
	// far past failureBudget.
	maxTracked    = 10000
	failureBudget = 1000
)

// failures counts refused credentials per address and server-wide.
type failures struct {
	mu    sync.Mutex
	addrs map[string]*list.Element // of *failed
	lru   list.List                // of *failed, the most recently failed first
	// perSecond counts the server's refusals by second of the window (a ring indexed by the Unix
	// second); total is their sum, last the latest second counted.
	perSecond [int(failureWindow / time.Second)]int
	total     int
	last      int64
}

type failed struct {
	key   string
	times []time.Time // the last maxFailures refusals, oldest first
	until time.Time   // locked out until then
}

// verdict is what a refused credential leads to.
type verdict struct {
	recent    int  // the address's refusals within the window, this one included
	throttled bool // answer 429: the address was locked out, or the budget spent, before this one
	lockedNow bool // this refusal locked the address out
	spentNow  bool // this refusal spent the server-wide budget
}

// fail counts a refused credential of the address counted as key, at now.
func (f *failures) fail(key string, now time.Time) verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	var v verdict
	spent := f.server(now)
	v.throttled = spent >= failureBudget
	v.spentNow = spent+1 == failureBudget

	if f.addrs == nil {
		f.addrs = map[string]*list.Element{}
	}
	var a *failed
	if e := f.addrs[key]; e != nil {
		a = e.Value.(*failed)
		f.lru.MoveToFront(e)
	} else {
		if f.lru.Len() >= maxTracked {
			oldest := f.lru.Back()
			delete(f.addrs, oldest.Value.(*failed).key)
			f.lru.Remove(oldest)
		}
		a = &failed{key: key}
		f.addrs[key] = f.lru.PushFront(a)
	}
	wasLocked := now.Before(a.until)
	v.throttled = v.throttled || wasLocked
	a.times = append(recent(a.times, now), now)
	if n := len(a.times); n > maxFailures {
		a.times = append(a.times[:0], a.times[n-maxFailures:]...)
	}
	v.recent = len(a.times)
	if v.recent >= maxFailures {
		a.until = now.Add(lockout)
		v.lockedNow = !wasLocked
	}
	return v
}

// server counts a refusal at now server-wide and returns how many came before it within the
// window.
func (f *failures) server(now time.Time) int {
	n := int64(len(f.perSecond))
	if sec := now.Unix(); sec > f.last {
		// The seconds since the last count begin afresh; the window's older ones are in the ring.
		for s := max(f.last+1, sec-n+1); s <= sec; s++ {
			f.total -= f.perSecond[s%n]
			f.perSecond[s%n] = 0
		}
		f.last = sec
	}
	// A clock that stepped back counts in the latest second.
	before := f.total
	f.perSecond[f.last%n]++
	f.total++
	return before
}

// recent drops the times older than the window.
func recent(times []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(times) && now.Sub(times[i]) >= failureWindow {
		i++
	}
	return times[i:]
}
