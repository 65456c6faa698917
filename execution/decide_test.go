package execution

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/taskling-go/taskling/internal/codes"
	"github.com/taskling-go/taskling/tokens"
)

// The decide step is pure: these tests need no database.

const nowUS = int64(1_800_000_000_000_000) // the DB clock in these tests

func settings(limit int) Settings {
	return Settings{ConcurrencyLimit: limit, Enabled: true, DeathMode: codes.DeathKeepAlive,
		KeepAliveInterval: time.Second, KeepAliveDeathThreshold: 10 * time.Second}
}

func acquireReq(limit int) request {
	return request{acquire: &acquisition{AcquireRequest: AcquireRequest{Requester: Requester{TaskName: "app/task", Host: "h", SessionID: 1,
		Declared: settings(limit)}, RecordDenial: true}}}
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

// state returns a task state whose list is tokens, with the liveness of grantees given directly
// (as read for grants without terms) and ids 100, 101, … reserved.
func state(list tokens.List, holders map[int64]holder, acquires int) txState {
	if holders == nil {
		holders = map[int64]holder{}
	}
	st := txState{tokens: list.String(), legacy: holders, protocol: ProtocolVersion, nowUS: nowUS, heartbeats: map[int64]int64{}}
	for i := range acquires {
		st.reserved = append(st.reserved, int64(100+i))
	}
	return st
}

func held(id string, execID int64) tokens.Token {
	return tokens.Token{ID: uuid.MustParse(id), Status: tokens.Held, Grantee: execID}
}

const (
	t1 = "00000000-0000-0000-0000-0000000000a1"
	t2 = "00000000-0000-0000-0000-0000000000a2"
)

func parsed(t *testing.T, s string) tokens.List {
	t.Helper()
	l, err := tokens.Parse(s)
	require.NoError(t, err)
	return l
}

func TestDecideGrantsAFreeSlotWithTheNextFenceAndItsTerms(t *testing.T) {
	st := state(tokens.List{}, nil, 1)
	st.fence = 7
	plan, err := decide(st, []request{acquireReq(2)}, counter())
	require.NoError(t, err)
	res := plan.results[0].acquire
	require.Equal(t, NotDenied, res.Denied)
	require.Equal(t, int64(100), res.ExecutionID)
	require.Equal(t, int64(8), res.Fence)
	require.Equal(t, int64(8), plan.fence)
	require.Equal(t, []int{0}, plan.inserts)
	list := parsed(t, plan.tokens)
	require.Equal(t, 2, list.Limit())
	require.Equal(t, []int64{100}, list.Grantees())
	require.Equal(t, "E:100,P:1,A:@,D:10000000", plan.holders, "the grant's terms, its time set by the database")
}

func TestDecideDeniesWhenLiveHoldersHoldEverySlot(t *testing.T) {
	list := tokens.List{Tokens: []tokens.Token{held(t1, 1), held(t2, 2)}}
	holders := map[int64]holder{1: {alive: true, expiresIn: 3 * time.Second}, 2: {alive: true, expiresIn: time.Second}}

	plan, err := decide(state(list, holders, 1), []request{acquireReq(2)}, counter())
	require.NoError(t, err)
	res := plan.results[0].acquire
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
	require.Zero(t, plan.results[0].acquire.ExecutionID)
}

func TestDecideJudgesHoldersByTheirSessionsHeartbeat(t *testing.T) {
	list := tokens.List{Tokens: []tokens.Token{held(t1, 1), held(t2, 2)}}
	st := state(list, nil, 1)
	st.legacy = nil
	// Granted 30 s ago with a 10 s threshold: 1's session beat 2 s ago, 2's session 11 s ago.
	st.holders = fmt.Sprintf("E:1,P:7,A:%d,D:10000000|E:2,P:8,A:%d,D:10000000", nowUS-30e6, nowUS-30e6)
	st.heartbeats = map[int64]int64{7: nowUS - 2e6, 8: nowUS - 11e6}
	plan, err := decide(st, []request{acquireReq(2)}, counter())
	require.NoError(t, err)
	res := plan.results[0].acquire
	require.Equal(t, NotDenied, res.Denied)
	require.Equal(t, uuid.MustParse(t2), res.TokenID, "2's session is past its threshold")
	require.Equal(t, []term{{exec: 2, session: 8, grantedUS: nowUS - 30e6, threshold: 10 * time.Second}}, plan.reclaims,
		"the reclaim carries the terms its recheck needs")
	require.NotContains(t, plan.holders, "E:2,")
	require.Contains(t, plan.holders, "E:100,P:1,A:@")

	// A recent grant is alive whatever its session's heartbeat: it is measured from the grant.
	st.holders = fmt.Sprintf("E:1,P:7,A:%d,D:10000000|E:2,P:8,A:%d,D:10000000", nowUS-1e6, nowUS-1e6)
	plan, err = decide(st, []request{acquireReq(2)}, counter())
	require.NoError(t, err)
	require.Equal(t, DeniedLimit, plan.results[0].acquire.Denied)
	require.Equal(t, 9*time.Second, plan.results[0].acquire.NextExpiry)

	// Override mode (P:0) ignores heartbeats.
	st.holders = fmt.Sprintf("E:1,P:0,A:%d,D:10000000|E:2,P:7,A:%d,D:10000000", nowUS-11e6, nowUS-11e6)
	plan, err = decide(st, []request{acquireReq(2)}, counter())
	require.NoError(t, err)
	require.Equal(t, uuid.MustParse(t1), plan.results[0].acquire.TokenID)
}

func TestDecideAsksToReadGranteesWithoutTerms(t *testing.T) {
	list := tokens.List{Tokens: []tokens.Token{held(t1, 1), held(t2, 2)}}
	st := state(list, nil, 1)
	st.legacy = nil
	st.holders = fmt.Sprintf("E:1,P:7,A:%d,D:10000000", nowUS)
	_, err := decide(st, []request{acquireReq(2)}, counter())
	var need *errNeedLegacy
	require.ErrorAs(t, err, &need)
	require.Equal(t, []int64{2}, need.ids)

	st.legacy = map[int64]holder{} // read: 2's row is gone, so it is dead
	plan, err := decide(st, []request{acquireReq(2)}, counter())
	require.NoError(t, err)
	require.Equal(t, uuid.MustParse(t2), plan.results[0].acquire.TokenID)
	require.Equal(t, []int64{2}, plan.legacyReclaim)

	st.legacy = nil // a release judges no liveness: nothing to read
	plan, err = decide(st, []request{releaseReq(1, uuid.MustParse(t1))}, counter())
	require.NoError(t, err)
	require.False(t, plan.results[0].release.LeaseLost)
}

func TestDecideServesReleasesBeforeAcquires(t *testing.T) {
	list := tokens.List{Tokens: []tokens.Token{held(t1, 1)}}
	st := state(list, map[int64]holder{1: {alive: true}}, 1)
	st.waiters = true
	// The acquire is queued first, but releases are served first: it gets the returned slot.
	plan, err := decide(st, []request{acquireReq(1), releaseReq(1, uuid.MustParse(t1))}, counter())
	require.NoError(t, err)
	require.False(t, plan.results[1].release.LeaseLost)
	require.Equal(t, NotDenied, plan.results[0].acquire.Denied)
	require.Equal(t, uuid.MustParse(t1), plan.results[0].acquire.TokenID)
	require.Equal(t, []int{1}, plan.completes)
	require.Equal(t, []int16{codes.OutcomeCompleted}, plan.outcomes)
	require.True(t, plan.notify, "a slot went back while someone waits")
}

func TestDecideReleaseIsIdentityChecked(t *testing.T) {
	list := tokens.List{Tokens: []tokens.Token{held(t1, 2)}} // reclaimed from 1, now held by 2
	plan, err := decide(state(list, map[int64]holder{2: {alive: true}}, 0), []request{releaseReq(1, uuid.MustParse(t1))}, counter())
	require.NoError(t, err)
	require.True(t, plan.results[0].release.LeaseLost)
	require.Equal(t, list.String(), plan.tokens, "the slot of another execution is left alone")
	require.False(t, plan.notify)
	require.Equal(t, []int16{codes.OutcomeReclaimed}, plan.outcomes, "its reclaim recorded its end")
}

func TestDecideRetriedReleaseReportsWhatTheFirstAttemptDid(t *testing.T) {
	list := tokens.List{Tokens: []tokens.Token{{ID: uuid.MustParse(t1), Status: tokens.Available}}}
	st := state(list, nil, 0)
	st.ended = map[int64]int16{1: codes.OutcomeCompleted, 2: codes.OutcomeReclaimed}
	retry := func(id int64) request { r := releaseReq(id, uuid.MustParse(t1)); r.release.Retry = true; return r }
	plan, err := decide(st, []request{retry(1), retry(2)}, counter())
	require.NoError(t, err)
	require.False(t, plan.results[0].release.LeaseLost, "the first attempt committed: completed")
	require.True(t, plan.results[1].release.LeaseLost)
	require.Empty(t, plan.completes, "nothing more to write")
}

func TestDecideWritesNothingForADisabledTask(t *testing.T) {
	off := false
	st := state(tokens.List{}, nil, 1)
	st.overrides.Enabled = &off
	plan, err := decide(st, []request{acquireReq(1)}, counter())
	require.NoError(t, err)
	require.Equal(t, DeniedDisabled, plan.results[0].acquire.Denied)
	require.True(t, plan.results[0].acquire.Overridden)
	require.True(t, plan.nothingToWrite(st))
}

func TestDecideRefusesDuplicateReferences(t *testing.T) {
	ref, done, running, gone := "a.csv", "b.csv", "c.csv", "d.csv"
	idem := func(r *string) request {
		q := acquireReq(-1)
		q.acquire.ReferenceValue, q.acquire.Idempotent = r, true
		return q
	}
	list := tokens.List{Tokens: []tokens.Token{{ID: uuid.MustParse(t1), Status: tokens.Unlimited}}}
	st := state(list, nil, 5)
	st.holders = fmt.Sprintf("E:7,P:1,A:%d,D:10000000", nowUS)
	st.claims = map[string]claim{done: {exec: 3, succeeded: true}, running: {exec: 7}, gone: {exec: 5}}
	plan, err := decide(st, []request{idem(&ref), idem(&ref), idem(&done), idem(&running), idem(&gone)}, counter())
	require.NoError(t, err)
	require.Equal(t, NotDenied, plan.results[0].acquire.Denied)
	require.Equal(t, DeniedDuplicate, plan.results[1].acquire.Denied, "granted earlier in the same transaction")
	require.Equal(t, DeniedDuplicate, plan.results[2].acquire.Denied, "succeeded")
	require.Equal(t, DeniedDuplicate, plan.results[3].acquire.Denied, "running and alive")
	require.Equal(t, NotDenied, plan.results[4].acquire.Denied, "its execution ended without success")
	require.Equal(t, []int{0, 4}, plan.refClaims)

	// A claim whose execution completes in this very transaction: a failure frees it, a success
	// makes it a duplicate (and is marked succeeded).
	for _, failed := range []bool{true, false} {
		st.reserved = []int64{100}
		rel := releaseReq(7, uuid.MustParse(t1))
		rel.release.Failed, rel.release.Idempotent, rel.release.ReferenceValue = failed, true, &running
		plan, err = decide(st, []request{rel, idem(&running)}, counter())
		require.NoError(t, err)
		want := DeniedDuplicate
		if failed {
			want = NotDenied
		}
		require.Equal(t, want, plan.results[1].acquire.Denied, "failed=%t", failed)
		require.Equal(t, !failed, slices.Contains(plan.succeeded, 0), "failed=%t", failed)
	}
}

func TestDecideKeepsABadRequestFromFailingTheOthers(t *testing.T) {
	bad := acquireReq(1)
	bad.acquire.Declared.KeepAliveDeathThreshold = bad.acquire.Declared.KeepAliveInterval // below 2× the interval
	plan, err := decide(state(tokens.List{}, nil, 2), []request{bad, acquireReq(1)}, counter())
	require.NoError(t, err)
	require.ErrorIs(t, plan.results[0].err, ErrInvalidSettings)
	require.Equal(t, NotDenied, plan.results[1].acquire.Denied)
	require.Equal(t, int64(101), plan.results[1].acquire.ExecutionID, "each acquire keeps its reserved id")
}

func TestDecideRefusesToGrantUnderANewerProtocol(t *testing.T) {
	list := tokens.List{Tokens: []tokens.Token{held(t1, 1)}}
	st := state(list, map[int64]holder{1: {alive: true}}, 1)
	st.protocol = ProtocolVersion + 1
	plan, err := decide(st, []request{acquireReq(2), releaseReq(1, uuid.MustParse(t1))}, counter())
	require.NoError(t, err)
	require.ErrorIs(t, plan.results[0].err, ErrUpgradeRequired)
	require.ErrorContains(t, plan.results[0].err, fmt.Sprintf("grant protocol %d; this binary speaks protocol %d", ProtocolVersion+1, ProtocolVersion))
	require.False(t, plan.results[1].release.LeaseLost, "an older binary still returns what it holds")
}

func TestDecideFailsOnACorruptedTokenListOrHolders(t *testing.T) {
	st := state(tokens.List{}, nil, 1)
	st.tokens = "I:not-a-uuid,S:0,G:1"
	_, err := decide(st, []request{acquireReq(1)}, counter())
	require.ErrorIs(t, err, tokens.ErrMalformed)
	st.tokens, st.holders = "", "E:1,P:2"
	_, err = decide(st, []request{acquireReq(1)}, counter())
	require.ErrorIs(t, err, errMalformedHolders)
}

func TestDecideReportsAConflictingDeclaration(t *testing.T) {
	limit, by := 5, "other-host"
	st := state(tokens.List{}, nil, 1)
	st.declaredLimit, st.declaredBy = &limit, &by
	plan, err := decide(st, []request{acquireReq(2)}, counter())
	require.NoError(t, err)
	require.Equal(t, &Declaration{Limit: 5, Host: "other-host"}, plan.results[0].acquire.ConflictingDeclaration)
	require.Equal(t, 2, *plan.declaredLimit, "the requester's declaration is recorded")
}

func TestDecideAdoptsRunningExecutionsWhenAnUnlimitedTaskGetsALimit(t *testing.T) {
	list := tokens.List{Tokens: []tokens.Token{{ID: uuid.MustParse(t1), Status: tokens.Unlimited}}}
	st := state(list, nil, 1)
	st.holders = fmt.Sprintf("E:5,P:1,A:%d,D:10000000|E:3,P:1,A:%d,D:10000000|E:4,P:0,A:%d,D:10000000", nowUS, nowUS, nowUS-20e6)
	plan, err := decide(st, []request{acquireReq(2)}, counter())
	require.NoError(t, err)
	require.Equal(t, DeniedLimit, plan.results[0].acquire.Denied, "the two live executions fill the new limit")
	require.Equal(t, []int64{3, 5}, parsed(t, plan.tokens).Grantees())
	require.NotContains(t, plan.holders, "E:4,", "the dead one is gone")
}

func TestDecidePrunesDeadHoldersOfAnUnlimitedTask(t *testing.T) {
	list := tokens.List{Tokens: []tokens.Token{{ID: uuid.MustParse(t1), Status: tokens.Unlimited}}}
	st := state(list, nil, 1)
	st.holders = fmt.Sprintf("E:5,P:1,A:%d,D:10000000|E:4,P:0,A:%d,D:10000000", nowUS, nowUS-20e6)
	plan, err := decide(st, []request{acquireReq(-1)}, counter())
	require.NoError(t, err)
	require.Equal(t, NotDenied, plan.results[0].acquire.Denied)
	require.Equal(t, []int64{4}, termExecs(plan.reclaims))
	require.Equal(t, []int64{5, 100}, termExecs(mustTerms(t, plan.holders)))

	// An unlimited holder holds while its terms do: once pruned, its release is a lost lease.
	plan, err = decide(st, []request{releaseReq(5, uuid.MustParse(t1)), releaseReq(9, uuid.MustParse(t1))}, counter())
	require.NoError(t, err)
	require.False(t, plan.results[0].release.LeaseLost)
	require.True(t, plan.results[1].release.LeaseLost)
}

func termExecs(ts []term) []int64 {
	var ids []int64
	for _, t := range ts {
		ids = append(ids, t.exec)
	}
	return ids
}

func mustTerms(t *testing.T, s string) []term {
	t.Helper()
	ts, err := parseTerms(strings.ReplaceAll(s, grantMark, fmt.Sprintf("A:%d", nowUS)))
	require.NoError(t, err)
	return ts
}

func TestDecideWritesAScheduleClaimOnlyWithItsExecution(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	claimReq := func(record bool) request {
		r := acquireReq(1)
		r.acquire.ScheduledFor, r.acquire.Schedule, r.acquire.RecordDenial = &at, &ScheduleClaim{}, record
		return r
	}
	list := tokens.List{Tokens: []tokens.Token{held(t1, 1)}}
	holders := map[int64]holder{1: {alive: true}}
	plan, err := decide(state(list, holders, 1), []request{claimReq(true)}, counter())
	require.NoError(t, err)
	require.Equal(t, []int{0}, plan.claims, "an overlap-skipped instant is recorded with its claim")
	plan, err = decide(state(list, holders, 1), []request{claimReq(false)}, counter())
	require.NoError(t, err)
	require.Empty(t, plan.claims, "a waiting claim writes nothing")
}

func TestHolderTermsRoundTripAndRejectGarbage(t *testing.T) {
	ts := []term{{exec: 1, session: 2, grantedUS: 3, threshold: 4 * time.Microsecond}, {exec: 9, grantedUS: nowUS, threshold: time.Hour}}
	got, err := parseTerms(formatTerms(ts))
	require.NoError(t, err)
	require.Equal(t, ts, got)
	for _, bad := range []string{"E:1", "E:0,P:0,A:0,D:1", "E:1,P:0,A:0,D:0", "E:1,P:-1,A:0,D:1", "E:1,P:0,A:x,D:1",
		"P:0,E:1,A:0,D:1", "E:1,P:0,A:0,D:1|", "E:1,P:0,A:0,D:1|E:1,P:0,A:0,D:1", "E:1,P:0,A:@,D:1"} {
		_, err := parseTerms(bad)
		require.ErrorIs(t, err, errMalformedHolders, bad)
	}
}

func FuzzParseTerms(f *testing.F) {
	for _, s := range []string{"", "E:1,P:2,A:3,D:4", "E:1,P:0,A:0,D:1|E:2,P:3,A:4,D:5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := parseTerms(s)
		if err != nil {
			return
		}
		again, err := parseTerms(formatTerms(ts))
		if err != nil || !slices.Equal(ts, again) {
			t.Fatalf("%q: round trip gave %v, %v", s, again, err)
		}
	})
}

