package execution

import (
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reads and writes of keyed tasks (keys.go) in the token transactions' round trips.

// txWant is what round trip 1 reads beyond the usual: the rows of grantees without liveness terms,
// and the keyed waiters of tasks at a width level (keyReadWidths).
type txWant struct {
	legacy map[int64]bool
	keys   map[int64]int
}

// maxKeyLevel is the widest keyed read; a decision on it takes what it read as complete.
const maxKeyLevel = 4

// keyReadWidths are the candidate keys, tickets per key and oldest tickets read at level: 16, 2
// and 4, four times more at each level.
func keyReadWidths(level int) (candidates, perKey, oldest int) {
	m := 1 << (2 * level)
	return 16 * m, 2 * m, 4 * m
}

// widenKeyReads asks the next attempt to read tasks' keyed waiters, wider than this one did; it
// reports false when every task was read as wide as it goes already. The level reached is
// remembered: the task's next transactions start there.
func (s *Store) widenKeyReads(levels map[int64]int, tasks []int64) bool {
	wider := false
	for _, id := range tasks {
		level, read := levels[id]
		switch {
		case !read:
			levels[id] = s.keyLevel(id)
			wider = true
		case level < maxKeyLevel:
			levels[id] = level + 1
			s.keyLevels.Store(id, level+1)
			wider = true
		}
	}
	return wider
}

// keyLevel is the width the task's keyed reads start at.
func (s *Store) keyLevel(id int64) int {
	if l, ok := s.keyLevels.Load(id); ok {
		return l.(int)
	}
	return 0
}

// keyReadsWanted reports whether round trip 1 reads a task's keyed waiters, and how wide: when the
// attempt asks, or when what this process knows of the task says it has keyed waiters.
func (s *Store) keyReadsWanted(id int64, want map[int64]int) (int, bool) {
	if !s.epochs.keys.Load() {
		return 0, false
	}
	if level, ok := want[id]; ok {
		return level, true
	}
	s.cache.mu.Lock()
	r, known := s.cache.rows[id]
	s.cache.mu.Unlock()
	if known && r.state.keys != nil && r.state.keys.waiting > 0 {
		return s.keyLevel(id), true
	}
	return 0, false
}

// queueKeyReads queues, for each task that needs them, the reads of its keyed waiters and its keys'
// round-robin state; the map is filled once the batch is sent.
func (s *Store) queueKeyReads(b *txBatch, tasks map[int64][]*op, want map[int64]int) map[int64]*keyReads {
	out := map[int64]*keyReads{}
	for _, id := range slices.Sorted(maps.Keys(tasks)) {
		level, ok := s.keyReadsWanted(id, want)
		if !ok {
			continue
		}
		keys, tickets := requested(tasks[id], []string{})
		r := &keyReads{rounds: map[string]keyRoundRow{}, heartbeats: map[int64]int64{}, final: level >= maxKeyLevel}
		r.candidateLimit, r.perKey, r.oldest = keyReadWidths(level)
		out[id] = r
		stripe := int16(id % stripeCount)
		b.Queue(keyRowsSQLs[stripe], stripe, id, keys, r.candidateLimit).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var key string
				var row keyRoundRow
				var candidate bool
				if err := rows.Scan(&key, &row.pass, &row.grantedUS, &row.waiting, &row.top, &candidate); err != nil {
					return err
				}
				r.rounds[key] = row
				if candidate {
					r.candidates = append(r.candidates, key)
				}
			}
			return rows.Err()
		})
		b.Queue(keyTicketsSQLs[stripe], stripe, id, tickets, r.candidateLimit, r.perKey, r.oldest).Query(func(rows pgx.Rows) error {
			return scanKeyTickets(rows, r)
		})
	}
	return out
}

// requested are the keys (after those of keys) and tickets of ops' acquisitions.
func requested(ops []*op, keys []string) ([]string, []int64) {
	tickets := []int64{}
	for _, o := range ops {
		if a := o.acquire; a != nil {
			if !slices.Contains(keys, a.Key) {
				keys = append(keys, a.Key)
			}
			if t := a.ticket(); t != 0 {
				tickets = append(tickets, t)
			}
		}
	}
	return keys, tickets
}

func scanKeyTickets(rows pgx.Rows, r *keyReads) error {
	for rows.Next() {
		t := &keyTicket{}
		var thresholdUS, windowUS, heartbeat int64
		if err := rows.Scan(&t.id, &t.key, &t.cost, &t.priority, &t.session, &t.queuedUS, &t.offeredUS, &thresholdUS, &windowUS,
			&t.direct, &heartbeat); err != nil {
			return err
		}
		t.threshold, t.window = usDuration(thresholdUS), usDuration(windowUS)
		r.tickets = append(r.tickets, t)
		r.heartbeats[t.id] = heartbeat
	}
	return rows.Err()
}

