package tokens_test

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/google/uuid"
	"pgregory.net/rapid"

	"github.com/taskling-go/taskling/tokens"
)

// model runs random Adjust/Grant/Return sequences against a list while executions die and
// come back, and checks the list against what the executions themselves believe.
type model struct {
	list     tokens.List
	limit    int                 // the last limit given to Adjust; 0 before the first
	alive    map[int64]bool      // liveness, changed at will by kill and revive
	granted  map[int64]uuid.UUID // every execution ever granted, with the token id it got
	holding  map[int64]bool      // executions entitled to a slot: granted, not returned, not reclaimed
	nextExec int64
	nextID   uint64
}

func (m *model) isAlive(id int64) bool { return m.alive[id] }

func (m *model) newID() uuid.UUID {
	m.nextID++
	return uuid.UUID{0xbb, 8: byte(m.nextID >> 56), byte(m.nextID >> 48), byte(m.nextID >> 40),
		byte(m.nextID >> 32), byte(m.nextID >> 24), byte(m.nextID >> 16), byte(m.nextID >> 8), byte(m.nextID)}
}

func find(l tokens.List, id uuid.UUID) (tokens.Token, bool) {
	i := slices.IndexFunc(l.Tokens, func(t tokens.Token) bool { return t.ID == id })
	if i < 0 {
		return tokens.Token{}, false
	}
	return l.Tokens[i], true
}

func count(l tokens.List, keep func(tokens.Token) bool) int {
	n := 0
	for _, t := range l.Tokens {
		if keep(t) {
			n++
		}
	}
	return n
}

func isHolding(t tokens.Token) bool { return t.Status == tokens.Held || t.Status == tokens.Retiring }

func (m *model) adjust(t *rapid.T) {
	limit := rapid.SampledFrom([]int{-1, 1, 2, 3, 4, 5, 6}).Draw(t, "limit")
	before := m.list
	beforeText := before.String()
	fromShared := before.IsUnlimited() || len(before.Tokens) == 0
	var adopt []int64
	if fromShared { // as the caller does: the live executions that ran under the unlimited token
		for e := range m.holding {
			if m.alive[e] {
				adopt = append(adopt, e)
			}
		}
		slices.Sort(adopt)
	}

	after, reclaimed, err := before.Adjust(limit, m.isAlive, adopt, m.newID)
	if err != nil {
		t.Fatalf("Adjust(%d): %v", limit, err)
	}
	if before.String() != beforeText {
		t.Fatalf("Adjust mutated its input")
	}
	for _, e := range reclaimed {
		if m.alive[e] || !m.holding[e] {
			t.Fatalf("Adjust(%d) reclaimed exec %d (alive %v, holding %v)", limit, e, m.alive[e], m.holding[e])
		}
		delete(m.holding, e)
	}
	if fromShared && limit != -1 {
		for e := range m.holding {
			if !m.alive[e] { // dead, so not adopted: its slot is gone
				delete(m.holding, e)
			}
		}
	}
	m.list, m.limit = after, limit

	if limit == -1 {
		if !after.IsUnlimited() || (before.IsUnlimited() && !slices.Equal(before.Tokens, after.Tokens)) {
			t.Fatalf("Adjust(-1): %v -> %v", before.Tokens, after.Tokens)
		}
	} else {
		// The list is exactly the limit plus the live holders it could not evict.
		inUse := after.InUse(m.isAlive)
		retiring := count(after, func(t tokens.Token) bool { return t.Status == tokens.Retiring })
		if after.Limit() != limit || len(after.Tokens) != max(limit, inUse) || retiring != len(after.Tokens)-limit {
			t.Fatalf("Adjust(%d): limit %d, %d tokens, %d retiring, %d in use: %v",
				limit, after.Limit(), len(after.Tokens), retiring, inUse, after.Tokens)
		}
		if retiring > 0 && inUse != len(after.Tokens) {
			t.Fatalf("Adjust(%d) left free or dead tokens next to retiring ones: %v", limit, after.Tokens)
		}
	}
	// Right after Adjust a request is denied only when the limit is really full.
	_, g := after.Grant(m.nextExec+1, m.isAlive)
	if want := limit == -1 || after.InUse(m.isAlive) < limit; g.Granted != want {
		t.Fatalf("after Adjust(%d), Grant = %v, want %v: %v", limit, g.Granted, want, after.Tokens)
	}
}