// TestDecideProperties runs random batches against a model of a task: executions belong to
// sessions that heartbeat until they die; whatever the requests, limits and deaths, a live
// holder's slot is never taken, live holders stay within the limit unless a lowered limit left
// them there, fences grow by one per grant, and releases are identity-checked.
func TestDecideProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const threshold = 10 * time.Second
		newID := counter()
		st := txState{protocol: ProtocolVersion, nowUS: nowUS, heartbeats: map[int64]int64{1: nowUS, 2: nowUS, 3: nowUS}}
		sessionDead := map[int64]bool{}
		held := map[int64]bool{} // granted and not released: the model
		sessionOf := map[int64]int64{}
		tokenOf := map[int64]uuid.UUID{}
		nextID := int64(1)
		for range rapid.IntRange(1, 12).Draw(t, "batches") {
			st.nowUS += int64(rapid.IntRange(0, 6).Draw(t, "seconds")) * 1e6
			for sess := int64(1); sess <= 3; sess++ {
				if !sessionDead[sess] && rapid.IntRange(0, 6).Draw(t, "die") == 0 {
					sessionDead[sess] = true
				}
				if !sessionDead[sess] {
					st.heartbeats[sess] = st.nowUS
				}
			}
			limit := rapid.SampledFrom([]int{-1, 1, 2, 3, 5}).Draw(t, "limit")
			var reqs []request
			acquires := 0
			for range rapid.IntRange(1, 6).Draw(t, "requests") {
				if len(held) > 0 && rapid.Bool().Draw(t, "release") {
					id := rapid.SampledFrom(slices.Sorted(maps.Keys(held))).Draw(t, "releaser")
					reqs = append(reqs, releaseReq(id, tokenOf[id]))
					continue
				}
				r := acquireReq(limit)
				r.acquire.SessionID = rapid.Int64Range(1, 3).Draw(t, "session")
				reqs = append(reqs, r)
				acquires++
			}
			st.reserved = nil
			for range acquires {
				st.reserved = append(st.reserved, nextID)
				nextID++
			}
			st.legacy = map[int64]holder{}
			// Dead for sure: its session stopped beating longer than the threshold ago.
			deadForSure := func(id int64) bool {
				return sessionDead[sessionOf[id]] && time.Duration(st.nowUS-st.heartbeats[sessionOf[id]])*time.Microsecond > threshold
			}
			before := parsed2(t, st.tokens)
			liveBefore := 0
			for id := range held {
				if !deadForSure(id) && (before.IsUnlimited() || len(before.Tokens) == 0 || slices.Contains(before.Grantees(), id)) {
					liveBefore++
				}
			}

			plan, err := decide(st, reqs, newID)
			require.NoError(t, err)
			after := parsed2(t, plan.tokens)
			fence := st.fence
			released := map[int64]bool{}
			for i, r := range reqs {
				out := plan.results[i]
				if r.release != nil {
					id := r.release.ExecutionID
					require.Equal(t, !held[id] || released[id], out.release.LeaseLost, "release of %d", id)
					released[id] = true
					delete(held, id)
					continue
				}
				for _, gone := range out.reclaim {
					require.True(t, deadForSure(gone), "a live holder's slot was taken: %d", gone)
					delete(held, gone)
				}
				if out.acquire.Denied != NotDenied {
					continue
				}
				fence++
				require.Equal(t, fence, out.acquire.Fence, "fences grow by one per grant")
				held[out.acquire.ExecutionID] = true
				sessionOf[out.acquire.ExecutionID] = r.acquire.SessionID
				tokenOf[out.acquire.ExecutionID] = out.acquire.TokenID
			}
			require.Equal(t, fence, plan.fence)
			for _, tm := range plan.reclaims {
				require.True(t, deadForSure(tm.exec), "reclaimed a live holder: %d", tm.exec)
				delete(held, tm.exec)
			}
			if limit > 0 && !after.IsUnlimited() {
				live := after.InUse(func(id int64) bool { return held[id] && !deadForSure(id) })
				require.LessOrEqual(t, live, max(limit, liveBefore), "live holders over the limit")
			}
			terms := mustTerms2(t, plan.holders, st.nowUS)
			for _, tm := range terms {
				require.True(t, held[tm.exec], "terms of %d, which holds nothing", tm.exec)
			}
			for id := range held {
				if !slices.ContainsFunc(terms, func(tm term) bool { return tm.exec == id }) {
					delete(held, id) // its slot went (dead, reclaimed or removed)
				}
			}
			st.tokens, st.fence = plan.tokens, plan.fence
			st.holders = formatTerms(terms)
		}
	})
}

