package tokens_test

import (
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/tokens"
)

// tid is a readable, deterministic token id.
func tid(n int) uuid.UUID { return uuid.UUID{0xaa, 15: byte(n), 14: byte(n >> 8)} }

func token(n int, s tokens.Status, g int64) tokens.Token {
	return tokens.Token{ID: tid(n), Status: s, Grantee: g}
}
func held(n int, g int64) tokens.Token      { return token(n, tokens.Held, g) }
func avail(n int) tokens.Token              { return token(n, tokens.Available, 0) }
func returned(n int, g int64) tokens.Token  { return token(n, tokens.Available, g) } // remembers its last grantee
func retiring(n int, g int64) tokens.Token  { return token(n, tokens.Retiring, g) }
func unlimited(n int, g int64) tokens.Token { return token(n, tokens.Unlimited, g) }
func list(ts ...tokens.Token) tokens.List   { return tokens.List{Tokens: ts} }

// live is the Liveness of exactly the given executions.
func live(ids ...int64) tokens.Liveness {
	return func(id int64) bool { return slices.Contains(ids, id) }
}

// newIDs hands out tid(100), tid(101), … so expected lists can name new tokens.
func newIDs() func() uuid.UUID {
	n := 99
	return func() uuid.UUID { n++; return tid(n) }
}

func requireList(t *testing.T, want, got tokens.List) {
	t.Helper()
	if !slices.Equal(want.Tokens, got.Tokens) {
		t.Fatalf("list:\n got  %v\n want %v", got.Tokens, want.Tokens)
	}
}

type adjustCase struct {
	name      string
	before    tokens.List
	limit     int
	live      []int64
	adopt     []int64
	want      tokens.List
	reclaimed []int64
}

func runAdjust(t *testing.T, cases []adjustCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tokens.List{Tokens: slices.Clone(tc.before.Tokens)}
			got, reclaimed, err := tc.before.Adjust(tc.limit, live(tc.live...), tc.adopt, newIDs())
			require.NoError(t, err)
			requireList(t, tc.want, got)
			require.Equal(t, tc.reclaimed, reclaimed)
			requireList(t, before, tc.before) // the input is never mutated
			if tc.limit > 0 {
				require.Equal(t, tc.limit, got.Limit())
			}
		})
	}
}

func TestAdjustRejectsInvalidLimit(t *testing.T) {
	for _, limit := range []int{0, -2, -100} {
		before := list(held(1, 7), avail(2))
		got, reclaimed, err := before.Adjust(limit, live(7), nil, newIDs())
		require.ErrorIs(t, err, tokens.ErrInvalidLimit, "limit %d", limit)
		require.Nil(t, reclaimed)
		requireList(t, list(held(1, 7), avail(2)), got)
	}
}

func TestAdjustEmptyListBecomesAvailableTokensOrOneUnlimitedToken(t *testing.T) {
	runAdjust(t, []adjustCase{
		{name: "limit 1", limit: 1, want: list(avail(100))},
		{name: "limit 3", limit: 3, want: list(avail(100), avail(101), avail(102))},
		{name: "unlimited", limit: -1, want: list(unlimited(100, 0))},
		{name: "adopts running executions", limit: 2, live: []int64{5}, adopt: []int64{5}, want: list(held(100, 5), avail(101))},
	})
}

func TestAdjustRaisingLimitAppendsAvailableTokens(t *testing.T) {
	runAdjust(t, []adjustCase{
		{name: "keeps holders in place", before: list(held(1, 7), avail(2)), limit: 4, live: []int64{7},
			want: list(held(1, 7), avail(2), avail(100), avail(101))},
		{name: "same limit changes nothing", before: list(held(1, 7), avail(2), held(3, 8)), limit: 3, live: []int64{7, 8},
			want: list(held(1, 7), avail(2), held(3, 8))},
		{name: "dead holder is left for Grant to reclaim", before: list(held(1, 7)), limit: 2,
			want: list(held(1, 7), avail(100))},
	})
}

func TestAdjustLoweringLimitRemovesAvailableTokensFirst(t *testing.T) {
	runAdjust(t, []adjustCase{
		{name: "first available tokens go", before: list(avail(1), held(2, 7), avail(3), avail(4)), limit: 2, live: []int64{7},
			want: list(held(2, 7), avail(4))},
		{name: "before dead holders", before: list(held(1, 6), avail(2), held(3, 7)), limit: 2, live: []int64{7},
			want: list(held(1, 6), held(3, 7))},
	})
}

