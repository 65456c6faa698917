package execution

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// The grant order of a keyed task's waiters (fair.go) is pure: these tests need no database.

func newFair(free int, limits map[string]int) *fair {
	return &fair{free: free, used: map[string]int{}, round: map[string]keyRound{}, nowUS: nowUS,
		limit: func(k string) int { return limits[k] }}
}

func tk(id int64, key string, cost int, queuedAgo time.Duration) *keyTicket {
	return &keyTicket{id: id, key: key, cost: cost, queuedUS: nowUS - queuedAgo.Microseconds(), threshold: 10 * time.Second}
}

func ids(ts []*keyTicket) []int64 {
	out := make([]int64, len(ts))
	for i, t := range ts {
		out[i] = t.id
	}
	return out
}

func TestFairGrantsOneKeyAfterAnotherNotTheLongestQueueFirst(t *testing.T) {
	f := newFair(4, nil)
	var waiting []*keyTicket
	for i := range 6 {
		waiting = append(waiting, tk(int64(1+i), "a", 1, time.Duration(10-i)*time.Millisecond))
	}
	waiting = append(waiting, tk(20, "b", 1, time.Millisecond), tk(30, "c", 1, 0))
	grants, held := f.plan(waiting)
	require.False(t, held)
	require.Equal(t, []int64{1, 20, 30, 2}, ids(grants), "a, b, c, then a again: round robin, first in first out within a")
}

func TestFairPassesATicketWhoseKeyIsFull(t *testing.T) {
	f := newFair(3, map[string]int{"a": 2})
	f.used["a"] = 2
	grants, _ := f.plan([]*keyTicket{tk(1, "a", 1, time.Second), tk(2, "b", 1, 0)})
	require.Equal(t, []int64{2}, ids(grants), "a is at its limit: b behind it is granted (work-conserving)")
	require.Equal(t, 2, f.free)
}

func TestFairPassesATicketTooLargeForTheFreeCapacity(t *testing.T) {
	f := newFair(2, nil)
	grants, _ := f.plan([]*keyTicket{tk(1, "a", 4, time.Second), tk(2, "b", 1, 0), tk(3, "c", 2, 0)})
	require.Equal(t, []int64{2}, ids(grants), "cost 4 does not fit 2; b then c's 2 does not fit what b left")
}

func TestFairRoundRobinIsByCost(t *testing.T) {
	f := newFair(12, nil)
	var waiting []*keyTicket
	for i := range 6 {
		waiting = append(waiting, tk(int64(10+i), "big", 3, time.Duration(20-i)*time.Millisecond), tk(int64(30+i), "small", 1, time.Duration(20-i)*time.Millisecond))
	}
	grants, _ := f.plan(waiting)
	served := map[string]int{}
	for _, g := range grants {
		served[g.key] += g.cost
	}
	require.Equal(t, map[string]int{"big": 6, "small": 6}, served, "equal shares of cost, not of grants")
}

func TestFairStarvingLargeTicketReservesTheFreedCapacity(t *testing.T) {
	big := tk(1, "big", 4, 11*time.Second) // waited longer than its 10 s threshold
	small := []*keyTicket{tk(2, "s1", 1, time.Second), tk(3, "s2", 1, time.Second)}
	for free := 1; free < 4; free++ {
		f := newFair(free, nil)
		grants, held := f.plan(append([]*keyTicket{big}, small...))
		require.Empty(t, grants, "free %d: nothing takes the capacity the large ticket waits for", free)
		require.True(t, held)
	}
	f := newFair(5, nil)
	grants, _ := f.plan(append([]*keyTicket{big}, small...))
	require.Equal(t, []int64{1, 2}, ids(grants), "it is granted first once it fits")

	young := tk(1, "big", 4, 9*time.Second)
	f = newFair(3, nil)
	grants, held := f.plan(append([]*keyTicket{young}, small...))
	require.Equal(t, []int64{2, 3}, ids(grants), "before its threshold it is passed")
	require.False(t, held)
}

func TestFairStarvingTicketOfAFullKeyHoldsOnlyItsKey(t *testing.T) {
	f := newFair(10, map[string]int{"k": 4})
	f.used["k"] = 2
	grants, held := f.plan([]*keyTicket{tk(1, "k", 3, 11*time.Second), tk(2, "k", 1, time.Second), tk(3, "other", 1, time.Second)})
	require.Equal(t, []int64{3}, ids(grants), "k's room is kept for its starving ticket; other keys go on")
	require.False(t, held)
}

func TestFairEqualCostsNeverStarve(t *testing.T) {
	// Cost-1 tickets that waited long do not jump the round robin: none is kept out by a smaller one.
	f := newFair(2, nil)
	grants, _ := f.plan([]*keyTicket{tk(1, "a", 1, time.Minute), tk(2, "a", 1, time.Minute), tk(3, "b", 1, 0)})
	require.Equal(t, []int64{1, 3}, ids(grants))
}

