package execution

import (
	"github.com/taskling-go/taskling/internal/backoff"

	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// maxBatch bounds the requests one token transaction serves.
const maxBatch = 64

// op is one acquire or release waiting for a token transaction.
type op struct {
	request
	ctx context.Context

	outcome outcome
	failure error // the transaction failed, or ctx ended while queued

	done   chan struct{} // closed when the op's result is set
	lead   chan struct{} // closed when this op's goroutine must run the next batch
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

// combiner queues one process's token operations on one task. One goroutine at a time — the
// leader, itself a requester — takes everything queued and serves it in one transaction, then
// hands leadership to the oldest request that arrived meanwhile. Under contention a single
// transaction grants and returns many slots, so throughput grows with the number of waiting
// goroutines instead of collapsing, and one process never contends with itself on the row lock.
type combiner struct {
	mu      sync.Mutex
	queue   []*op
	leading bool
}

func (s *Store) combinerFor(taskID int64) *combiner {
	s.locksMu.Lock()
	defer s.locksMu.Unlock()
	c, ok := s.combiners[taskID]
	if !ok {
		c = &combiner{}
		s.combiners[taskID] = c
	}
	return c
}

// submit runs o in a token transaction of its task and returns once its result is set, or once
// ctx ends while o is still queued.
func (s *Store) submit(taskID int64, o *op) {
	o.done, o.lead = make(chan struct{}), make(chan struct{})
	c := s.combinerFor(taskID)
	c.mu.Lock()
	c.queue = append(c.queue, o)
	if !c.leading {
		c.leading, o.leader = true, true
		c.mu.Unlock()
		s.leadFor(taskID, c, o)
		return
	}
	c.mu.Unlock()
	select {
	case <-o.done:
		return
	case <-o.lead:
		s.leadFor(taskID, c, o)
		return
	case <-o.ctx.Done():
	}
	c.mu.Lock()
	switch {
	case o.leader:
		c.mu.Unlock()
		s.leadFor(taskID, c, o) // drops o itself, whose ctx is over
	case o.taken:
		c.mu.Unlock()
		<-o.done // its transaction is in flight: its outcome must be reported
	default:
		for i, q := range c.queue {
			if q == o {
				c.queue = append(c.queue[:i:i], c.queue[i+1:]...)
				break
			}
		}
		c.mu.Unlock()
		o.failure = o.ctx.Err()
	}
}

// leadFor leads on behalf of o, whose request is first in the queue and so in the batch.
func (s *Store) leadFor(taskID int64, c *combiner, o *op) {
	s.lead(taskID, c)
	select {
	case <-o.done:
	default: // never expected; fail loudly rather than report an empty result as a grant
		o.failure = errors.New("execution: internal error: request was not served by its own batch")
	}
}

// lead runs one batch, then passes leadership on (or ends it when nothing is queued).
func (s *Store) lead(taskID int64, c *combiner) {
	c.mu.Lock()
	if len(c.queue) == 0 { // cannot happen: a leader's own request is queued until it leads
		c.leading = false
		c.mu.Unlock()
		return
	}
	// A cron claim runs alone: when it loses to another host, its transaction fails, and that
	// must not fail anyone else's request.
	n := 1
	if c.queue[0].acquire == nil || c.queue[0].acquire.Schedule == nil {
		for n < len(c.queue) && n < maxBatch && (c.queue[n].acquire == nil || c.queue[n].acquire.Schedule == nil) {
			n++
		}
	}
	batch := c.queue[:n:n]
	c.queue = c.queue[n:]
	for _, o := range batch {
		o.taken = true
	}
	c.mu.Unlock()

	s.runBatch(taskID, batch)

	c.mu.Lock()
	if len(c.queue) > 0 {
		next := c.queue[0]
		next.leader = true
		close(next.lead)
	} else {
		c.leading = false
	}
	c.mu.Unlock()
	for _, o := range batch {
		close(o.done)
	}
}

// runBatch runs the token transaction for batch, retrying serialization failures until every
// request's context has ended. A request whose context ends before an attempt is dropped.
func (s *Store) runBatch(taskID int64, batch []*op) {
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
	for attempt := 0; ; attempt++ {
		live := batch[:0:0]
		for _, o := range batch {
			if err := o.ctx.Err(); err != nil && o.err() == nil {
				o.failure = err
			}
			if o.err() == nil {
				live = append(live, o)
			}
		}
		if len(live) == 0 {
			return
		}
		err := s.runTx(ctx, func(ctx context.Context, tx *txConn) error {
			return s.tokenTx(ctx, tx, taskID, live)
		})
		if err == nil || errors.Is(err, errRollback) {
			s.transactions.Add(1)
			s.operations.Add(int64(len(live)))
			return
		}
		if !isRetryable(err) {
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

// failAll gives err to every op that has no error of its own.
func failAll(ops []*op, err error) {
	for _, o := range ops {
		if o.err() == nil {
			o.failure = err
		}
	}
}