func TestAdjustLoweringLimitReclaimsDeadHoldersBeforeRetiringLiveOnes(t *testing.T) {
	runAdjust(t, []adjustCase{
		{name: "dead holder removed", before: list(held(1, 7), held(2, 8), held(3, 9)), limit: 2, live: []int64{7, 9},
			want: list(held(1, 7), held(3, 9)), reclaimed: []int64{8}},
		{name: "only as many as needed", before: list(held(1, 6), held(2, 8), held(3, 9)), limit: 2, live: []int64{9},
			want: list(held(2, 8), held(3, 9)), reclaimed: []int64{6}},
		{name: "then live ones retire", before: list(held(1, 6), held(2, 7), held(3, 8)), limit: 1, live: []int64{7, 8},
			want: list(held(2, 7), retiring(3, 8)), reclaimed: []int64{6}},
	})
}

func TestAdjustLoweringLimitNeverEvictsLiveHolder(t *testing.T) {
	runAdjust(t, []adjustCase{
		{name: "slots past the limit retire", before: list(held(1, 7), held(2, 8), held(3, 9)), limit: 1, live: []int64{7, 8, 9},
			want: list(held(1, 7), retiring(2, 8), retiring(3, 9))},
		{name: "available removed, holders kept", before: list(held(1, 7), avail(2), held(3, 9)), limit: 1, live: []int64{7, 9},
			want: list(held(1, 7), retiring(3, 9))},
		{name: "retiring again is stable", before: list(held(1, 7), retiring(2, 8), retiring(3, 9)), limit: 1, live: []int64{7, 8, 9},
			want: list(held(1, 7), retiring(2, 8), retiring(3, 9))},
		{name: "a returned held slot is not handed out while others retire", before: list(avail(1), retiring(2, 8), retiring(3, 9)), limit: 2, live: []int64{8, 9},
			want: list(held(2, 8), held(3, 9))},
	})
}

func TestAdjustDropsRetiringTokenOfDeadHolder(t *testing.T) {
	runAdjust(t, []adjustCase{
		{name: "dropped and reported", before: list(held(1, 7), retiring(2, 8), retiring(3, 9)), limit: 1, live: []int64{7, 9},
			want: list(held(1, 7), retiring(3, 9)), reclaimed: []int64{8}},
		{name: "its slot is not re-created", before: list(held(1, 7), retiring(2, 8)), limit: 1, live: []int64{7},
			want: list(held(1, 7)), reclaimed: []int64{8}},
		{name: "before growing", before: list(retiring(1, 8), held(2, 7)), limit: 2, live: []int64{7},
			want: list(held(2, 7), avail(100)), reclaimed: []int64{8}},
	})
}

func TestAdjustRaisingLimitReadmitsRetiringHolders(t *testing.T) {
	runAdjust(t, []adjustCase{
		{name: "first retiring re-admitted", before: list(held(1, 7), retiring(2, 8), retiring(3, 9)), limit: 2, live: []int64{7, 8, 9},
			want: list(held(1, 7), held(2, 8), retiring(3, 9))},
		{name: "all re-admitted, then available", before: list(held(1, 7), retiring(2, 8)), limit: 3, live: []int64{7, 8},
			want: list(held(1, 7), held(2, 8), avail(100))},
	})
}

func TestAdjustUnlimitedToLimitAdoptsRunningExecutions(t *testing.T) {
	runAdjust(t, []adjustCase{
		{name: "fewer running than the limit", before: list(unlimited(1, 9)), limit: 3, live: []int64{5, 9}, adopt: []int64{9, 5},
			want: list(held(100, 9), held(101, 5), avail(102))},
		{name: "more running than the limit", before: list(unlimited(1, 9)), limit: 2, live: []int64{4, 5, 6, 9}, adopt: []int64{4, 5, 6, 9},
			want: list(held(100, 4), held(101, 5), retiring(102, 6), retiring(103, 9))},
		{name: "none running", before: list(unlimited(1, 9)), limit: 2,
			want: list(avail(100), avail(101))},
		{name: "dead, zero and repeated ids are not adopted", before: list(unlimited(1, 9)), limit: 1, live: []int64{4, 5}, adopt: []int64{0, 3, 4, 4, 5},
			want: list(held(100, 4), retiring(101, 5))},
	})
}

