package chaos

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskling-go/taskling/internal/devtools/pgcluster"
)

// primaryWatch polls every node of a Patroni cluster every 20 ms on a connection of its own
// (pg_is_in_recovery(), and the timeline of a writable server), and keeps each change of a
// node's state with the times of the polls around it. From those it tells when a new timeline
// became writable (a lower bound: the send time of the last poll that did not find it so) and
// when an old primary stopped being writable (an upper bound: the reply of the first poll that
// found it not).
type primaryWatch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	cond *sync.Cond
	log  []transition
	last map[string]nodeState
}

// nodeState is what a poll found: a writable server's timeline, or tl 0 (in recovery, or no
// answer).
type nodeState struct {
	writable bool
	tl       int
}

// transition is a change of a node's state: the poll that found the new state (sent, got) and
// the send time of the poll before it, which found the old one.
type transition struct {
	node           string
	from, to       nodeState
	prevSent       time.Time
	sent, got      time.Time
	index          int
	firstPollFound bool // the node's first poll (no previous state)
}

func watchPrimaries(p *pgcluster.Patroni) *primaryWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &primaryWatch{cancel: cancel, last: map[string]nodeState{}}
	w.cond = sync.NewCond(&w.mu)
	for _, n := range p.Nodes() {
		w.wg.Go(func() { w.pollNode(ctx, n) })
	}
	return w
}

func (w *primaryWatch) stop() {
	w.cancel()
	w.wg.Wait()
}

func (w *primaryWatch) pollNode(ctx context.Context, n *pgcluster.PatroniNode) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	var prevSent time.Time
	first := true
	for ctx.Err() == nil {
		sent := time.Now()
		st, c := pollOnce(ctx, conn, n.URL())
		conn = c
		got := time.Now()
		w.mu.Lock()
		if old, ok := w.last[n.Name]; first || !ok || old != st {
			w.log = append(w.log, transition{node: n.Name, from: old, to: st, prevSent: prevSent, sent: sent, got: got, index: len(w.log), firstPollFound: first})
			w.last[n.Name] = st
			w.cond.Broadcast()
		}
		w.mu.Unlock()
		prevSent, first = sent, false
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pollOnce reads the node's state on conn (connecting first if it is nil); it returns the
// connection to use next time (nil after an error).
func pollOnce(ctx context.Context, conn *pgx.Conn, url string) (nodeState, *pgx.Conn) {
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if conn == nil {
		c, err := pgx.Connect(qctx, url+"&connect_timeout=1&application_name=chaos-watch")
		if err != nil {
			return nodeState{}, nil
		}
		conn = c
	}
	var st nodeState
	err := conn.QueryRow(qctx, `SELECT NOT pg_is_in_recovery(),
       CASE WHEN pg_is_in_recovery() THEN 0 ELSE ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::int END`).Scan(&st.writable, &st.tl)
	if err != nil {
		conn.Close(context.Background())
		return nodeState{}, nil
	}
	return st, conn
}

// mark is the number of changes seen so far: waitTimeline looks at those after it.
func (w *primaryWatch) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.log)
}

// waitTimeline waits up to timeout for a node found writable on a timeline above tl, among the
// changes from mark on, and returns that change.
func (w *primaryWatch) waitTimeline(mark, tl int, timeout time.Duration) (transition, bool) {
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer timer.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := mark; ; {
		for ; i < len(w.log); i++ {
			if tr := w.log[i]; tr.to.writable && tr.to.tl > tl && !tr.firstPollFound {
				return tr, true
			}
		}
		if !time.Now().Before(deadline) {
			return transition{}, false
		}
		w.cond.Wait()
	}
}

// writableNode is a node found writable by its last poll ("" if none).
func (w *primaryWatch) writableNode() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for n, st := range w.last {
		if st.writable {
			return n
		}
	}
	return ""
}

// stopped is when node stopped being writable on timeline tl for good: the reply of the first
// poll after its last writable one on tl (false if it still is, or never was).
func (w *primaryWatch) stopped(node string, tl int) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	on := -1
	for i, tr := range w.log {
		if tr.node == node && tr.to == (nodeState{writable: true, tl: tl}) {
			on = i
		}
	}
	if on < 0 {
		return time.Time{}, false
	}
	for _, tr := range w.log[on+1:] {
		if tr.node == node {
			return tr.got, true
		}
	}
	return time.Time{}, false
}
