package execution

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskling-go/taskling/internal/backoff"
)

// One process's token operations are combined: a few goroutines at a time — the leaders,
// themselves requesters — each take what is queued (of any tasks not already in a transaction
// of this process) and serve it in one transaction, then hand leadership to the oldest request
// that can lead. Under contention one transaction grants and returns many slots, of one task or
// of many, so throughput grows with the requests waiting instead of collapsing under commits and
// round trips; and one process never contends with itself on a task's row lock.

const (
	// maxBatch bounds the requests one token transaction serves.
	maxBatch = 64
	// Under SERIALIZABLE, PostgreSQL turns a transaction's predicate locks on more than two rows of
	// one page into a lock on the page (max_pred_locks_per_page), and on more than 31 pages or rows
	// of one table into a lock on the table (max_pred_locks_per_relation, with the default
	// max_pred_locks_per_transaction of 64). A write of an unrelated task's row on that page or
	// table would then conflict with it. So a serializable transaction serves at most
	// maxTasksPerPage tasks whose rows share a page, and maxSerializableTasks tasks in all.
	maxTasksPerPage      = 2
	maxSerializableTasks = 30
	// maxLeaders bounds a process's token transactions in flight. Beyond a few, more concurrent
	// transactions only add backends contending for the server's CPU and its WAL flushes.
	maxLeaders = 4
)

// op is one acquire or release waiting for a token transaction.
type op struct {
	request
	ctx context.Context

	outcome outcome
	failure error // the transaction failed, or ctx ended while queued

	done   chan struct{} // closed when the op's result is set
	lead   chan struct{} // closed when this op's goroutine must run batch
	batch  []*op         // guarded by combiner.mu: the batch this op leads (taken with it)
	leader bool          // guarded by combiner.mu
	taken  bool          // guarded by combiner.mu: in a batch in flight
}

// err is the op's error: its own, or its transaction's.
func (o *op) err() error {
	if o.failure != nil {
		return o.failure
	}
	return o.outcome.err
}

// claimsAlone reports a cron claim: it runs in a transaction of its own, since a claim that loses
// to another host fails its whole transaction.
func (o *op) claimsAlone() bool { return o.acquire != nil && o.acquire.Schedule != nil }

// combiner queues one process's token operations.
type combiner struct {
	mu      sync.Mutex
	queue   []*op
	busy    map[int64]bool // tasks in a transaction in flight
	leaders int

	// serializable: batches respect the predicate lock limits above.
	serializable bool
	// pages maps a task to the heap page its row was last seen on.
	pages map[int64]int64
}

// notePage records the heap page of a task row's version.
func (c *combiner) notePage(task, page int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pages == nil {
		c.pages = map[int64]int64{}
	}
	c.pages[task] = page
}

// submit runs o in a token transaction and returns once its result is set, or once ctx ends
// while o is still queued.
func (s *Store) submit(o *op) {
	o.done, o.lead = make(chan struct{}), make(chan struct{})
	c := &s.comb
	c.mu.Lock()
	c.queue = append(c.queue, o)
	if c.leaders < maxLeaders && !c.busy[o.taskID()] {
		c.leaders++
		o.leader = true
		o.batch = c.takeBatch(o)
		c.mu.Unlock()
		o.queued()
		s.leadFor(o)
		return
	}
	c.mu.Unlock()
	o.queued()
	select {
	case <-o.done:
		return
	case <-o.lead:
		s.leadFor(o)
		return
	case <-o.ctx.Done():
	}
	c.mu.Lock()
	switch {
	case o.leader:
		c.mu.Unlock()
		s.leadFor(o) // its batch is taken: run it (o itself is dropped, its ctx is over)
	case o.taken:
		c.mu.Unlock()
		<-o.done // its transaction is in flight: its outcome must be reported
	default:
		c.queue = slices.DeleteFunc(c.queue, func(q *op) bool { return q == o })
		c.mu.Unlock()
		o.failure = o.ctx.Err()
	}
}

// leadFor runs the batch o leads, then passes leadership on.
func (s *Store) leadFor(o *op) {
	c := &s.comb
	c.mu.Lock()
	batch := o.batch
	c.mu.Unlock()
	if len(batch) > 0 {
		s.runBatch(batch)
	}
	c.mu.Lock()
	for _, b := range batch {
		delete(c.busy, b.taskID())
	}
	c.leaders--
	c.wakeLeaders()
	c.mu.Unlock()
	for _, b := range batch {
		close(b.done)
	}
	select {
	case <-o.done:
	default: // never expected; fail loudly rather than report an empty result as a grant
		o.failure = errors.New("internal error: request was not served by its own batch")
	}
}