func TestAdjustUnlimitedToLimitThenReturnsShrinkToTheLimit(t *testing.T) {
	l, _, err := list(unlimited(1, 6)).Adjust(1, live(4, 5, 6), []int64{4, 5, 6}, newIDs())
	require.NoError(t, err)
	requireList(t, list(held(100, 4), retiring(101, 5), retiring(102, 6)), l)

	_, g := l.Grant(7, live(4, 5, 6, 7))
	require.False(t, g.Granted, "adopted executions count against the limit")

	// Adopted executions still return with the unlimited token's id.
	l, ok := l.Return(tid(1), 5)
	require.True(t, ok)
	l, ok = l.Return(tid(1), 4)
	require.True(t, ok)
	requireList(t, list(returned(100, 4), retiring(102, 6)), l)
	_, g = l.Grant(7, live(6, 7))
	require.False(t, g.Granted, "a retiring holder still fills the slot")

	l, ok = l.Return(tid(1), 6)
	require.True(t, ok)
	l, g = l.Grant(7, live(7))
	require.True(t, g.Granted)
	requireList(t, list(held(100, 7)), l)
}

func TestAdjustLimitToUnlimitedAbsorbsHolders(t *testing.T) {
	runAdjust(t, []adjustCase{
		{name: "live holders share it, dead ones are reported", before: list(held(1, 7), retiring(2, 8), avail(3), held(4, 9)), limit: -1, live: []int64{7, 8},
			want: list(unlimited(100, 0)), reclaimed: []int64{9}},
		{name: "already unlimited is unchanged", before: list(unlimited(1, 9)), limit: -1,
			want: list(unlimited(1, 9))},
	})

	l, _, err := list(held(1, 7), retiring(2, 8)).Adjust(-1, live(7, 8), nil, newIDs())
	require.NoError(t, err)
	for _, h := range []struct {
		token uuid.UUID
		exec  int64
	}{{tid(1), 7}, {tid(2), 8}} {
		after, ok := l.Return(h.token, h.exec)
		require.True(t, ok, "exec %d", h.exec)
		requireList(t, l, after)
	}
}

func TestAdjustRejectsRepeatedNewID(t *testing.T) {
	same := func() uuid.UUID { return tid(100) }
	_, _, err := tokens.List{}.Adjust(2, live(), nil, same)
	require.Error(t, err)
	_, _, err = list(avail(100)).Adjust(2, live(), nil, same)
	require.Error(t, err)
}

func TestGrantPrefersFirstAvailableToken(t *testing.T) {
	before := list(held(1, 6), avail(2), avail(3))
	got, g := before.Grant(7, live())
	require.Equal(t, tokens.GrantResult{Granted: true, TokenID: tid(2)}, g)
	requireList(t, list(held(1, 6), held(2, 7), avail(3)), got)
	requireList(t, list(held(1, 6), avail(2), avail(3)), before)
}

func TestGrantSharesUnlimitedToken(t *testing.T) {
	l := list(unlimited(1, 0))
	for _, exec := range []int64{7, 8, 9} {
		var g tokens.GrantResult
		l, g = l.Grant(exec, live(7, 8, 9))
		require.Equal(t, tokens.GrantResult{Granted: true, TokenID: tid(1)}, g)
		requireList(t, list(unlimited(1, exec)), l)
	}
}

func TestGrantReclaimsTokenOfDeadHolder(t *testing.T) {
	got, g := list(held(1, 6), held(2, 8), held(3, 9)).Grant(10, live(6))
	require.Equal(t, tokens.GrantResult{Granted: true, TokenID: tid(2), Reclaimed: 8}, g)
	requireList(t, list(held(1, 6), held(2, 10), held(3, 9)), got)
}

func TestGrantReclaimsTokenOfMissingGrantee(t *testing.T) {
	// The liveness of an execution with no row (purged, never written) is false.
	rows := map[int64]bool{6: true}
	alive := func(id int64) bool { return rows[id] }
	got, g := list(held(1, 6), held(2, 123456)).Grant(10, alive)
	require.Equal(t, tokens.GrantResult{Granted: true, TokenID: tid(2), Reclaimed: 123456}, g)
	requireList(t, list(held(1, 6), held(2, 10)), got)
}

func TestGrantDeniedWhenEveryHolderIsLive(t *testing.T) {
	before := list(held(1, 6), held(2, 7))
	got, g := before.Grant(10, live(6, 7))
	require.Equal(t, tokens.GrantResult{}, g)
	requireList(t, before, got)
}

