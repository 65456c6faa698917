package taskling

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/backoff"
)

// A client is one session in the database: its executions in KeepAlive mode live by the
// session's heartbeat, one transaction per interval for all of them (the shortest interval among
// them), which also reports each execution that no longer holds its slot. So the database's
// heartbeat load grows with processes, not with executions.
type heartbeater struct {
	c *Client

	register sync.Mutex // one registration at a time

	mu      sync.Mutex
	session int64                 // 0 until the first start registers it (or after it vanished)
	execs   map[int64]*Execution  // executions in KeepAlive mode, not completed
	waiters map[time.Duration]int // waiters for a slot, by heartbeat interval: their tickets live by the session
	running bool                  // the loop runs
	renewed time.Time             // when the last heartbeat that renewed session was sent
	wake    chan struct{}         // an execution joined: the loop rechecks its interval
	frozen  bool                  // tests: the process froze
}

func newHeartbeater(c *Client) *heartbeater {
	return &heartbeater{c: c, execs: map[int64]*Execution{}, waiters: map[time.Duration]int{}, wake: make(chan struct{}, 1)}
}

// sessionID returns the client's session, registering it on first use.
func (h *heartbeater) sessionID(ctx context.Context) (int64, error) {
	if id := h.current(); id != 0 {
		return id, nil
	}
	h.register.Lock()
	defer h.register.Unlock()
	if id := h.current(); id != 0 {
		return id, nil
	}
	id, err := h.c.store.RegisterSession(ctx, h.c.host)
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	h.session = id
	h.mu.Unlock()
	return id, nil
}

func (h *heartbeater) current() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.session
}

// add renews e's lease from now on.
func (h *heartbeater) add(e *Execution) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.execs[e.id] = e
	if h.frozen {
		e.freeze()
		return
	}
	h.startLocked()
}

// startLocked starts the loop, or makes it recheck its interval. Called with mu held.
func (h *heartbeater) startLocked() {
	if !h.running {
		h.running = true
		h.c.live.Add(1)
		go h.run()
		return
	}
	h.poke()
}

// addWaiter keeps the session alive, at interval or faster, while a waiter's ticket is queued.
func (h *heartbeater) addWaiter(interval time.Duration) {
	interval = waiterInterval(interval)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waiters[interval]++
	if !h.frozen {
		h.startLocked()
	}
}

// waiterInterval is the heartbeat interval a waiter needs: its settings', else the default.
func waiterInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return 5 * time.Second
	}
	return d
}

func (h *heartbeater) removeWaiter(interval time.Duration) {
	interval = waiterInterval(interval)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waiters[interval]--; h.waiters[interval] <= 0 {
		delete(h.waiters, interval)
	}
	if len(h.waiters) == 0 && len(h.execs) == 0 {
		h.poke() // the loop ends now rather than at its next heartbeat
	}
}

func (h *heartbeater) remove(e *Execution) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.execs, e.id)
	if len(h.execs) == 0 {
		h.poke() // the loop ends now rather than at its next heartbeat
	}
}

// poke makes the loop recheck its executions. Called with mu held.
func (h *heartbeater) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// idle closes the heartbeat connection once the loop has ended, if the client is closed: a
// client that is not keeps it for its next executions.
func (h *heartbeater) idle() {
	h.mu.Lock()
	running := h.running
	h.mu.Unlock()
	if !running && h.c.isClosed() {
		h.c.store.CloseHeartbeats(context.Background())
	}
}

// freeze stops every heartbeat of the client, as if its process froze (tests).
func (h *heartbeater) freeze() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.frozen = true
	for _, e := range h.execs {
		e.freeze()
	}
}

// due returns the executions to renew now and the interval of the next heartbeat (the shortest
// among them); ok is false when there are none left, and the loop then ends.
func (h *heartbeater) due() (session int64, execs []*Execution, interval time.Duration, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if (len(h.execs) == 0 && len(h.waiters) == 0) || h.frozen {
		h.running = false
		return 0, nil, 0, false
	}
	for w := range h.waiters {
		if interval == 0 || w < interval {
			interval = w
		}
	}
	for _, e := range h.execs {
		execs = append(execs, e)
		if interval == 0 || e.settings.KeepAliveInterval < interval {
			interval = e.settings.KeepAliveInterval
		}
	}
	return h.session, execs, interval, true
}

