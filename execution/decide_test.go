package execution

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/taskling-go/taskling/tokens"
)

// The decide step is pure: these tests need no database.

func settings(limit int) Settings {
	return Settings{ConcurrencyLimit: limit, Enabled: true, DeathMode: modeKeepAlive,
		KeepAliveInterval: time.Second, KeepAliveDeathThreshold: 10 * time.Second}
}

func acquireReq(limit int) request {
	return request{acquire: &AcquireRequest{TaskName: "app/task", Host: "h", Declared: settings(limit), RecordDenial: true}}
}

func releaseReq(execID int64, token uuid.UUID) request {
	return request{release: &ReleaseRequest{TaskName: "app/task", ExecutionID: execID, TokenID: token}}
}

// counter makes token ids 00000000-0000-0000-0000-00000000000n, so lists are readable.
func counter() func() uuid.UUID {
	n := 0
	return func() uuid.UUID {
		n++
		return uuid.MustParse(fmt.Sprintf("00000000-0000-0000-0000-%012d", n))
	}
}

// state returns a task state whose list is tokens, with ids 100, 101, … reserved.
func state(list tokens.List, holders map[int64]holder, acquires int) txState {
	st := txState{tokens: list.String(), holders: holders, duplicates: map[string][]int64{}, protocol: ProtocolVersion}
	for i := range acquires {
		st.reserved = append(st.reserved, int64(100+i))
	}
	return st
}

func held(id string, execID int64) tokens.Token {
	return tokens.Token{ID: uuid.MustParse(id), Status: tokens.Held, Grantee: execID}
}

func available(id string) tokens.Token {
	return tokens.Token{ID: uuid.MustParse(id), Status: tokens.Available}
}

const (
	t1 = "00000000-0000-0000-0000-0000000000a1"
	t2 = "00000000-0000-0000-0000-0000000000a2"
)

func TestDecideGrantsAFreeSlotWithTheNextFence(t *testing.T) {
	st := state(tokens.List{}, nil, 1)
	st.fence = 7
	plan, err := decide(st, []request{acquireReq(2)}, counter())
	require.NoError(t, err)
	res := plan.outcomes[0].acquire
	require.Equal(t, NotDenied, res.Denied)
	require.Equal(t, int64(100), res.ExecutionID)
	require.Equal(t, int64(8), res.Fence)
	require.Equal(t, int64(8), plan.fence)
	require.Equal(t, []int{0}, plan.inserts)
	list, err := tokens.Parse(plan.tokens)
	require.NoError(t, err)
	require.Equal(t, 2, list.Limit())
	require.Equal(t, []int64{100}, list.Grantees())
}

func TestDecideDeniesWhenLiveHoldersHoldEverySlot(t *testing.T) {
	list := tokens.List{Tokens: []tokens.Token{held(t1, 1), held(t2, 2)}}
	holders := map[int64]holder{1: {alive: true, expiresIn: 3 * time.Second}, 2: {alive: true, expiresIn: time.Second}}

	plan, err := decide(state(list, holders, 1), []request{acquireReq(2)}, counter())
	require.NoError(t, err)
	res := plan.outcomes[0].acquire
	require.Equal(t, DeniedLimit, res.Denied)
	require.Equal(t, time.Second, res.NextExpiry, "the earliest a live holder may be judged dead")
	require.Equal(t, []int{0}, plan.inserts, "a recorded denial is written")
	require.False(t, plan.markWaiting)
	require.Zero(t, res.Fence)

	waiter := acquireReq(2)
	waiter.acquire.RecordDenial = false
	plan, err = decide(state(list, holders, 1), []request{waiter}, counter())
	require.NoError(t, err)
	require.Empty(t, plan.inserts, "a waiter's denial writes no execution")
	require.True(t, plan.markWaiting, "but marks the task as waited for")
	require.Zero(t, plan.outcomes[0].acquire.ExecutionID)
}

