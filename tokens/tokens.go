package tokens

import (
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
)

// Status is the state of one token. The numbers are stored; never renumber them.
type Status int

const (
	Held      Status = 0 // granted to Grantee
	Available Status = 1
	Retiring  Status = 2 // held, but removed (not made available) when returned or when its holder is dead: the limit was lowered below the number of live holders
	Unlimited Status = 3 // the one shared token of an unlimited task
)

func (s Status) String() string {
	switch s {
	case Held:
		return "held"
	case Available:
		return "available"
	case Retiring:
		return "retiring"
	case Unlimited:
		return "unlimited"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Token is one slot of a task.
type Token struct {
	ID      uuid.UUID
	Status  Status
	Grantee int64 // execution id of the last grantee; 0 = none
}

// holds reports whether the token is a slot in use by its grantee.
func (t Token) holds() bool { return t.Status == Held || t.Status == Retiring }

// List is a task's tokens. Order matters and is preserved: operations pick tokens in list
// order, and slots past the limit are the ones that retire.
type List struct{ Tokens []Token }

// Liveness reports whether an execution still holds its slot (false also for missing,
// completed or unknown executions).
type Liveness func(execID int64) bool

// ErrInvalidLimit is wrapped by Adjust when the limit is neither -1 (unlimited) nor at least 1.
var ErrInvalidLimit = errors.New("tokens: invalid concurrency limit")

// errDuplicateID means the caller's newID function repeated itself; storing such a list would
// make it unparseable.
var errDuplicateID = errors.New("tokens: newID returned a token id already in the list")

// Adjust reconciles the list to limit: -1 for unlimited, or at least 1 (anything else is an
// error wrapping ErrInvalidLimit).
//
// On a limited list it first drops Retiring tokens of dead holders, then shrinks by removing
// Available tokens, then tokens of dead Held holders, and marks the live holders' tokens past
// the limit Retiring rather than evict them; it grows by re-admitting Retiring tokens and then
// appending Available ones. Afterwards Limit() == limit and the list has max(limit, live
// holders) tokens.
//
// On an empty or Unlimited list, a limit adopts the executions in adopt (those still running
// under the unlimited token, in the order given; ids that are not alive, zero or repeated are
// skipped) as Held tokens, the ones beyond the limit as Retiring, and fills up with Available
// tokens. Limit -1 turns any list that is not already one Unlimited token into one (Grantee 0):
// live holders simply share it from then on.
//
// It returns the new list and the dead holders whose tokens were removed, so the caller can
// mark them reclaimed. newID makes the ids of new tokens (nil means uuid.New).
func (l List) Adjust(limit int, alive Liveness, adopt []int64, newID func() uuid.UUID) (List, []int64, error) {
	return l.AdjustCosts(limit, alive, adopt, nil, newID)
}

// AdjustCosts is Adjust where an adopted execution takes cost(id) tokens (nil: 1 each), the
// first ones Held up to the limit and the rest Retiring. A holder of several tokens is reclaimed
// whole: when one of its tokens is removed, the others become Available (and may be removed in
// turn), so a dead holder never keeps part of its slots.
func (l List) AdjustCosts(limit int, alive Liveness, adopt []int64, cost func(int64) int, newID func() uuid.UUID) (List, []int64, error) {
	if limit != -1 && limit < 1 {
		return l, nil, fmt.Errorf("%w: %d (want -1 for unlimited, or at least 1)", ErrInvalidLimit, limit)
	}
	if newID == nil {
		newID = uuid.New
	}
	used := make(map[uuid.UUID]bool, len(l.Tokens)+max(limit, len(adopt)))
	for _, t := range l.Tokens {
		used[t.ID] = true
	}
	var idErr error
	fresh := func(s Status, grantee int64) Token {
		id := newID()
		if used[id] {
			idErr = errDuplicateID
		}
		used[id] = true
		return Token{ID: id, Status: s, Grantee: grantee}
	}

	var out []Token
	var reclaimed []int64
	switch {
	case limit == -1:
		if l.IsUnlimited() {
			return l, nil, nil
		}
		for _, t := range l.Tokens {
			if t.holds() && t.Grantee != 0 && !alive(t.Grantee) && !slices.Contains(reclaimed, t.Grantee) {
				reclaimed = append(reclaimed, t.Grantee)
			}
		}
		out = []Token{fresh(Unlimited, 0)}

	case len(l.Tokens) == 0 || l.hasUnlimited():
		seen := make(map[int64]bool, len(adopt))
		for _, id := range adopt {
			if id <= 0 || seen[id] || !alive(id) {
				continue // adopting a dead execution would only make a free slot look busy
			}
			seen[id] = true
			n := 1
			if cost != nil {
				n = max(cost(id), 1)
			}
			for range n {
				s := Held
				if len(out) >= limit {
					s = Retiring
				}
				out = append(out, fresh(s, id))
			}
		}
		for len(out) < limit {
			out = append(out, fresh(Available, 0))
		}

	default:
		out = make([]Token, 0, max(len(l.Tokens), limit))
		dead := map[int64]bool{} // holders with a Retiring token that are dead: reclaimed whole
		for _, t := range l.Tokens {
			if t.Status == Retiring && !alive(t.Grantee) {
				if !dead[t.Grantee] {
					reclaimed = appendNonZero(reclaimed, t.Grantee)
				}
				dead[t.Grantee] = true
				continue
			}
			out = append(out, t)
		}
		freeTokensOf(out, dead)
		out, _ = removeFirst(out, len(out)-limit, func(t Token) bool { return t.Status == Available })
		for len(out) > limit {
			i := slices.IndexFunc(out, func(t Token) bool { return t.Status == Held && !alive(t.Grantee) })
			if i < 0 {
				break
			}
			reclaimed = appendNonZero(reclaimed, out[i].Grantee)
			freeTokensOf(out, map[int64]bool{out[i].Grantee: true})
			out, _ = removeFirst(out, len(out)-limit, func(t Token) bool { return t.Status == Available })
		}
		for len(out) < limit {
			out = append(out, fresh(Available, 0))
		}
		settleRetiring(out, len(out)-limit)
	}
	if idErr != nil {
		return l, nil, idErr
	}
	return List{Tokens: out}, reclaimed, nil
}

// freeTokensOf makes the Held tokens of the holders in gone Available (their Retiring ones are
// already dropped): a holder is reclaimed whole.
func freeTokensOf(ts []Token, gone map[int64]bool) {
	if len(gone) == 0 {
		return
	}
	for i := range ts {
		if ts[i].Status == Held && gone[ts[i].Grantee] {
			ts[i].Status = Available
		}
	}
}

// removeFirst removes up to n tokens matching drop, in list order.
func removeFirst(ts []Token, n int, drop func(Token) bool) (kept, dropped []Token) {
	kept = ts[:0]
	for _, t := range ts {
		if len(dropped) < n && drop(t) {
			dropped = append(dropped, t)
			continue
		}
		kept = append(kept, t)
	}
	return kept, dropped
}

// settleRetiring makes exactly surplus held tokens Retiring: the surplus re-admits the first
// Retiring tokens when it shrank and retires the last Held ones when it grew. When surplus > 0,
// Adjust has already removed every available and dead token, so only live holders are left.
func settleRetiring(ts []Token, surplus int) {
	retiring := 0
	for _, t := range ts {
		if t.Status == Retiring {
			retiring++
		}
	}
	for i := 0; i < len(ts) && retiring > surplus; i++ {
		if ts[i].Status == Retiring {
			ts[i].Status = Held
			retiring--
		}
	}
	for i := len(ts) - 1; i >= 0 && retiring < surplus; i-- {
		if ts[i].Status == Held {
			ts[i].Status = Retiring
			retiring++
		}
	}
}

func appendNonZero(ids []int64, id int64) []int64 {
	if id == 0 {
		return ids
	}
	return append(ids, id)
}

// GrantResult is the outcome of Grant.
type GrantResult struct {
	Granted   bool
	TokenID   uuid.UUID
	Reclaimed int64 // the dead holder whose token was taken; 0 if the token was available
}

// Grant gives execID (a positive execution id) a slot: the first Available token, else the
// Unlimited token (which stays Unlimited and records execID as its grantee), else the first
// Held token whose holder is dead (reported in Reclaimed). Retiring tokens are never granted,
// and a limited list that still has Retiring tokens denies every request: it is over its limit
// until they are returned or Adjust drops or re-admits them.
func (l List) Grant(execID int64, alive Liveness) (List, GrantResult) {
	out, g := l.GrantN(execID, 1, alive)
	if !g.Granted {
		return out, GrantResult{}
	}
	res := GrantResult{Granted: true, TokenID: g.TokenIDs[0]}
	if len(g.Reclaimed) > 0 {
		res.Reclaimed = g.Reclaimed[0]
	}
	return out, res
}

// GrantNResult is the outcome of GrantN.
type GrantNResult struct {
	Granted bool
	// TokenIDs are the tokens granted, in list order: the first is the one an execution row
	// names. An unlimited list grants its one token.
	TokenIDs []uuid.UUID
	// Reclaimed are the dead holders whose tokens were taken (every token of each).
	Reclaimed []int64
}

// GrantN gives execID n slots (a cost of n), all or none: Available tokens first, in list order,
// then, while that is not enough, every token of the first dead holder (so a dead holder's
// tokens go together). On an unlimited list it grants the shared token, as Grant does. Like
// Grant, it denies every request while the list has Retiring tokens.
func (l List) GrantN(execID int64, n int, alive Liveness) (List, GrantNResult) {
	switch {
	case execID <= 0 || n < 1:
		return l, GrantNResult{}
	case l.IsUnlimited():
		out := l.clone()
		out.Tokens[0].Grantee = execID
		return out, GrantNResult{Granted: true, TokenIDs: []uuid.UUID{out.Tokens[0].ID}}
	case n > len(l.Tokens) || slices.ContainsFunc(l.Tokens, func(t Token) bool { return t.Status == Retiring }):
		return l, GrantNResult{}
	}
	out := l.clone()
	var res GrantNResult
	for count(out.Tokens, Available) < n {
		i := slices.IndexFunc(out.Tokens, func(t Token) bool { return t.Status == Held && !alive(t.Grantee) })
		if i < 0 {
			return l, GrantNResult{}
		}
		res.Reclaimed = append(res.Reclaimed, out.Tokens[i].Grantee)
		freeTokensOf(out.Tokens, map[int64]bool{out.Tokens[i].Grantee: true})
	}
	for i := range out.Tokens {
		if len(res.TokenIDs) == n {
			break
		}
		if t := &out.Tokens[i]; t.Status == Available {
			t.Status, t.Grantee = Held, execID
			res.TokenIDs = append(res.TokenIDs, t.ID)
		}
	}
	res.Granted = true
	return out, res
}

func count(ts []Token, s Status) int {
	n := 0
	for _, t := range ts {
		if t.Status == s {
			n++
		}
	}
	return n
}

// Return gives back the slots execID holds and reports whether execID still held them; false
// means they were reclaimed or removed, and the caller reports the lease as lost.
//
// The token tokenID is checked: it must be Held or Retiring with Grantee execID. If tokenID is no
// longer in the list, a Held or Retiring token granted to execID is checked instead: switching
// from unlimited to a limit gives adopted executions new token ids. Then every token execID holds
// goes back (a cost of several slots returns them all): Held ones become Available, Retiring ones
// are removed. Returning to an Unlimited list always succeeds and changes nothing, also when
// tokenID vanished because the list became unlimited.
func (l List) Return(tokenID uuid.UUID, execID int64) (List, bool) {
	if l.IsUnlimited() {
		return l, true
	}
	i := slices.IndexFunc(l.Tokens, func(t Token) bool { return t.ID == tokenID })
	if i < 0 {
		i = slices.IndexFunc(l.Tokens, func(t Token) bool { return t.holds() && t.Grantee == execID })
	}
	if execID <= 0 || i < 0 || !l.Tokens[i].holds() || l.Tokens[i].Grantee != execID {
		return l, false
	}
	out := List{Tokens: make([]Token, 0, len(l.Tokens))}
	for _, t := range l.Tokens {
		switch {
		case !t.holds() || t.Grantee != execID:
		case t.Status == Retiring:
			continue
		default:
			t.Status = Available
		}
		out.Tokens = append(out.Tokens, t)
	}
	return out, true
}

// Grantees returns the non-zero grantees of Held and Retiring tokens, in list order, each once
// (a holder of several tokens appears at its first).
func (l List) Grantees() []int64 {
	var ids []int64
	seen := make(map[int64]bool, len(l.Tokens))
	for _, t := range l.Tokens {
		if t.holds() && t.Grantee != 0 && !seen[t.Grantee] {
			seen[t.Grantee] = true
			ids = append(ids, t.Grantee)
		}
	}
	return ids
}

// Costs returns, for each grantee of Held and Retiring tokens, how many it holds.
func (l List) Costs() map[int64]int {
	out := map[int64]int{}
	for _, t := range l.Tokens {
		if t.holds() && t.Grantee != 0 {
			out[t.Grantee]++
		}
	}
	return out
}

// IsUnlimited reports whether the list is the single shared token of an unlimited task.
func (l List) IsUnlimited() bool { return len(l.Tokens) == 1 && l.Tokens[0].Status == Unlimited }

// Limit returns -1 for an unlimited list, else the number of Held and Available tokens (0 for
// the empty list). It stays at the limit last given to Adjust until the next Adjust.
func (l List) Limit() int {
	if l.IsUnlimited() {
		return -1
	}
	n := 0
	for _, t := range l.Tokens {
		if t.Status == Held || t.Status == Available {
			n++
		}
	}
	return n
}

// InUse returns the number of Held and Retiring tokens whose holder is alive. It is 0 for an
// unlimited list, whose shared token does not record its holders.
func (l List) InUse(alive Liveness) int {
	n := 0
	for _, t := range l.Tokens {
		if t.holds() && alive(t.Grantee) {
			n++
		}
	}
	return n
}

func (l List) hasUnlimited() bool {
	return slices.ContainsFunc(l.Tokens, func(t Token) bool { return t.Status == Unlimited })
}

func (l List) clone() List { return List{Tokens: slices.Clone(l.Tokens)} }