// takeBatch takes first, then in arrival order the queued requests of tasks not in flight: a cron
// claim alone, else up to maxBatch others. Called with mu held.
func (c *combiner) takeBatch(first *op) []*op {
	if c.busy == nil {
		c.busy = map[int64]bool{}
	}
	batch := []*op{first}
	taking := map[int64]bool{first.taskID(): true}
	onPage := map[int64]int{}
	if p, ok := c.pages[first.taskID()]; ok {
		onPage[p]++
	}
	rest := c.queue[:0]
	for _, o := range c.queue {
		t := o.taskID()
		switch {
		case o == first:
		case (c.busy[t] && !taking[t]) || len(batch) == maxBatch || o.claimsAlone() || first.claimsAlone() || !c.fits(t, taking, onPage):
			rest = append(rest, o)
		default:
			batch = append(batch, o)
			if !taking[t] {
				if p, ok := c.pages[t]; ok {
					onPage[p]++
				}
			}
			taking[t] = true
		}
	}
	c.queue = rest
	for t := range taking {
		c.busy[t] = true
	}
	for _, o := range batch {
		o.taken = true
	}
	return batch
}

// fits reports whether a request of task t may join a serializable batch already serving the
// tasks taking, whose rows are on the pages counted by onPage. Called with mu held.
func (c *combiner) fits(t int64, taking map[int64]bool, onPage map[int64]int) bool {
	if !c.serializable || taking[t] {
		return true
	}
	if len(taking) >= maxSerializableTasks {
		return false
	}
	p, ok := c.pages[t]
	return !ok || onPage[p] < maxTasksPerPage
}

// wakeLeaders hands leadership to the oldest waiting requests that can lead now, each with the
// batch it leads taken at once, while leaders are free. Called with mu held.
func (c *combiner) wakeLeaders() {
	for c.leaders < maxLeaders {
		i := slices.IndexFunc(c.queue, func(o *op) bool { return !c.busy[o.taskID()] })
		if i < 0 {
			return
		}
		o := c.queue[i]
		c.leaders++
		o.leader = true
		o.batch = c.takeBatch(o)
		close(o.lead)
	}
}

// runBatch runs the token transaction for batch, retrying serialization failures until every
// request's context has ended. A request whose context ends before an attempt is dropped.
func (s *Store) runBatch(batch []*op) {
	// The transaction runs until the last request still interested gives up.
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	defer cancel()
	var interested atomic.Int64
	interested.Store(int64(len(batch)))
	for _, o := range batch {
		stop := context.AfterFunc(o.ctx, func() {
			if interested.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	want := &txWant{legacy: map[int64]bool{}, keys: map[int64]int{}} // read from the next attempt on
	pending := batch                                                 // not served yet
	readOnly := 0                                                    // attempts refused by a read-only server
	for attempt := 0; ; attempt++ {
		live := pending[:0:0]
		for _, o := range pending {
			if err := o.ctx.Err(); err != nil && o.err() == nil {
				o.failure = err
			}
			if o.err() == nil {
				live = append(live, o)
			}
		}
		if attempt == 0 {
			live = s.tryFast(ctx, s.tryFastRefusals(ctx, live))
			pending = live
		}
		if len(live) == 0 {
			return
		}
		var tx *txConn
		err := s.detectEpochs(ctx)
		if err == nil {
			err = s.runTx(ctx, func(ctx context.Context, t *txConn) error {
				tx = t
				return s.tokenTx(ctx, t, live, want)
			})
		}
		if err == nil || errors.Is(err, errRollback) {
			s.remember(tx.seen, tx.reservedAhead, tx.epoch)
		} else {
			s.forget(live)
			if tx != nil && tx.committing && IsConnectionError(err) {
				s.releaseOrphans(ctx, tx.granted)
			}
		}
		var need *errNeedLegacy
		var needKeys *errNeedKeys
		var newEpoch *errNewEpoch
		switch {
		case err == nil || errors.Is(err, errRollback):
			s.transactions.Add(1)
			s.operations.Add(int64(len(live)))
			return
		case errors.As(err, &newEpoch):
			if rerr := s.registerEpoch(ctx, newEpoch.timeline); rerr != nil {
				failAll(live, rerr)
				return
			}
			continue // nothing was written
		case errors.As(err, &need) && !legacyKnown(want.legacy, need.ids):
			for _, id := range need.ids {
				want.legacy[id] = true
			}
			continue // at once: nothing was written
		case errors.As(err, &needKeys) && s.widenKeyReads(want.keys, needKeys.tasks):
			continue // at once: nothing was written
		case refusedReadOnly(err) && readOnly < readOnlyRetries:
			readOnly++
			continue // nothing was written, and the pool was reset: the next attempt dials anew
		case !IsRetryable(err):
			failAll(live, err)
			return
		}
		s.retries.Add(1)
		if berr := backoff.Sleep(ctx, attempt, time.Millisecond, 50*time.Millisecond); berr != nil {
			failAll(live, err)
			return
		}
	}
}

func legacyKnown(known map[int64]bool, ids []int64) bool {
	for _, id := range ids {
		if !known[id] {
			return false
		}
	}
	return true
}

// failAll gives err to every op that has no error of its own.
func failAll(ops []*op, err error) {
	for _, o := range ops {
		if o.err() == nil {
			o.failure = err
		}
	}
}