func TestDecideReclaimsTheSlotOfADeadHolder(t *testing.T) {
	list := tokens.List{Tokens: []tokens.Token{held(t1, 1), held(t2, 2)}}
	holders := map[int64]holder{1: {alive: true}, 2: {alive: false}}
	plan, err := decide(state(list, holders, 1), []request{acquireReq(2)}, counter())
	require.NoError(t, err)
	res := plan.outcomes[0].acquire
	require.Equal(t, NotDenied, res.Denied)
	require.Equal(t, uuid.MustParse(t2), res.TokenID)
	require.Equal(t, []int64{2}, plan.outcomes[0].reclaim)
	require.Equal(t, []int64{2}, plan.reclaims)
}

func TestDecideServesReleasesBeforeAcquires(t *testing.T) {
	list := tokens.List{Tokens: []tokens.Token{held(t1, 1)}}
	holders := map[int64]holder{1: {alive: true}}
	st := state(list, holders, 1)
	st.waiters = true
	// The acquire is queued first, but releases are served first: it gets the returned slot.
	plan, err := decide(st, []request{acquireReq(1), releaseReq(1, uuid.MustParse(t1))}, counter())
	require.NoError(t, err)
	require.False(t, plan.outcomes[1].release.LeaseLost)
	require.Equal(t, NotDenied, plan.outcomes[0].acquire.Denied)
	require.Equal(t, uuid.MustParse(t1), plan.outcomes[0].acquire.TokenID)
	require.Equal(t, []int{1}, plan.completes)
	require.True(t, plan.notify, "a slot went back while someone waits")
}

func TestDecideReleaseIsIdentityChecked(t *testing.T) {
	list := tokens.List{Tokens: []tokens.Token{held(t1, 2)}} // reclaimed from 1, now held by 2
	plan, err := decide(state(list, map[int64]holder{2: {alive: true}}, 0), []request{releaseReq(1, uuid.MustParse(t1))}, counter())
	require.NoError(t, err)
	require.True(t, plan.outcomes[0].release.LeaseLost)
	require.Equal(t, list.String(), plan.tokens, "the slot of another execution is left alone")
	require.False(t, plan.notify)
	require.Equal(t, []int{0}, plan.completes, "the execution still completes")
}

func TestDecideWritesNothingForADisabledTask(t *testing.T) {
	off := false
	st := state(tokens.List{}, nil, 1)
	st.overrides.Enabled = &off
	plan, err := decide(st, []request{acquireReq(1)}, counter())
	require.NoError(t, err)
	require.Equal(t, DeniedDisabled, plan.outcomes[0].acquire.Denied)
	require.True(t, plan.outcomes[0].acquire.Overridden)
	require.True(t, plan.nothingToWrite(st.tokens))
}

func TestDecideRefusesDuplicateReferences(t *testing.T) {
	ref, other := "a.csv", "b.csv"
	idem := func(r *string) request {
		q := acquireReq(-1)
		q.acquire.ReferenceValue, q.acquire.Idempotent = r, true
		return q
	}
	st := state(tokens.List{}, nil, 3)
	st.duplicates[other] = []int64{7}
	plan, err := decide(st, []request{idem(&ref), idem(&ref), idem(&other)}, counter())
	require.NoError(t, err)
	require.Equal(t, NotDenied, plan.outcomes[0].acquire.Denied)
	require.Equal(t, DeniedDuplicate, plan.outcomes[1].acquire.Denied, "granted earlier in the same transaction")
	require.Equal(t, DeniedDuplicate, plan.outcomes[2].acquire.Denied, "succeeded or running elsewhere")

	// A duplicate that completes as failed in this very transaction no longer counts.
	list := tokens.List{Tokens: []tokens.Token{{ID: uuid.MustParse(t1), Status: tokens.Unlimited, Grantee: 7}}}
	st = state(list, map[int64]holder{7: {alive: true}}, 1)
	st.duplicates[other] = []int64{7}
	failed := releaseReq(7, uuid.MustParse(t1))
	failed.release.Failed = true
	plan, err = decide(st, []request{failed, idem(&other)}, counter())
	require.NoError(t, err)
	require.Equal(t, NotDenied, plan.outcomes[1].acquire.Denied)
}

