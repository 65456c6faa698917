package checker

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskling-go/taskling/integration_test/ledger"
	"github.com/taskling-go/taskling/tokens"
)

// keyedHistory is a valid run of task "k" with limit 4, key limit 2 and key "big" limited to 4:
// keys a and b fill the task (a: 2, b: 1 + 1), a takes its 2 again as its first run ends, "big"
// takes all 4 once the others ended, and the sweep (exec 6, key "") takes one slot.
func keyedHistory() History {
	g := func(exec int64, key string, cost, granted, completed int) Grant {
		return Grant{Exec: exec, Task: "k", Host: "w1", Fence: exec, Key: key, Cost: cost, GrantedAt: at(granted), CompletedAt: at(completed),
			LastKeepAlive: at(granted), Threshold: threshold}
	}
	hold := func(gr Grant, stop int) Hold {
		return Hold{Exec: gr.Exec, Task: "k", Host: "w1", Fence: gr.Fence, Key: gr.Key, Cost: gr.Cost, ReturnedAt: gr.GrantedAt.Add(1000),
			StopAt: at(stop), Reason: ledger.ReasonCompleted, Result: ledger.ResultOK}
	}
	grants := []Grant{g(1, "a", 2, 0, 100), g(2, "b", 1, 10, 200), g(3, "b", 1, 20, 150), g(4, "a", 2, 100, 300), g(5, "big", 4, 300, 400), g(6, "", 1, 500, 600)}
	stops := []int{90, 140, 140, 290, 390, 590}
	holds := make([]Hold, len(grants))
	for i, gr := range grants {
		holds[i] = hold(gr, stops[i])
	}
	free := func() tokens.List {
		var l tokens.List
		for range 4 {
			l.Tokens = append(l.Tokens, tokens.Token{ID: uuid.New(), Status: tokens.Available})
		}
		return l
	}
	return History{
		InitialLimit: map[string]int{"k": 4},
		KeyLimits:    map[string]KeyLimit{"k": {Default: 2, Named: map[string]int{"big": 4}}},
		Grants:       grants,
		Holds:        holds,
		Kills:        map[string]time.Time{},
		Before:       map[string]TaskState{"k": {Tokens: free(), Fence: 5}},
		After:        map[string]TaskState{"k": {Tokens: free(), Fence: 6}},
		LeaseTTL:     1500 * time.Millisecond,
		Grace:        time.Second,
	}
}

func TestKeyedHistoryPasses(t *testing.T) {
	r := Check(keyedHistory())
	if len(r.Violations) > 0 {
		t.Fatalf("violations on a clean keyed history: %v", r.Violations)
	}
	if r.MaxCost["k"] != 4 || r.MaxKeyCost["k"] != 4 || r.KeyGrants["k"] != 6 || r.MaxHolders["k"] != 3 {
		t.Fatalf("max cost %d, max key cost %d, key grants %d, max holders %d", r.MaxCost["k"], r.MaxKeyCost["k"], r.KeyGrants["k"], r.MaxHolders["k"])
	}
}

// TestKeyRulesCatch breaks the keyed history in one way per case and expects the checker to say so.
func TestKeyRulesCatch(t *testing.T) {
	cases := []struct {
		name  string
		check string
		want  string
		edit  func(h *History)
	}{
		{"costs over the task's limit (holders)", "a", "3 holders of cost 5", func(h *History) {
			h.Grants[2].Cost, h.Holds[2].Cost = 2, 2
		}},
		{"costs over the task's limit (database)", "p", "not ended cost 5, limit in force 4", func(h *History) {
			h.Grants[2].Cost, h.Holds[2].Cost = 2, 2
		}},
		{"a key over its limit", "p", `key "b" holds cost 4, its limit 2`, func(h *History) {
			h.Grants[0].Key, h.Holds[0].Key = "b", "b"
		}},
		{"a named key over its own limit", "p", `key "big" holds cost 4, its limit 3`, func(h *History) {
			h.KeyLimits["k"].Named["big"] = 3
		}},
		{"the empty key under the key limit", "p", `key "" holds cost 3, its limit 2`, func(h *History) {
			h.Grants = append(h.Grants, Grant{Exec: 7, Task: "k", Host: "w2", Fence: 7, Cost: 2, GrantedAt: at(550), CompletedAt: at(700),
				LastKeepAlive: at(550), Threshold: threshold})
		}},
		{"a slot the database still counted, its holder gone", "p", "not ended cost 5, limit in force 4", func(h *History) {
			h.Grants[2].CompletedAt = at(2000) // its holder stopped at 140; "big" is granted at 300
		}},
		{"a holder saw another cost", "p", `holder saw key "b" cost 2, the database recorded key "b" cost 1`, func(h *History) {
			h.Holds[1].Cost = 2
		}},
		{"a holder saw another key", "p", `holder saw key "c" cost 1`, func(h *History) {
			h.Holds[1].Key = "c"
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := keyedHistory()
			c.edit(&h)
			requireViolation(t, Check(h), c.check, c.want)
		})
	}
}

// Without key limits, keys are not judged: only the task's limit binds their costs.
func TestKeysWithoutKeyLimits(t *testing.T) {
	h := keyedHistory()
	h.Grants[0].Key, h.Holds[0].Key = "b", "b"
	h.KeyLimits = nil
	if r := Check(h); len(r.Violations) > 0 || r.KeyGrants["k"] != 0 {
		t.Fatalf("violations %v, key grants %d", r.Violations, r.KeyGrants["k"])
	}
}