func TestGrantNeverGrantsRetiringToken(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before tokens.List
	}{
		{"dead retiring holder", list(held(1, 6), retiring(2, 7))},
		{"available slot while others retire", list(avail(1), retiring(2, 7), retiring(3, 8))},
		{"dead held holder while others retire", list(held(1, 6), held(2, 9), retiring(3, 8))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, g := tc.before.Grant(10, live(6))
			require.False(t, g.Granted)
			requireList(t, tc.before, got)
		})
	}
}

func TestGrantRejectsNonPositiveExecID(t *testing.T) {
	for _, exec := range []int64{0, -1} {
		_, g := list(avail(1)).Grant(exec, live())
		require.False(t, g.Granted)
		_, g = list(unlimited(1, 0)).Grant(exec, live())
		require.False(t, g.Granted)
	}
}

func TestGrantOnEmptyListIsDenied(t *testing.T) {
	_, g := tokens.List{}.Grant(1, live())
	require.False(t, g.Granted)
}

func TestReturnMakesHeldTokenAvailable(t *testing.T) {
	before := list(held(1, 6), held(2, 7))
	got, ok := before.Return(tid(2), 7)
	require.True(t, ok)
	requireList(t, list(held(1, 6), returned(2, 7)), got)
	requireList(t, list(held(1, 6), held(2, 7)), before)

	_, ok = got.Return(tid(2), 7)
	require.False(t, ok, "a second return finds the slot available")
}

func TestReturnRemovesRetiringToken(t *testing.T) {
	got, ok := list(held(1, 6), retiring(2, 7), retiring(3, 8)).Return(tid(2), 7)
	require.True(t, ok)
	requireList(t, list(held(1, 6), retiring(3, 8)), got)
}

func TestReturnByNonGranteeIsRejected(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before tokens.List
		token  uuid.UUID
		exec   int64
	}{
		{"held by another", list(held(1, 6), held(2, 7)), tid(2), 6},
		{"retiring held by another", list(held(1, 6), retiring(2, 7)), tid(2), 6},
		{"available", list(avail(1)), tid(1), 6},
		{"no such token, no slot", list(held(1, 6)), tid(9), 7},
		{"zero execution", list(held(1, 0)), tid(1), 0},
		{"empty list", list(), tid(1), 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.before.Return(tc.token, tc.exec)
			require.False(t, ok)
			requireList(t, tc.before, got)
		})
	}
}

func TestReturnOfReclaimedTokenIsRejected(t *testing.T) {
	l, g := list(held(1, 6)).Grant(7, live())
	require.Equal(t, int64(6), g.Reclaimed)
	_, ok := l.Return(tid(1), 6)
	require.False(t, ok, "the reclaimed holder must learn it lost its lease")
	_, ok = l.Return(tid(1), 7)
	require.True(t, ok)

	l, reclaimed, err := list(held(1, 7), retiring(2, 8)).Adjust(1, live(7), nil, newIDs())
	require.NoError(t, err)
	require.Equal(t, []int64{8}, reclaimed)
	_, ok = l.Return(tid(2), 8)
	require.False(t, ok, "a dropped retiring token cannot be returned")
}

func TestReturnToUnlimitedListAlwaysSucceeds(t *testing.T) {
	l := list(unlimited(1, 7))
	for _, tok := range []uuid.UUID{tid(1), tid(2)} {
		got, ok := l.Return(tok, 6)
		require.True(t, ok)
		requireList(t, l, got)
	}
}

func TestHelpersDescribeTheList(t *testing.T) {
	l := list(held(1, 6), avail(2), retiring(3, 7), held(4, 8), held(5, 0))
	require.Equal(t, []int64{6, 7, 8}, l.Grantees())
	require.False(t, l.IsUnlimited())
	require.Equal(t, 4, l.Limit())
	require.Equal(t, 2, l.InUse(live(6, 7)))

	u := list(unlimited(1, 6))
	require.True(t, u.IsUnlimited())
	require.Equal(t, -1, u.Limit())
	require.Equal(t, 0, u.InUse(live(6)))
	require.Empty(t, u.Grantees())

	require.Equal(t, 0, tokens.List{}.Limit())
	require.False(t, tokens.List{}.IsUnlimited())
}

func TestStatusStringNamesTheState(t *testing.T) {
	require.Equal(t, "held", tokens.Held.String())
	require.Equal(t, "retiring", tokens.Retiring.String())
	require.Equal(t, "Status(9)", tokens.Status(9).String())
}