// The keyed statements for each stripe (partitionsOf).
var (
	keyRowsSQLs          = partitionsOf(keyRowsSQL)
	keyTicketsSQLs       = partitionsOf(keyTicketsSQL)
	deleteKeyTicketsSQLs = partitionsOf(deleteKeyTicketsSQL)
	insertKeyTicketsSQLs = partitionsOf(insertKeyTicketsSQL)
	updateKeyTicketsSQLs = partitionsOf(updateKeyTicketsSQL)
	upsertKeysSQLs       = partitionsOf(upsertKeysSQL)
	refreshKeysSQLs      = partitionsOf(refreshKeysSQL)
	dropKeysSQLs         = partitionsOf(dropKeysSQL)
	fastDropKeysSQLs     = partitionsOf(fastDropKeysSQL)
)

// queueKeyWrites queues a keyed task's writes after its row's: tickets, then keys' rounds, waiter
// counts and rows that go.
func queueKeyWrites(b *txBatch, id int64, p *keyPlan) {
	stripe := int16(id % stripeCount)
	if len(p.delete) > 0 {
		b.Queue(deleteKeyTicketsSQLs[stripe], stripe, id, p.delete)
	}
	if len(p.insert) > 0 {
		var ids, sessions, queued, offered, thresholds, windows []int64
		var keys []string
		var costs, priorities []int32
		var direct []bool
		for _, t := range p.insert {
			ids, sessions, queued, offered = append(ids, t.id), append(sessions, t.session), append(queued, t.queuedUS), append(offered, t.offeredUS)
			thresholds, windows = append(thresholds, t.threshold.Microseconds()), append(windows, t.window.Microseconds())
			keys, costs, priorities = append(keys, t.key), append(costs, int32(t.cost)), append(priorities, int32(t.priority))
			direct = append(direct, t.direct)
		}
		b.Queue(insertKeyTicketsSQLs[stripe], stripe, id, ids, keys, costs, priorities, sessions, queued, thresholds, windows, offered, direct)
	}
	if len(p.update) > 0 {
		var ids, queued, offered []int64
		for _, t := range p.update {
			ids, queued, offered = append(ids, t.id), append(queued, t.queuedUS), append(offered, t.offeredUS)
		}
		b.Queue(updateKeyTicketsSQLs[stripe], stripe, id, ids, queued, offered)
	}
	if len(p.rounds) > 0 {
		keys := slices.Sorted(maps.Keys(p.rounds))
		passes, granted := make([]int64, len(keys)), make([]int64, len(keys))
		for i, k := range keys {
			passes[i], granted[i] = p.rounds[k].pass, p.rounds[k].grantedUS
		}
		b.Queue(upsertKeysSQLs[stripe], stripe, id, keys, passes, granted)
	}
	if len(p.deltas) > 0 {
		keys := slices.Sorted(maps.Keys(p.deltas))
		deltas := make([]int32, len(keys))
		for i, k := range keys {
			deltas[i] = int32(p.deltas[k])
		}
		b.Queue(refreshKeysSQLs[stripe], stripe, id, keys, deltas)
	}
	if len(p.drops) > 0 {
		b.Queue(dropKeysSQLs[stripe], stripe, id, p.drops)
	}
}

// fastKeyWrites reports whether a keyed plan's writes can go on the fast path: only rows of keys
// left with no holder may go (fastDropKeysSQL); tickets and rounds are written the usual way.
func (p *keyPlan) fastKeyWrites() bool {
	return p == nil || len(p.insert)+len(p.update)+len(p.delete)+len(p.rounds)+len(p.deltas) == 0 && p.rates == nil
}

func usDuration(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// The statements a schema with keys (0022) takes, and those of protocol 5 before it.

func (s *Store) lockTasksSQL() string {
	if s.epochs.keys.Load() {
		return lockTasksSQL
	}
	return p5LockTasksSQL
}

func (s *Store) insertExecutionsSQL(fast bool) string {
	switch keyed := s.epochs.keys.Load(); {
	case fast && keyed:
		return fastInsertExecutionsSQL
	case fast:
		return p5FastInsertExecutionsSQL
	case keyed:
		return insertExecutionsSQL
	}
	return p5InsertExecutionsSQL
}

// keyColumns are the task rows' key columns a transaction writes, as column arrays (a task that
// is not keyed keeps its stored ones).
type keyColumns struct {
	holders, declared []*string
	vtimes            []int64
	waiting           []int32
	declaredLimits    []*int
}

func (c *keyColumns) add(p *keyPlan, stored *keyRow) {
	if p == nil {
		if stored == nil {
			stored = &keyRow{}
		}
		c.holders, c.vtimes, c.waiting = append(c.holders, &stored.holders), append(c.vtimes, stored.vtime), append(c.waiting, int32(stored.waiting))
		c.declaredLimits, c.declared = append(c.declaredLimits, nil), append(c.declared, nil)
		return
	}
	c.holders, c.vtimes, c.waiting = append(c.holders, &p.holders), append(c.vtimes, p.vtime), append(c.waiting, int32(p.waiting))
	c.declaredLimits, c.declared = append(c.declaredLimits, p.declaredLimit), append(c.declared, p.declared)
}
