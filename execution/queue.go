package execution

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// A task row keeps, next to its holders, the queue of waiters for a slot:
// task_definition.queue, "W:<ticket>,P:<session>,R:<priority>,Q:<queued µs>,O:<offered µs>,
// D:<threshold µs>,X:<offer window µs>|…", in grant order: higher priority first, then the order
// of queueing. A ticket is alive while its session's heartbeat is within D of the database clock
// (or within D of its queueing, before the first heartbeat). The first tickets, as many as there
// are free slots, are offered the slots: a ticket that does not take its offer within X goes to
// the back of its priority, so a waiter that died or hangs never holds the line for long.
//
// An odd X marks a direct ticket (protocol 4, handoff.go): a freed slot is granted to it by the
// transaction that frees it, and its waiter only takes the grant. (A flag in X, not a new field,
// so that binaries of protocol 3 still parse the queue: to them X is a window 1 µs longer.)

// ticket is one waiter in a task's queue.
type ticket struct {
	id        int64 // the id of the first attempt that queued it (an execution id, never inserted)
	session   int64
	priority  int64
	queuedUS  int64
	offeredUS int64 // 0: not offered
	threshold time.Duration
	window    time.Duration // how long an offer waits to be taken
	direct    bool          // a freed slot is granted to it directly (handoff.go)
}

var errMalformedQueue = errors.New("malformed queue")

var ticketKeys = [7]string{"W", "P", "R", "Q", "O", "D", "X"}

// parseQueue parses a queue column; "" is an empty queue.
func parseQueue(s string) ([]ticket, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, "|")
	out := make([]ticket, 0, len(parts))
	seen := make(map[int64]bool, len(parts))
	for i, p := range parts {
		t, err := parseTicket(p)
		if err == nil && seen[t.id] {
			err = fmt.Errorf("ticket %d appears twice", t.id)
		}
		if err != nil {
			if len(p) > 100 {
				p = p[:100]
			}
			return nil, fmt.Errorf("%w: ticket %d (%q): %v", errMalformedQueue, i, p, err)
		}
		seen[t.id] = true
		out = append(out, t)
	}
	return out, nil
}

func parseTicket(s string) (ticket, error) {
	fields := strings.Split(s, ",")
	if len(fields) != len(ticketKeys) {
		return ticket{}, fmt.Errorf("%d fields, want %d (W, P, R, Q, O, D, X)", len(fields), len(ticketKeys))
	}
	var v [len(ticketKeys)]int64
	for i, key := range ticketKeys {
		raw, ok := strings.CutPrefix(fields[i], key+":")
		if !ok {
			return ticket{}, fmt.Errorf("field %d is not %s:<number>", i, key)
		}
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return ticket{}, fmt.Errorf("field %s: %q is not an integer", key, raw)
		}
		v[i] = n
	}
	if v[0] <= 0 || v[5] <= 0 || v[6] <= 0 {
		return ticket{}, errors.New("fields W, D and X must be positive")
	}
	return ticket{id: v[0], session: v[1], priority: v[2], queuedUS: v[3], offeredUS: v[4],
		threshold: time.Duration(v[5]) * time.Microsecond, window: time.Duration(max(v[6]&^1, 1)) * time.Microsecond, direct: v[6]&1 == 1}, nil
}

func formatQueue(q []ticket) string {
	var b strings.Builder
	for i, t := range q {
		if i > 0 {
			b.WriteByte('|')
		}
		window := max(t.window.Microseconds()&^1, 2)
		if t.direct {
			window |= 1
		}
		for k, n := range [len(ticketKeys)]int64{t.id, t.session, t.priority, t.queuedUS, t.offeredUS, t.threshold.Microseconds(), window} {
			if k > 0 {
				b.WriteByte(',')
			}
			b.WriteString(ticketKeys[k])
			b.WriteByte(':')
			b.WriteString(strconv.FormatInt(n, 10))
		}
	}
	return b.String()
}

// alive reports whether the ticket's waiter is alive at nowUS, given its session's last
// heartbeat (0 if unknown).
func (t ticket) alive(nowUS, heartbeatUS int64) bool {
	last := max(t.queuedUS, heartbeatUS)
	return time.Duration(nowUS-last)*time.Microsecond <= t.threshold
}

// queue is a task's queue as one decision moves it.
type queue struct {
	tickets []ticket
	nowUS   int64
}

// enqueue adds t behind every ticket of its priority or higher.
func (q *queue) enqueue(t ticket) {
	i := slices.IndexFunc(q.tickets, func(o ticket) bool { return o.priority < t.priority })
	if i < 0 {
		i = len(q.tickets)
	}
	q.tickets = slices.Insert(q.tickets, i, t)
}

