package httpapi

import (
	"sync"
	"time"
)

// Refused sign-ins (a wrong token on the form or as a bearer token) are counted per client
// address, in this process's memory: maxFailures within failureWindow lock the address out of
// signing in for lockout, whatever token it sends (429). Each replica counts its own.
const (
	maxFailures   = 10
	failureWindow = time.Minute
	lockout       = 60 * time.Second
	// maxTracked bounds the memory: past it, addresses with no recent failure are forgotten,
	// and a new one is not counted while none can be.
	maxTracked = 10000
)

// failures counts refused sign-ins per address.
type failures struct {
	mu    sync.Mutex
	addrs map[string]*failed
}

type failed struct {
	times []time.Time // within the window, oldest first
	until time.Time   // locked out until then
}

// locked reports whether addr is locked out at now.
func (f *failures) locked(addr string, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.addrs[addr]
	return a != nil && now.Before(a.until)
}

// fail counts a refused sign-in of addr at now: it returns the failures within the window and
// whether this one locked the address out.
func (f *failures) fail(addr string, now time.Time) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.addrs == nil {
		f.addrs = map[string]*failed{}
	}
	a := f.addrs[addr]
	if a == nil {
		if len(f.addrs) >= maxTracked {
			f.sweep(now)
		}
		if len(f.addrs) >= maxTracked {
			return 1, false
		}
		a = &failed{}
		f.addrs[addr] = a
	}
	a.times = append(recent(a.times, now), now)
	if len(a.times) < maxFailures {
		return len(a.times), false
	}
	n := len(a.times)
	a.times, a.until = nil, now.Add(lockout)
	return n, true
}

// sweep forgets the addresses neither locked out nor with a failure within the window.
func (f *failures) sweep(now time.Time) {
	for addr, a := range f.addrs {
		if a.times = recent(a.times, now); len(a.times) == 0 && !now.Before(a.until) {
			delete(f.addrs, addr)
		}
	}
}

// recent drops the times older than the window.
func recent(times []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(times) && now.Sub(times[i]) >= failureWindow {
		i++
	}
	return times[i:]
}