func TestDecideKeepsABadRequestFromFailingTheOthers(t *testing.T) {
	bad := acquireReq(1)
	bad.acquire.Declared.KeepAliveDeathThreshold = bad.acquire.Declared.KeepAliveInterval // below 2× the interval
	plan, err := decide(state(tokens.List{}, nil, 2), []request{bad, acquireReq(1)}, counter())
	require.NoError(t, err)
	require.ErrorIs(t, plan.outcomes[0].err, ErrInvalidSettings)
	require.Equal(t, NotDenied, plan.outcomes[1].acquire.Denied)
	require.Equal(t, int64(101), plan.outcomes[1].acquire.ExecutionID, "each acquire keeps its reserved id")
}

func TestDecideRefusesToGrantUnderANewerProtocol(t *testing.T) {
	list := tokens.List{Tokens: []tokens.Token{held(t1, 1)}}
	st := state(list, map[int64]holder{1: {alive: true}}, 1)
	st.protocol = ProtocolVersion + 1
	plan, err := decide(st, []request{acquireReq(2), releaseReq(1, uuid.MustParse(t1))}, counter())
	require.NoError(t, err)
	require.ErrorIs(t, plan.outcomes[0].err, ErrUpgradeRequired)
	require.ErrorContains(t, plan.outcomes[0].err, fmt.Sprintf("grant protocol %d; this binary speaks protocol %d", ProtocolVersion+1, ProtocolVersion))
	require.False(t, plan.outcomes[1].release.LeaseLost, "an older binary still returns what it holds")
}

func TestDecideFailsOnACorruptedTokenList(t *testing.T) {
	st := state(tokens.List{}, nil, 1)
	st.tokens = "I:not-a-uuid,S:0,G:1"
	_, err := decide(st, []request{acquireReq(1)}, counter())
	require.ErrorIs(t, err, tokens.ErrMalformed)
}

func TestDecideReportsAConflictingDeclaration(t *testing.T) {
	limit, by := 5, "other-host"
	st := state(tokens.List{}, nil, 1)
	st.declaredLimit, st.declaredBy = &limit, &by
	plan, err := decide(st, []request{acquireReq(2)}, counter())
	require.NoError(t, err)
	require.Equal(t, &Declaration{Limit: 5, Host: "other-host"}, plan.outcomes[0].acquire.ConflictingDeclaration)
	require.Equal(t, 2, *plan.declaredLimit, "the requester's declaration is recorded")
}

func TestDecideAdoptsRunningExecutionsWhenAnUnlimitedTaskGetsALimit(t *testing.T) {
	list := tokens.List{Tokens: []tokens.Token{{ID: uuid.MustParse(t1), Status: tokens.Unlimited}}}
	holders := map[int64]holder{5: {alive: true}, 3: {alive: true}, 4: {alive: false}}
	plan, err := decide(state(list, holders, 1), []request{acquireReq(2)}, counter())
	require.NoError(t, err)
	require.Equal(t, DeniedLimit, plan.outcomes[0].acquire.Denied, "the two live executions fill the new limit")
	after, err := tokens.Parse(plan.tokens)
	require.NoError(t, err)
	require.Equal(t, []int64{3, 5}, after.Grantees())
}

func TestDecideWritesAScheduleClaimOnlyWithItsExecution(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	claim := func(record bool) request {
		r := acquireReq(1)
		r.acquire.ScheduledFor, r.acquire.Schedule, r.acquire.RecordDenial = &at, &ScheduleClaim{}, record
		return r
	}
	list := tokens.List{Tokens: []tokens.Token{held(t1, 1)}}
	holders := map[int64]holder{1: {alive: true}}
	plan, err := decide(state(list, holders, 1), []request{claim(true)}, counter())
	require.NoError(t, err)
	require.Equal(t, []int{0}, plan.claims, "an overlap-skipped instant is recorded with its claim")
	plan, err = decide(state(list, holders, 1), []request{claim(false)}, counter())
	require.NoError(t, err)
	require.Empty(t, plan.claims, "a waiting claim writes nothing")
}