func (q *queue) position(id int64) int {
	return slices.IndexFunc(q.tickets, func(t ticket) bool { return t.id == id })
}

func (q *queue) remove(id int64) bool {
	if i := q.position(id); i >= 0 {
		q.tickets = slices.Delete(q.tickets, i, i+1)
		return true
	}
	return false
}

// prune drops the tickets of dead waiters, and sends the tickets whose offer expired to the back
// of their priority (unoffered).
func (q *queue) prune(heartbeats map[int64]int64) {
	var late []ticket
	kept := q.tickets[:0:0]
	for _, t := range q.tickets {
		switch {
		case !t.alive(q.nowUS, heartbeats[t.session]):
		case t.offeredUS != 0 && time.Duration(q.nowUS-t.offeredUS)*time.Microsecond > t.window &&
			time.Duration(q.nowUS-heartbeats[t.session])*time.Microsecond > t.threshold:
			// Its offer lapsed and its process has not heartbeat for a threshold: requeued, it
			// would live a threshold more from its new queueing time, and be offered again.
		case t.offeredUS != 0 && time.Duration(q.nowUS-t.offeredUS)*time.Microsecond > t.window:
			t.offeredUS, t.queuedUS = 0, q.nowUS
			late = append(late, t)
		default:
			kept = append(kept, t)
		}
	}
	q.tickets = kept
	for _, t := range late {
		q.enqueue(t)
	}
}

// offer marks the first free tickets as offered (from now, unless they already were) and returns
// them: the waiters a freed slot's notification is for. fresh reports a ticket offered just now.
func (q *queue) offer(free int) (offered []int64, fresh bool) {
	for i := range q.tickets {
		if i >= free {
			break
		}
		if q.tickets[i].offeredUS == 0 {
			q.tickets[i].offeredUS = q.nowUS
			fresh = true
		}
		offered = append(offered, q.tickets[i].id)
	}
	return offered, fresh
}

// Waiter is a live ticket of a task's queue, as history shows it.
type Waiter struct {
	Ticket   int64
	Position int // 1: next (a keyed waiter: in its key's line)
	Priority int
	Host     string
	QueuedAt time.Time
	Key      string
	Cost     int
}

// waitersSQL lists task $1's live tickets in queue order.
const waitersSQL = `
SELECT w.ticket, w.priority, w.host, w.queued
FROM taskling.task_definition d, taskling.live_tickets(d.queue) w
WHERE d.id = $1
ORDER BY w.n`

// keyedWaitersSQL lists task $1's live tickets: the row's queue in its order (key ”, cost 1),
// then the keyed ones by key, in each key's order (0022).
const keyedWaitersSQL = `
SELECT * FROM (
    SELECT w.ticket, w.priority, w.host, w.queued, '' AS key, 1 AS cost, 0 AS part, w.n AS ord
    FROM taskling.task_definition d, taskling.live_tickets(d.queue) w
    WHERE d.id = $1
    UNION ALL
    SELECT k.ticket, k.priority, k.host, k.queued, k.key, k.cost, 1, row_number() OVER (ORDER BY k.key, k.priority DESC, k.queued, k.ticket)
    FROM taskling.live_key_tickets($1) k
) v
ORDER BY v.part, v.ord`

// Waiters returns the live waiters queued for a slot of the task: first in line first, then
// (a keyed task) by key, each key's first in line first.
func (s *Store) Waiters(ctx context.Context, taskID int64) ([]Waiter, error) {
	if err := s.detectEpochs(ctx); err != nil {
		return nil, err
	}
	keyed := s.epochs.keys.Load()
	sql := waitersSQL
	if keyed {
		sql = keyedWaitersSQL
	}
	rows, err := s.pool.Query(ctx, sql, taskID)
	if err != nil {
		return nil, fmt.Errorf("waiters of task %d: %w", taskID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Waiter, error) {
		w := Waiter{Cost: 1}
		if !keyed {
			return w, row.Scan(&w.Ticket, &w.Priority, &w.Host, &w.QueuedAt)
		}
		var part, ord int64
		return w, row.Scan(&w.Ticket, &w.Priority, &w.Host, &w.QueuedAt, &w.Key, &w.Cost, &part, &ord)
	})
	if err != nil {
		return nil, fmt.Errorf("waiters of task %d: %w", taskID, err)
	}
	pos := map[string]int{}
	for i := range out {
		if i > 0 && out[i].Key != out[i-1].Key || i == 0 {
			pos[out[i].Key] = 0
		}
		pos[out[i].Key]++
		out[i].Position = pos[out[i].Key]
	}
	return out, nil
}