func (m *model) grant(t *rapid.T) {
	m.nextExec++
	e := m.nextExec
	m.alive[e] = true
	before := m.list
	after, g := before.Grant(e, m.isAlive)
	if !g.Granted {
		if !slices.Equal(before.Tokens, after.Tokens) {
			t.Fatalf("denied Grant changed the list")
		}
		return
	}
	old, ok := find(before, g.TokenID)
	switch {
	case !ok:
		t.Fatalf("granted token %v is not in the list", g.TokenID)
	case old.Status == tokens.Retiring:
		t.Fatalf("granted retiring token %v", old)
	case old.Status == tokens.Held && m.alive[old.Grantee]:
		t.Fatalf("granted token %v of a live holder", old)
	case old.Status == tokens.Held && g.Reclaimed != old.Grantee, old.Status != tokens.Held && g.Reclaimed != 0:
		t.Fatalf("granted %v, reported reclaimed %d", old, g.Reclaimed)
	}
	// Only the granted token changed.
	for i, t2 := range after.Tokens {
		if t2.ID == g.TokenID {
			if t2.Grantee != e || (t2.Status != tokens.Held && t2.Status != tokens.Unlimited) {
				t.Fatalf("granted token is %v", t2)
			}
		} else if t2 != before.Tokens[i] {
			t.Fatalf("Grant changed another token: %v -> %v", before.Tokens[i], t2)
		}
	}
	// Every slot holder fits in the limit, even those judged dead but not reclaimed, so none
	// of them coming back can take the task over its limit.
	if !after.IsUnlimited() {
		if n := count(after, isHolding); n > m.limit {
			t.Fatalf("Grant made %d holders with limit %d: %v", n, m.limit, after.Tokens)
		}
	}
	if g.Reclaimed != 0 {
		delete(m.holding, g.Reclaimed)
	}
	m.list, m.granted[e], m.holding[e] = after, g.TokenID, true
}

func (m *model) ret(t *rapid.T) {
	execs := slices.Sorted(maps.Keys(m.granted))
	var tok uuid.UUID
	var e int64
	switch rapid.IntRange(0, 2).Draw(t, "kind") {
	case 0: // an execution returns what it was granted: its own, reclaimed or already returned
		if len(execs) == 0 {
			t.Skip("nothing granted yet")
		}
		e = rapid.SampledFrom(execs).Draw(t, "exec")
		tok = m.granted[e]
	case 1: // a token of the list, returned by anyone
		if len(m.list.Tokens) == 0 {
			t.Skip("no tokens")
		}
		tok = rapid.SampledFrom(m.list.Tokens).Draw(t, "token").ID
		e = rapid.Int64Range(0, m.nextExec+1).Draw(t, "exec")
	default: // an unknown token
		tok = uuid.UUID{0xcc, 15: rapid.Byte().Draw(t, "token")}
		e = rapid.Int64Range(0, m.nextExec+1).Draw(t, "exec")
	}

	before := m.list
	after, ok := before.Return(tok, e)
	want := before.IsUnlimited()
	if !want && m.holding[e] {
		mine := slices.IndexFunc(before.Tokens, func(t tokens.Token) bool { return isHolding(t) && t.Grantee == e })
		if mine < 0 {
			t.Fatalf("holder %d has no token: %v", e, before.Tokens)
		}
		_, known := find(before, tok)
		want = before.Tokens[mine].ID == tok || !known // an adopted slot has a new id
	}
	if ok != want {
		t.Fatalf("Return(%v, %d) = %v, want %v: %v", tok, e, ok, want, before.Tokens)
	}
	if !ok || before.IsUnlimited() {
		if !slices.Equal(before.Tokens, after.Tokens) {
			t.Fatalf("Return(%v, %d) changed the list", tok, e)
		}
	}
	if ok {
		if after.Limit() != before.Limit() {
			t.Fatalf("Return changed the limit: %v -> %v", before.Tokens, after.Tokens)
		}
		delete(m.holding, e)
	}
	m.list = after
}

func (m *model) kill(t *rapid.T) {
	var live []int64
	for e := range m.granted {
		if m.alive[e] {
			live = append(live, e)
		}
	}
	if len(live) == 0 {
		t.Skip("no live execution")
	}
	slices.Sort(live)
	m.alive[rapid.SampledFrom(live).Draw(t, "victim")] = false
}