// TestDecideProperties runs random batches against a model of the task: whatever the requests,
// limits and deaths, live holders never exceed the limit unless a lowered limit left them there,
// a live holder's slot is never taken, fences grow by one per grant, and releases are
// identity-checked.
func TestDecideProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		newID := counter()
		st := txState{duplicates: map[string][]int64{}, protocol: ProtocolVersion}
		alive := map[int64]bool{} // the model: executions granted a slot and not completed, alive or dead
		tokenOf := map[int64]uuid.UUID{}
		nextID := int64(1)
		for range rapid.IntRange(1, 12).Draw(t, "batches") {
			// Some holders die between batches.
			for _, id := range idsOf(alive) {
				if alive[id] && rapid.IntRange(0, 5).Draw(t, "die") == 0 {
					alive[id] = false
				}
			}
			limit := rapid.SampledFrom([]int{-1, 1, 2, 3, 5}).Draw(t, "limit")
			var reqs []request
			nAcquires := 0
			for range rapid.IntRange(1, 6).Draw(t, "requests") {
				if len(alive) > 0 && rapid.Bool().Draw(t, "release") {
					id := rapid.SampledFrom(idsOf(alive)).Draw(t, "releaser")
					reqs = append(reqs, releaseReq(id, tokenOf[id]))
					continue
				}
				reqs = append(reqs, acquireReq(limit))
				nAcquires++
			}
			st.reserved = nil
			for range nAcquires {
				st.reserved = append(st.reserved, nextID)
				nextID++
			}
			st.holders = map[int64]holder{}
			for id, a := range alive {
				st.holders[id] = holder{alive: a, expiresIn: time.Second}
			}
			before, err := tokens.Parse(st.tokens)
			require.NoError(t, err)
			liveBefore := before.InUse(func(id int64) bool { return alive[id] })
			if before.IsUnlimited() || len(before.Tokens) == 0 {
				liveBefore = 0 // a new limit adopts the live executions of an unlimited task
				for _, a := range alive {
					if a {
						liveBefore++
					}
				}
			}

			plan, err := decide(st, reqs, newID)
			require.NoError(t, err)
			after, err := tokens.Parse(plan.tokens)
			require.NoError(t, err)

			fence := st.fence
			released := map[int64]bool{}
			for i, r := range reqs {
				out := plan.outcomes[i]
				if r.release != nil {
					id := r.release.ExecutionID
					// Returning to an unlimited list always succeeds; else only the grantee's first return does.
					lost := !before.IsUnlimited() && (!slices.Contains(before.Grantees(), id) || released[id])
					require.Equal(t, lost, out.release.LeaseLost, "release of %d", id)
					released[id] = true
					delete(alive, id)
					continue
				}
				if out.acquire.Denied != NotDenied {
					continue
				}
				fence++
				require.Equal(t, fence, out.acquire.Fence, "fences grow by one per grant")
				for _, gone := range out.reclaim {
					require.False(t, alive[gone], "a live holder's slot was taken: %d", gone)
				}
				alive[out.acquire.ExecutionID] = true
				tokenOf[out.acquire.ExecutionID] = out.acquire.TokenID
			}
			require.Equal(t, fence, plan.fence)
			if limit > 0 && !after.IsUnlimited() {
				live := after.InUse(func(id int64) bool { return alive[id] })
				require.LessOrEqual(t, live, max(limit, liveBefore), "live holders over the limit")
			}
			for id := range alive {
				if !after.IsUnlimited() && !slices.Contains(after.Grantees(), id) {
					delete(alive, id) // its token was removed (dead, reclaimed)
				}
			}
			st.tokens, st.fence = plan.tokens, plan.fence
		}
	})
}

// idsOf returns the keys of m in order, so that draws are reproducible.
func idsOf(m map[int64]bool) []int64 {
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
