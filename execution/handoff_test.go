package execution

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/codes"
	"github.com/taskling-go/taskling/tokens"
)

// handoffState is a task of limit 1 whose slot (token t1) exec 5 of session 1 holds, with tickets
// 50 (session 2) and 51 (session 3) waiting, every session alive, on a schema with handoffs.
func handoffState(direct50, direct51 bool) txState {
	list := tokens.List{Tokens: []tokens.Token{held(t1, 5)}}
	q := []ticket{
		{id: 50, session: 2, queuedUS: nowUS - 12e6, threshold: 10 * time.Second, window: 2 * time.Second, direct: direct50},
		{id: 51, session: 3, queuedUS: nowUS - 11e6, threshold: 10 * time.Second, window: 2 * time.Second, direct: direct51},
	}
	return txState{tokens: list.String(), holders: formatTerms([]term{{exec: 5, session: 1, grantedUS: nowUS - 1e6, threshold: 10 * time.Second}}),
		queue: formatQueue(q), fence: 9, protocol: ProtocolVersion, nowUS: nowUS, heartbeats: map[int64]int64{1: nowUS, 2: nowUS, 3: nowUS},
		handoffs: map[int64]handoff{}}
}

func TestAReleaseGrantsItsSlotToTheDirectTicketFirstInLine(t *testing.T) {
	st := handoffState(true, true)
	plan, err := decide(st, []request{releaseReq(5, uuid.MustParse(t1))}, counter())
	require.NoError(t, err)
	require.False(t, plan.results[0].release.LeaseLost)
	require.Equal(t, []handoffGrant{{exec: 50, fence: 10, token: uuid.MustParse(t1), window: 2 * time.Second, threshold: 10 * time.Second}}, plan.handoffs)
	require.Equal(t, int64(10), plan.fence)
	require.Equal(t, []int64{50}, parsed(t, plan.tokens).Grantees(), "the ticket's id holds the slot")
	require.Equal(t, []int64{50}, termExecs(mustTerms(t, plan.holders)))
	q, err := parseQueue(plan.queue)
	require.NoError(t, err)
	require.Len(t, q, 1)
	require.Equal(t, int64(51), q[0].id, "the next ticket waits for the next slot")
	require.True(t, plan.notify)
	require.Equal(t, []int64{50}, plan.offered, "the notification names the ticket")
	require.Equal(t, []int64{50}, plan.results[0].release.Offered)
}

func TestNoHandoffWhereAnAcquireCouldDecideOtherwise(t *testing.T) {
	release := []request{releaseReq(5, uuid.MustParse(t1))}
	two, off, override := 2, false, codes.DeathOverride
	for name, change := range map[string]func(*txState){
		"a ticket that is not direct is first": func(st *txState) { *st = handoffState(false, true) },
		"an operator changed the limit":        func(st *txState) { st.overrides.ConcurrencyLimit = &two },
		"the task is disabled":                 func(st *txState) { st.overrides.Enabled = &off },
		"a schema without handoffs":            func(st *txState) { st.handoffs = nil },
		"an operator set Override mode":        func(st *txState) { st.overrides.DeathMode = &override },
		"the database runs a newer protocol":   func(st *txState) { st.protocol = ProtocolVersion + 1 },
		"a new timeline's hold":                func(st *txState) { st.epoch = epoch{timeline: 2, sinceUS: nowUS, base: 2 << 40} },
	} {
		t.Run(name, func(t *testing.T) {
			st := handoffState(true, true)
			change(&st)
			plan, err := decide(st, release, counter())
			require.NoError(t, err)
			require.Empty(t, plan.handoffs)
			require.Empty(t, parsed(t, plan.tokens).Grantees())
			require.Equal(t, []int64{50}, plan.offered, "offered, as before")
		})
	}
}

func TestAHandoffSkipsADeadWaitersTicket(t *testing.T) {
	st := handoffState(true, true)
	st.heartbeats[2] = nowUS - 11e6 // session 2 died: its ticket is pruned
	st.reserved = []int64{100}
	// With an acquire (a start without a ticket, refused: no barging), the transaction judges the
	// waiters; one of releases only does not (and a dead waiter's grant would lapse).
	plan, err := decide(st, []request{releaseReq(5, uuid.MustParse(t1)), acquireReq(1)}, counter())
	require.NoError(t, err)
	require.Equal(t, DeniedLimit, plan.results[1].acquire.Denied)
	require.Len(t, plan.handoffs, 1)
	require.Equal(t, int64(51), plan.handoffs[0].exec)
	require.Empty(t, plan.queue)
}

