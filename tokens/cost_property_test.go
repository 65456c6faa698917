package tokens_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/google/uuid"
	"pgregory.net/rapid"

	"github.com/taskling-go/taskling/tokens"
)

// costModel runs random Adjust/GrantN/Return sequences in which every execution takes a cost of
// 1 to 4 slots, and checks that a holder always holds exactly its cost, that the held slots never
// exceed the limit after a grant, and that a dead holder is reclaimed whole.
type costModel struct {
	list     tokens.List
	limit    int
	alive    map[int64]bool
	cost     map[int64]int
	first    map[int64]uuid.UUID // the first token each execution was granted
	holding  map[int64]bool
	nextExec int64
	nextID   uint64
}

func (m *costModel) isAlive(id int64) bool { return m.alive[id] }

func (m *costModel) newID() uuid.UUID {
	m.nextID++
	return uuid.UUID{0xdd, 8: byte(m.nextID >> 8), byte(m.nextID)}
}

func (m *costModel) adjust(t *rapid.T) {
	limit := rapid.SampledFrom([]int{-1, 1, 2, 3, 4, 6, 8}).Draw(t, "limit")
	var adopt []int64
	if m.list.IsUnlimited() || len(m.list.Tokens) == 0 {
		for e := range m.holding {
			if m.alive[e] {
				adopt = append(adopt, e)
			}
		}
		slices.Sort(adopt)
	}
	after, reclaimed, err := m.list.AdjustCosts(limit, m.isAlive, adopt, func(id int64) int { return m.cost[id] }, m.newID)
	if err != nil {
		t.Fatalf("AdjustCosts(%d): %v", limit, err)
	}
	for _, e := range reclaimed {
		if m.alive[e] || !m.holding[e] {
			t.Fatalf("AdjustCosts(%d) reclaimed exec %d (alive %v, holding %v)", limit, e, m.alive[e], m.holding[e])
		}
		delete(m.holding, e)
	}
	if len(adopt) > 0 || m.list.IsUnlimited() || len(m.list.Tokens) == 0 {
		for e := range m.holding {
			if !m.alive[e] && limit != -1 {
				delete(m.holding, e)
			}
		}
	}
	m.list, m.limit = after, limit
	if limit != -1 {
		retiring := count(after, func(t tokens.Token) bool { return t.Status == tokens.Retiring })
		if after.Limit() != limit || retiring != len(after.Tokens)-limit && len(after.Tokens) > limit {
			t.Fatalf("AdjustCosts(%d): limit %d, %d retiring: %v", limit, after.Limit(), retiring, after.Tokens)
		}
	}
}

func (m *costModel) grant(t *rapid.T) {
	m.nextExec++
	e := m.nextExec
	c := rapid.IntRange(1, 4).Draw(t, "cost")
	m.alive[e], m.cost[e] = true, c
	before := m.list
	after, g := before.GrantN(e, c, m.isAlive)
	if !g.Granted {
		if !slices.Equal(before.Tokens, after.Tokens) {
			t.Fatalf("denied GrantN changed the list")
		}
		// Denied only when the live holders leave less than c, or the list is over its limit.
		if !before.IsUnlimited() && len(before.Tokens) > 0 && before.Limit() == len(before.Tokens) && before.Limit()-before.InUse(m.isAlive) >= c {
			t.Fatalf("GrantN(%d) denied with %d of %d in use: %v", c, before.InUse(m.isAlive), before.Limit(), before.Tokens)
		}
		return
	}
	for _, r := range g.Reclaimed {
		if m.alive[r] || !m.holding[r] {
			t.Fatalf("GrantN reclaimed %d (alive %v, holding %v)", r, m.alive[r], m.holding[r])
		}
		delete(m.holding, r)
	}
	if !after.IsUnlimited() {
		if len(g.TokenIDs) != c {
			t.Fatalf("GrantN(%d) granted %d tokens", c, len(g.TokenIDs))
		}
		if n := count(after, isHolding); n > m.limit {
			t.Fatalf("GrantN made %d held slots with limit %d: %v", n, m.limit, after.Tokens)
		}
	}
	m.list, m.first[e], m.holding[e] = after, g.TokenIDs[0], true
}

func (m *costModel) ret(t *rapid.T) {
	execs := slices.Sorted(maps.Keys(m.first))
	if len(execs) == 0 {
		t.Skip("nothing granted yet")
	}
	e := rapid.SampledFrom(execs).Draw(t, "exec")
	before := m.list
	after, ok := before.Return(m.first[e], e)
	if want := before.IsUnlimited() || m.holding[e]; ok != want {
		t.Fatalf("Return(%d) = %v, want %v: %v", e, ok, want, before.Tokens)
	}
	if ok {
		delete(m.holding, e)
		if slices.ContainsFunc(after.Tokens, func(t tokens.Token) bool { return isHolding(t) && t.Grantee == e }) {
			t.Fatalf("Return(%d) left some of its tokens: %v", e, after.Tokens)
		}
	}
	m.list = after
}

func (m *costModel) kill(t *rapid.T) {
	live := slices.Sorted(maps.Keys(m.holding))
	if len(live) == 0 {
		t.Skip("no holder")
	}
	m.alive[rapid.SampledFrom(live).Draw(t, "victim")] = false
}

func (m *costModel) revive(t *rapid.T) {
	var dead []int64
	for e := range m.first {
		if !m.alive[e] {
			dead = append(dead, e)
		}
	}
	if len(dead) == 0 {
		t.Skip("no dead execution")
	}
	slices.Sort(dead)
	m.alive[rapid.SampledFrom(dead).Draw(t, "revived")] = true
}

func (m *costModel) check(t *rapid.T) {
	l := m.list
	if l.IsUnlimited() {
		return
	}
	costs := l.Costs()
	if got, want := slices.Sorted(maps.Keys(costs)), slices.Sorted(maps.Keys(m.holding)); !slices.Equal(got, want) {
		t.Fatalf("grantees %v, model holders %v: %v", got, want, l.Tokens)
	}
	for e, n := range costs {
		if n != m.cost[e] {
			t.Fatalf("execution %d holds %d tokens, its cost is %d: %v", e, n, m.cost[e], l.Tokens)
		}
	}
	if len(l.Tokens) > 0 && l.Limit() != m.limit {
		t.Fatalf("Limit() = %d after Adjust(%d)", l.Limit(), m.limit)
	}
}

func TestCostsAreHeldWholeAndWithinTheLimit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := &costModel{alive: map[int64]bool{}, cost: map[int64]int{}, first: map[int64]uuid.UUID{}, holding: map[int64]bool{}}
		t.Repeat(map[string]func(*rapid.T){
			"adjust": m.adjust,
			"grant":  m.grant,
			"return": m.ret,
			"kill":   m.kill,
			"revive": m.revive,
			"":       m.check,
		})
	})
}