// revive brings back an execution judged dead (a paused process resuming); whether its slot
// survived depends on whether it was reclaimed meanwhile.
func (m *model) revive(t *rapid.T) {
	var dead []int64
	for e := range m.granted {
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

func (m *model) check(t *rapid.T) {
	l := m.list
	// The list round-trips through its stored form.
	parsed, err := tokens.Parse(l.String())
	if err != nil || !slices.Equal(parsed.Tokens, l.Tokens) {
		t.Fatalf("round trip of %q: %v, %v", l.String(), parsed.Tokens, err)
	}
	if l.IsUnlimited() {
		return
	}
	// Exactly the executions entitled to a slot hold one token each: nothing Adjust or Grant
	// did removed or re-granted the slot of a holder it did not report reclaimed.
	grantees := l.Grantees()
	slices.Sort(grantees)
	if want := slices.Sorted(maps.Keys(m.holding)); !slices.Equal(grantees, want) {
		t.Fatalf("grantees %v, model holders %v: %v", grantees, want, l.Tokens)
	}
	// Between adjustments, grants and returns keep the limit.
	if len(l.Tokens) > 0 && l.Limit() != m.limit {
		t.Fatalf("Limit() = %d after Adjust(%d): %v", l.Limit(), m.limit, l.Tokens)
	}
}

func TestOperationsKeepSlotsWithinLimitAndNeverEvictLiveHolders(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := &model{alive: map[int64]bool{}, granted: map[int64]uuid.UUID{}, holding: map[int64]bool{}}
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

var genUUID = rapid.Make[uuid.UUID]()

var genList = rapid.Custom(func(t *rapid.T) tokens.List {
	if rapid.Bool().Draw(t, "unlimited") {
		return tokens.List{Tokens: []tokens.Token{{ID: genUUID.Draw(t, "id"), Status: tokens.Unlimited,
			Grantee: rapid.Int64Min(0).Draw(t, "grantee")}}}
	}
	ts := rapid.SliceOfDistinct(rapid.Custom(func(t *rapid.T) tokens.Token {
		return tokens.Token{
			ID:      genUUID.Draw(t, "id"),
			Status:  rapid.SampledFrom([]tokens.Status{tokens.Held, tokens.Available, tokens.Retiring}).Draw(t, "status"),
			Grantee: rapid.Int64Min(0).Draw(t, "grantee"),
		}
	}), func(t tokens.Token) uuid.UUID { return t.ID }).Draw(t, "tokens")
	return tokens.List{Tokens: ts}
})

func TestStringParseRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := genList.Draw(t, "list")
		parsed, err := tokens.Parse(l.String())
		if err != nil || !slices.Equal(parsed.Tokens, l.Tokens) {
			t.Fatalf("round trip of %q: %v, %v", l.String(), parsed.Tokens, err)
		}
	})
}

// Lists spliced from valid tokens and noise either parse and round-trip or fail with a
// FormatError; they never panic.
func TestParseRejectsOrRoundTripsSplicedText(t *testing.T) {
	piece := rapid.OneOf(
		rapid.Custom(func(t *rapid.T) string { return genList.Draw(t, "list").String() }),
		rapid.SampledFrom([]string{"|", ",", ":", "I:", "S:", "G:", "S:3", "G:-1", "0", " ", "zz", "-"}),
	)
	rapid.Check(t, func(t *rapid.T) {
		s := ""
		for _, p := range rapid.SliceOfN(piece, 1, 6).Draw(t, "pieces") {
			s += p
		}
		checkParse(t, s)
	})
}

// checkParse is the contract shared with FuzzParse.
func checkParse(t interface{ Fatalf(string, ...any) }, s string) {
	l, err := tokens.Parse(s)
	if err != nil {
		var fe *tokens.FormatError
		if !errors.As(err, &fe) || !errors.Is(err, tokens.ErrMalformed) || !slices.Contains([]string{"I", "S", "G", "token"}, fe.Field) || fe.Reason == "" {
			t.Fatalf("Parse(%q): bad error %#v", s, err)
		}
		return
	}
	again, err := tokens.Parse(l.String())
	if err != nil || !slices.Equal(again.Tokens, l.Tokens) {
		t.Fatalf("Parse(%q) = %v, but its String %q parses to %v, %v", s, l.Tokens, l.String(), again.Tokens, err)
	}
}