// waiterReq is an attempt of the waiter holding ticket, of session (limit 1).
func waiterReq(ticket, session int64) request {
	r := acquireReq(1)
	r.acquire.Queue, r.acquire.SessionID = &Queue{Ticket: ticket}, session
	return r
}

// grantedTo50 is handoffState after the release: the slot granted to ticket 50, not taken.
func grantedTo50(lapse handoff) txState {
	st := handoffState(true, true)
	list := tokens.List{Tokens: []tokens.Token{held(t1, 50)}}
	st.tokens = list.String()
	st.holders = formatTerms([]term{{exec: 50, session: 2, grantedUS: nowUS - 1e6, threshold: 10 * time.Second}})
	q, _ := parseQueue(st.queue)
	st.queue = formatQueue(q[1:])
	st.fence = 10
	st.handoffs = map[int64]handoff{50: lapse}
	return st
}

func TestAGrantNotTakenHoldsTheSlotUntilItLapses(t *testing.T) {
	st := grantedTo50(handoff{lapseUS: nowUS + 1e6})
	st.reserved = []int64{100}
	r := waiterReq(51, 3)
	plan, err := decide(st, []request{r}, counter())
	require.NoError(t, err)
	res := plan.results[0].acquire
	require.Equal(t, DeniedLimit, res.Denied)
	require.Equal(t, time.Second, res.NextExpiry, "the waiter looks again when the grant lapses, not at the holder's threshold")
	require.Empty(t, plan.lapsed)
}

func TestALapsedGrantIsTakenBackWithoutEndingAnExecution(t *testing.T) {
	st := grantedTo50(handoff{lapseUS: nowUS - 1, lapsed: true})
	st.reserved = []int64{100}
	r := waiterReq(51, 3)
	plan, err := decide(st, []request{r}, counter())
	require.NoError(t, err)
	res := plan.results[0].acquire
	require.Equal(t, NotDenied, res.Denied)
	require.Equal(t, int64(11), res.Fence)
	require.Equal(t, []int64{50}, plan.lapsed, "its grant is marked lapsed")
	require.Empty(t, plan.reclaims, "no execution was started: there is nothing to end")
	require.Equal(t, []int64{50}, plan.results[0].reclaim)
}

func TestAWaiterToldItsTicketHoldsAGrant(t *testing.T) {
	st := grantedTo50(handoff{lapseUS: nowUS + 1e6})
	st.reserved = []int64{100}
	r := waiterReq(50, 2)
	plan, err := decide(st, []request{r}, counter())
	require.NoError(t, err)
	res := plan.results[0].acquire
	require.True(t, res.HandedOff)
	require.Equal(t, int64(50), res.Ticket)
	require.Equal(t, st.tokens, plan.tokens, "the grant stands")
	require.Empty(t, plan.lapsed)
}

func TestAWaiterThatLeavesGivesItsGrantBack(t *testing.T) {
	st := grantedTo50(handoff{lapseUS: nowUS + 1e6})
	st.reserved = []int64{100}
	r := waiterReq(50, 2)
	r.acquire.kind = opLeave
	plan, err := decide(st, []request{r}, counter())
	require.NoError(t, err)
	require.Equal(t, []int64{50}, plan.lapsed)
	require.Equal(t, []int64{50}, plan.abandoned, "ended as failed if a take started it after all")
	require.Len(t, plan.handoffs, 1, "the slot goes on to the next direct ticket")
	require.Equal(t, int64(51), plan.handoffs[0].exec)
	require.Equal(t, int64(11), plan.handoffs[0].fence)
}

func TestADirectTicketRoundTripsAndStaysReadableAsAWindow(t *testing.T) {
	q := []ticket{{id: 7, session: 1, priority: -2, queuedUS: nowUS, threshold: time.Second, window: 3 * time.Second, direct: true},
		{id: 8, session: 1, queuedUS: nowUS, threshold: time.Second, window: 3 * time.Second}}
	s := formatQueue(q)
	require.Contains(t, s, "X:3000001", "an odd window marks a direct ticket")
	back, err := parseQueue(s)
	require.NoError(t, err)
	require.True(t, back[0].direct)
	require.False(t, back[1].direct)
	require.Equal(t, s, formatQueue(back))
}