// run sends the heartbeats while the client has executions to renew. A failed heartbeat is
// retried with a short backoff (a transient error must not kill healthy holders); each
// execution's own lease timer cancels it if no heartbeat succeeds in time.
func (h *heartbeater) run() {
	defer h.c.live.Done()
	last := time.Now()
	failures := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	defer h.idle()
	for {
		_, _, interval, ok := h.due()
		if !ok {
			return
		}
		wait := time.Until(last.Add(interval))
		if failures > 0 {
			wait = backoff.Delay(failures, 50*time.Millisecond, interval)
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-h.wake:
			timer.Stop()
			continue // recompute: executions came or went
		}
		session, execs, interval, ok := h.due()
		if !ok {
			return
		}
		last = time.Now()
		if err := h.beat(session, execs, last, interval); err != nil {
			failures++
			for _, task := range tasksOf(execs) {
				h.c.hooks.heartbeatFailed(task[0], task[1])
			}
			h.c.log.Warn("taskling: heartbeat failed; retrying", zap.Int64("session", session),
				zap.Int("executions", len(execs)), zap.Int("failures", failures), zap.Error(err))
			continue
		}
		failures = 0
	}
}

// beat sends one heartbeat for execs, then extends the lease of each that still holds its slot
// and cancels the others.
func (h *heartbeater) beat(session int64, execs []*Execution, sentAt time.Time, interval time.Duration) error {
	ids := make([]int64, 0, len(execs))
	var submissionRuns []int64
	deadline := sentAt.Add(interval) // a heartbeat slower than this is given up and retried
	for _, e := range execs {
		if e.session == session {
			ids = append(ids, e.id)
			deadline = later(deadline, e.deadline())
			if e.runsSubmission() {
				submissionRuns = append(submissionRuns, e.id)
			}
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	lost, cancelReasons, renewed, err := h.c.store.Heartbeat(ctx, session, ids, submissionRuns)
	if err != nil {
		return err
	}
	for _, e := range execs {
		why, isLost := lost[e.id]
		if isLost && why == execution.CancelRequested {
			// The run is told the operator's reason, as the cancel watcher tells it (whichever
			// sees the cancel first).
			e.cancelSubmission(cancelReasons[e.id])
			isLost = false
		}
		switch {
		case e.session != session:
			e.loseLease("its session was replaced: the one it was granted under vanished")
		case !renewed:
			e.loseLease("its session vanished from the database")
		case isLost && why == execution.Ended && e.releasing.Load():
			// its release committed: expected
		case isLost:
			e.loseLease(lostReason(why))
		default:
			e.extendLease(sentAt)
			continue
		}
		h.remove(e)
	}
	h.mu.Lock()
	if h.session == session {
		if renewed {
			h.renewed = sentAt
		} else {
			h.session = 0 // the next start registers a new session
		}
	}
	h.mu.Unlock()
	return nil
}

// renewedSince returns when the last heartbeat that renewed session was sent (zero if none or
// another session): on the database, its heartbeat is later than that.
func (h *heartbeater) renewedSince(session int64) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.session != session {
		return time.Time{}
	}
	return h.renewed
}

func lostReason(why execution.Lost) string {
	switch why {
	case execution.Reclaimed:
		return "it was judged dead and its slot reclaimed"
	case execution.Ended:
		return "its end is recorded (a release whose answer was lost)"
	case execution.Missing:
		return "its row is gone"
	}
	return fmt.Sprintf("lost (%d)", why)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// tasksOf lists the distinct (application, task) pairs of execs.
func tasksOf(execs []*Execution) [][2]string {
	seen := map[[2]string]bool{}
	var out [][2]string
	for _, e := range execs {
		k := [2]string{e.app, e.task}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}