func parsed2(t *rapid.T, s string) tokens.List {
	l, err := tokens.Parse(s)
	require.NoError(t, err)
	return l
}

func mustTerms2(t *rapid.T, s string, now int64) []term {
	ts, err := parseTerms(strings.ReplaceAll(s, grantMark, fmt.Sprintf("A:%d", now)))
	require.NoError(t, err)
	return ts
}

// A dead holder's slot found by a start that may not take it (a ticket waits: no barging) is
// offered to the ticket at once, and the plan notifies its waiter: before, nothing had been
// released, so the waiter learned of the offer only at its next poll.
func TestDecideNotifiesAWaiterOfAnOfferOfADeadHoldersSlot(t *testing.T) {
	list := tokens.List{Tokens: []tokens.Token{held(t1, 1)}}
	holders := map[int64]holder{1: {alive: false}}
	st := state(list, holders, 1)
	st.queue = formatQueue([]ticket{{id: 50, session: 9, queuedUS: nowUS - 1000, threshold: 10 * time.Second, window: 3 * time.Second}})
	st.heartbeats[9] = nowUS
	plan, err := decide(st, []request{acquireReq(1)}, counter())
	require.NoError(t, err)
	require.Equal(t, DeniedLimit, plan.results[0].acquire.Denied, "no barging")
	require.Equal(t, []int64{50}, plan.offered)
	require.True(t, plan.notify, "the offered waiter is told now")

	// Offered already: nothing new to tell.
	st.queue = plan.queue
	plan, err = decide(st, []request{acquireReq(1)}, counter())
	require.NoError(t, err)
	require.Equal(t, []int64{50}, plan.offered)
	require.False(t, plan.notify)
}