func TestAGrantIsGivenBackOnlyUnderTheLock(t *testing.T) {
	st := grantedTo50(handoff{lapseUS: nowUS + 1e6})
	st.queue, st.handoffs, st.heartbeats, st.blind = "", nil, nil, true // a cached copy
	st.reserved = []int64{100}
	r := waiterReq(50, 2)
	r.acquire.kind = opLeave
	_, err := decide(st, []request{r}, counter())
	require.ErrorIs(t, err, errBlind, "whether the grant was taken is only known under the lock")
}

func TestAnUntakenGrantLivesUntilItLapsesWhateverItsSession(t *testing.T) {
	st := grantedTo50(handoff{lapseUS: nowUS + 1e6})
	st.heartbeats[2] = nowUS - 60e6 // the waiter's process is silent, its term past its threshold
	st.holders = formatTerms([]term{{exec: 50, session: 2, grantedUS: nowUS - 11e6, threshold: 10 * time.Second}})
	st.reserved = []int64{100}
	plan, err := decide(st, []request{acquireReq(1)}, counter())
	require.NoError(t, err)
	require.Equal(t, DeniedLimit, plan.results[0].acquire.Denied)
	require.Empty(t, plan.lapsed)
	require.Empty(t, plan.reclaims)
}

func TestAnOfferedTicketOfASilentProcessIsDroppedNotRequeued(t *testing.T) {
	q := queue{nowUS: nowUS, tickets: []ticket{
		{id: 1, session: 1, queuedUS: nowUS - 5e6, offeredUS: nowUS - 4e6, threshold: 10 * time.Second, window: 3 * time.Second},
		{id: 2, session: 2, queuedUS: nowUS - 5e6, offeredUS: nowUS - 4e6, threshold: 10 * time.Second, window: 3 * time.Second},
	}}
	q.prune(map[int64]int64{1: nowUS - 11e6, 2: nowUS - 1e6})
	require.Len(t, q.tickets, 1)
	require.Equal(t, int64(2), q.tickets[0].id, "a live waiter slow to take its offer goes to the back")
	require.Equal(t, nowUS, q.tickets[0].queuedUS)
}

// A transaction of releases only reads no heartbeats: its handoff takes unused slots only, never
// a holder's it cannot judge.
func TestAReleaseOnlyHandoffNeverTakesAHoldersSlot(t *testing.T) {
	st := handoffState(true, true)
	list := tokens.List{Tokens: []tokens.Token{held(t1, 5), held(t2, 6)}}
	st.tokens = list.String()
	st.holders = formatTerms([]term{{exec: 5, session: 1, grantedUS: nowUS - 1e6, threshold: 10 * time.Second},
		{exec: 6, session: 4, grantedUS: nowUS - 60e6, threshold: 10 * time.Second}}) // judged by its grant alone, 6 would look dead
	st.heartbeats = nil
	plan, err := decide(st, []request{releaseReq(5, uuid.MustParse(t1))}, counter())
	require.NoError(t, err)
	require.Len(t, plan.handoffs, 1)
	require.Equal(t, uuid.MustParse(t1), plan.handoffs[0].token, "the slot released, not 6's")
	require.Empty(t, plan.reclaims)
	require.ElementsMatch(t, []int64{50, 6}, parsed(t, plan.tokens).Grantees())
}

// A waiter whose grant lapsed comes back with its old ticket: it queues under a new id, since the
// lapsed grant's record keeps the old one (granting that id again would collide with it).
func TestAWaiterWhoseGrantLapsedQueuesUnderANewID(t *testing.T) {
	st := handoffState(true, true)
	st.reserved = []int64{100}
	r := waiterReq(49, 2)
	r.acquire.Queue.Direct = true
	plan, err := decide(st, []request{r}, counter())
	require.NoError(t, err)
	res := plan.results[0].acquire
	require.Equal(t, DeniedLimit, res.Denied)
	require.Equal(t, int64(100), res.Ticket)
	require.True(t, res.Direct)
	q, err := parseQueue(plan.queue)
	require.NoError(t, err)
	require.Equal(t, []int64{50, 51, 100}, []int64{q[0].id, q[1].id, q[2].id})
}

