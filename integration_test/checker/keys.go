package checker

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// KeyLimit is a keyed task's key limits (TaskSettings.KeyLimit and Keys): Named keys have a limit
// of their own, every other key (the empty one too) Default; 0 is no limit. A run that changes
// them is not judged (no window is recorded).
type KeyLimit struct {
	Default int
	Named   map[string]int
}

// For is the limit of key (0: none).
func (k KeyLimit) For(key string) int {
	if n, ok := k.Named[key]; ok {
		return n
	}
	return k.Default
}

// cost is the grant's cost, 1 when none was recorded.
func (g *Grant) cost() int { return max(g.Cost, 1) }

// end is when the database ended the grant (its completion, or its reclaim, or a completion a
// failover lost); zero if it never did.
func (g *Grant) end() time.Time {
	var end time.Time
	for _, t := range []time.Time{g.CompletedAt, g.ReclaimedAt, g.LostCompletion} {
		if !t.IsZero() && (end.IsZero() || t.Before(end)) {
			end = t
		}
	}
	return end
}

// sweepEvent is a start or an end of an interval.
type sweepEvent struct {
	at    time.Time
	start bool
	exec  int64
	cost  int
}

// sweepEvents are the starts and ends of ivs in time order, ends before starts at one instant
// (a slot released and granted again in one transaction, or by consecutive ones).
func sweepEvents(ivs []interval) []sweepEvent {
	evs := make([]sweepEvent, 0, 2*len(ivs))
	for _, iv := range ivs {
		evs = append(evs, sweepEvent{iv.start, true, iv.exec, iv.cost}, sweepEvent{iv.end, false, iv.exec, iv.cost})
	}
	sort.Slice(evs, func(i, j int) bool {
		if !evs[i].at.Equal(evs[j].at) {
			return evs[i].at.Before(evs[j].at)
		}
		return !evs[i].start && evs[j].start
	})
	return evs
}

func sortedKeys[V any](m map[int64]V) []int64 {
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// checkKeys is check (p). It judges what the database recorded, not what the holders did (that
// is check a): an execution holds its cost from its grant (started_at, written under the task
// row's lock) until the database ended it (ended_at, written under that lock too), so the grant
// that took a freed slot comes after that end (a token transaction writes its reclaims and
// releases before its grants). At each grant, the costs of the executions granted
// and not yet ended must fit the limit that grant saw, and those of its key the key's limit.
// Grants that never ended are check (c)'s; grants lost in a failover are check (h)'s.
func (c *checkRun) checkKeys() {
	r := &c.r
	for _, hd := range c.h.Holds {
		g, ok := c.grants[hd.Exec]
		if !ok || hd.Cost == 0 {
			continue
		}
		if hd.Key != g.Key || hd.Cost != g.cost() {
			r.add("p", hd.Task, hd.Exec, "holder saw key %q cost %d, the database recorded key %q cost %d", hd.Key, hd.Cost, g.Key, g.cost())
		}
	}
	type span struct {
		interval
		key string
	}
	byTask := map[string][]span{}
	for _, g := range c.h.Grants {
		if end := g.end(); !g.Lost && !end.IsZero() && !end.Before(g.GrantedAt) {
			byTask[g.Task] = append(byTask[g.Task], span{interval{exec: g.Exec, start: g.GrantedAt, end: end, cost: g.cost()}, g.Key})
		}
	}
	for task, spans := range byTask {
		initial, ok := c.h.InitialLimit[task]
		if !ok {
			continue // check (a) says so
		}
		keyOf := make(map[int64]string, len(spans))
		ivs := make([]interval, len(spans))
		for i, s := range spans {
			keyOf[s.exec], ivs[i] = s.key, s.interval
		}
		kl, keyed := c.h.KeyLimits[task]
		active := map[int64]int{}
		perKey := map[string]int{}
		cost := 0
		for _, e := range sweepEvents(ivs) {
			key := keyOf[e.exec]
			if !e.start {
				cost -= e.cost
				perKey[key] -= e.cost
				delete(active, e.exec)
				continue
			}
			active[e.exec] = e.cost
			cost += e.cost
			perKey[key] += e.cost
			r.MaxCost[task] = max(r.MaxCost[task], cost)
			if allowed := LimitFor(initial, c.changes[task], e.at); allowed >= 0 && cost > allowed {
				r.add("p", task, e.exec, "granted at %s: the database's executions not ended cost %d, limit in force %d: %v",
					ts(e.at), cost, allowed, sortedKeys(active))
			}
			if !keyed {
				continue
			}
			r.MaxKeyCost[task] = max(r.MaxKeyCost[task], perKey[key])
			if limit := kl.For(key); limit > 0 {
				r.KeyGrants[task]++
				if perKey[key] > limit {
					r.add("p", task, e.exec, "granted at %s: key %q holds cost %d, its limit %d: %v",
						ts(e.at), key, perKey[key], limit, c.ofKey(active, keyOf, key))
				}
			}
		}
	}
}

// ofKey lists the active executions of key with their costs.
func (c *checkRun) ofKey(active map[int64]int, keyOf map[int64]string, key string) []string {
	var out []string
	for _, id := range sortedKeys(active) {
		if keyOf[id] == key {
			g := c.grants[id]
			out = append(out, fmtHolder(id, active[id], g.Host, g.GrantedAt))
		}
	}
	return out
}

func fmtHolder(id int64, cost int, host string, granted time.Time) string {
	return fmt.Sprintf("exec %d cost %d on %s granted %s", id, cost, host, ts(granted))
}