func TestFairHigherPriorityFirst(t *testing.T) {
	f := newFair(1, nil)
	low, high := tk(1, "a", 1, time.Second), tk(2, "b", 1, 0)
	high.priority = 5
	grants, _ := f.plan([]*keyTicket{low, high})
	require.Equal(t, []int64{2}, ids(grants))
}

// genFair draws a keyed task's state and waiters.
func genFair(t *rapid.T) (*fair, []*keyTicket, map[string]int) {
	keys := []string{"", "a", "b", "c", "d"}
	limits := map[string]int{}
	f := newFair(rapid.IntRange(0, 12).Draw(t, "free"), limits)
	if rapid.Bool().Draw(t, "unlimited") {
		f.free = unlimitedFree
	}
	for _, k := range keys {
		limits[k] = rapid.IntRange(0, 5).Draw(t, "limit "+k)
		f.used[k] = rapid.IntRange(0, 6).Draw(t, "used "+k)
		if rapid.Bool().Draw(t, "row "+k) {
			f.round[k] = keyRound{pass: rapid.Int64Range(0, 20).Draw(t, "pass "+k), grantedUS: rapid.Int64Range(0, nowUS).Draw(t, "granted "+k)}
		}
	}
	f.vtime = rapid.Int64Range(0, 20).Draw(t, "vtime")
	f.nowUS = nowUS + rapid.Int64Range(-60e6, 60e6).Draw(t, "clock jump")
	n := rapid.IntRange(0, 30).Draw(t, "tickets")
	var waiting []*keyTicket
	for i := range n {
		w := &keyTicket{id: int64(i + 1), key: rapid.SampledFrom(keys).Draw(t, "key"), cost: rapid.IntRange(1, 4).Draw(t, "cost"),
			priority: rapid.Int64Range(0, 2).Draw(t, "priority"), queuedUS: nowUS - rapid.Int64Range(-5e6, 30e6).Draw(t, "waited"),
			threshold: 10 * time.Second}
		waiting = append(waiting, w)
	}
	return f, waiting, limits
}

func TestFairPlanNeverExceedsALimitAndLeavesNoTicketThatFitsWaiting(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f, waiting, limits := genFair(t)
		free0, used0 := f.free, maps.Clone(f.used)
		grants, held := f.plan(waiting)

		granted := map[string]int{}
		total := 0
		for _, g := range grants {
			granted[g.key] += g.cost
			total += g.cost
		}
		if free0 != unlimitedFree && total > free0 {
			t.Fatalf("granted cost %d with %d free", total, free0)
		}
		for k, c := range granted {
			if l := limits[k]; l > 0 && used0[k]+c > l {
				t.Fatalf("key %q: %d in use + %d granted over its limit %d", k, used0[k], c, l)
			}
		}
		left := slices.DeleteFunc(slices.Clone(waiting), func(w *keyTicket) bool { return slices.Contains(grants, w) })
		reserving, blocked := f.reservations(left)
		if held {
			if reserving == nil || f.fits(reserving) {
				t.Fatalf("held for %v, which fits or is not reserving", reserving)
			}
			return
		}
		for _, w := range left {
			if b := blocked[w.key]; f.fits(w) && (b == nil || b == w) && f.free > 0 {
				t.Fatalf("ticket %d (key %q, cost %d) fits and waits: free %d, room %d", w.id, w.key, w.cost, f.free, f.room(w.key))
			}
		}
	})
}

// In a round of equal costs and equal priorities, no key is granted twice before every other
// key that still waits (and has room) is granted once.
func TestFairPlanIsRoundRobin(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		keys := rapid.IntRange(1, 6).Draw(t, "keys")
		f := newFair(rapid.IntRange(1, 40).Draw(t, "free"), nil)
		var waiting []*keyTicket
		pending := map[string]int{}
		for i := range rapid.IntRange(1, 40).Draw(t, "tickets") {
			k := fmt.Sprint(rapid.IntRange(0, keys-1).Draw(t, "key"))
			waiting = append(waiting, &keyTicket{id: int64(i + 1), key: k, cost: 1, queuedUS: nowUS - int64(i), threshold: time.Hour})
			pending[k]++
		}
		grants, _ := f.plan(waiting)
		since := map[string]bool{} // keys granted in the current round
		for _, g := range grants {
			if since[g.key] {
				for k, n := range pending {
					if n > 0 && !since[k] {
						t.Fatalf("key %s granted twice while %s (%d waiting) was not: %v", g.key, k, n, ids(grants))
					}
				}
				since = map[string]bool{}
			}
			since[g.key] = true
			pending[g.key]--
		}
	})
}