// A lapsed grant left out when an unlimited task gets a limit (only live holders are adopted) is
// marked lapsed, so a late take finds nothing.
func TestALapsedGrantLeftOutOfANewListLapses(t *testing.T) {
	st := grantedTo50(handoff{lapseUS: nowUS - 1, lapsed: true})
	unlimited := tokens.List{Tokens: []tokens.Token{{ID: uuid.MustParse(t1), Status: tokens.Unlimited}}}
	st.tokens = unlimited.String()
	st.reserved = []int64{100}
	plan, err := decide(st, []request{acquireReq(1)}, counter())
	require.NoError(t, err)
	require.Equal(t, []int64{50}, plan.lapsed)
	require.NotContains(t, termExecs(mustTerms(t, strings.ReplaceAll(plan.holders, grantMark, "A:0"))), int64(50))
}

// A keyed waiter that leaves gives back every slot of its grant's cost, and its key's hold: the
// key's row may go.
func TestAKeyedWaiterThatLeavesGivesItsWholeGrantBack(t *testing.T) {
	st := grantedTo50(handoff{lapseUS: nowUS + 1e6})
	st.tokens = tokens.List{Tokens: []tokens.Token{held(t1, 50), held(t2, 50)}}.String()
	st.queue = ""
	st.reserved = []int64{100}
	st.keys = &keyRow{holders: formatKeyHolders(map[int64]keyHold{50: {key: "b", cost: 2}})}
	r := waiterReq(50, 2)
	r.acquire.kind = opLeave
	plan, err := decide(st, []request{r}, counter())
	require.NoError(t, err)
	require.Equal(t, []int64{50}, plan.lapsed)
	require.Empty(t, parsed(t, plan.tokens).Grantees(), "both slots are free")
	require.NotNil(t, plan.keys)
	require.Empty(t, plan.keys.holders)
	require.Equal(t, []string{"b"}, plan.keys.drops, "its key holds nothing now")
}

// A keyed waiter's attempt while a slot is granted to its ticket learns so and starts nothing:
// its waiter takes the grant.
func TestAKeyedWaiterGrantedItsSlotTakesItAndStartsNothing(t *testing.T) {
	st := grantedTo50(handoff{lapseUS: nowUS + 1e6})
	st.queue = ""
	st.reserved = []int64{100}
	st.keys = &keyRow{holders: formatKeyHolders(map[int64]keyHold{50: {key: "b", cost: 1}})}
	r := waiterReq(50, 2)
	r.acquire.Key, r.acquire.RecordDenial = "b", false // a waiter's denials are recorded when it gives up
	plan, err := decide(st, []request{r}, counter())
	require.NoError(t, err)
	res := plan.results[0].acquire
	require.True(t, res.HandedOff)
	require.Equal(t, int64(50), res.Ticket)
	require.Equal(t, DeniedLimit, res.Denied, "not a grant of its own")
	require.Empty(t, plan.inserts, "no execution is started by the attempt")
	require.Equal(t, []int64{50}, parsed(t, plan.tokens).Grantees())
}

// TestAReleaseOfAGrantNotTakenHereGivesItBack: a release of an execution whose grant's row is
// still here — the database never saw the take that started it, which a failover lost — returns
// the slot as a leaving waiter's would (to the next direct ticket) and reports the lease lost: no
// completion is recorded for an execution this database never started.
func TestAReleaseOfAGrantNotTakenHereGivesItBack(t *testing.T) {
	st := grantedTo50(handoff{lapseUS: nowUS + 1e6})
	plan, err := decide(st, []request{releaseReq(50, uuid.MustParse(t1))}, counter())
	require.NoError(t, err)
	require.True(t, plan.results[0].release.LeaseLost)
	require.Empty(t, plan.completes, "no end recorded")
	require.Equal(t, []int64{50}, plan.lapsed)
	require.Equal(t, []int64{50}, plan.abandoned)
	require.Len(t, plan.handoffs, 1, "the slot goes on to the next direct ticket")
	require.Equal(t, int64(51), plan.handoffs[0].exec)
}