// TestAWaiterRefusedAfterItsOfferKeepsItsPlaceInTheQueue: ticket 50 was offered the slot, which
// another took before its waiter came. Its waiter, refused, has answered: the offer is withdrawn,
// so when its window has passed the ticket is still first, not sent behind 51 as late.
func TestAWaiterRefusedAfterItsOfferKeepsItsPlaceInTheQueue(t *testing.T) {
	st := handoffState(false, false)
	q, err := parseQueue(st.queue)
	require.NoError(t, err)
	q[0].offeredUS = nowUS - 1e6
	st.queue = formatQueue(q)
	st.reserved = []int64{100}
	plan, err := decide(st, []request{waiterReq(50, 2)}, counter())
	require.NoError(t, err)
	require.Equal(t, int64(50), plan.results[0].acquire.Ticket, "refused: the slot is held")
	q, err = parseQueue(plan.queue)
	require.NoError(t, err)
	require.Equal(t, []int64{50, 51}, []int64{q[0].id, q[1].id})
	require.Zero(t, q[0].offeredUS, "its offer is withdrawn")

	st.queue, st.nowUS = plan.queue, nowUS+3e6 // past the offer's window
	for s := range st.heartbeats {
		st.heartbeats[s] = st.nowUS
	}
	st.reserved = []int64{101}
	plan, err = decide(st, []request{acquireReq(1)}, counter())
	require.NoError(t, err)
	q, err = parseQueue(plan.queue)
	require.NoError(t, err)
	require.Equal(t, []int64{50, 51}, []int64{q[0].id, q[1].id}, "50 keeps its place")
}
