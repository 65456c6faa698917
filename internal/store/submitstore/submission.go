// Package submitstore is the storage of submissions (migration 0007): durable requests to run a
// task, claimed by workers, whose attempts the grant protocol starts and whose ends settle them
// (taskling.settle_attempts). Not a stable API.
package submitstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/georgysavva/scany/v2/pgxscan"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype/zeronull"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/codes"
	"github.com/taskling-go/taskling/internal/storedjson"
	"github.com/taskling-go/taskling/tasklingtype"
)

// A submission is a durable request to run a task (migration 0007). Workers claim the first
// waiting ones (highest priority, oldest), wait for a slot for each; the grant starts its attempt
// in the same transaction (AcquireRequest.Submission), and the end of that execution settles it
// (the trigger on execution_end).

// Querier runs SQL: a pool, a connection or the caller's transaction (SubmitTx).
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// NewSubmission is what Submit stores.
type NewSubmission struct {
	TaskID         int64
	Priority       int
	ReferenceValue *string
	Header         []byte
	MaxAttempts    int
	Trace          tasklingtype.TraceContext // stored as NULL when empty
	Key            string
	Cost           int // 1 or more
}

// insertSubmissionSQL adds a waiting submission and wakes the task's idle workers (on commit).
// A duplicate reference inserts nothing.
const insertSubmissionSQL = `
WITH ins AS (
    INSERT INTO taskling.submission (task_id, priority, reference_value, header, max_attempts)
    VALUES ($1, $2, $3, $4::jsonb, $5)
    ON CONFLICT (task_id, reference_value) WHERE reference_value IS NOT NULL DO NOTHING
    RETURNING id
)
SELECT id, pg_notify('taskling_slots', 's' || $1::text) IS NULL FROM ins`

// insertTracedSubmissionSQL is insertSubmissionSQL with a trace context (migration 0021; a
// submission without one names no column of it, as before).
const insertTracedSubmissionSQL = `
WITH ins AS (
    INSERT INTO taskling.submission (task_id, priority, reference_value, header, max_attempts, traceparent, tracestate)
    VALUES ($1, $2, $3, $4::jsonb, $5, $6, NULLIF($7, ''))
    ON CONFLICT (task_id, reference_value) WHERE reference_value IS NOT NULL DO NOTHING
    RETURNING id
)
SELECT id, pg_notify('taskling_slots', 's' || $1::text) IS NULL FROM ins`

// insertKeyedSubmissionSQL is insertTracedSubmissionSQL for a submission with a key or a cost ($8,
// $9: migration 0022).
const insertKeyedSubmissionSQL = `
WITH ins AS (
    INSERT INTO taskling.submission (task_id, priority, reference_value, header, max_attempts, traceparent, tracestate, key, cost)
    VALUES ($1, $2, $3, $4::jsonb, $5, NULLIF($6, ''), NULLIF($7, ''), $8, $9)
    ON CONFLICT (task_id, reference_value) WHERE reference_value IS NOT NULL DO NOTHING
    RETURNING id
)
SELECT id, pg_notify('taskling_slots', 's' || $1::text) IS NULL FROM ins`

const submissionByReferenceSQL = `SELECT id FROM taskling.submission WHERE task_id = $1 AND reference_value = $2`

// ErrSubmissionRace: a submission with the same reference was inserted by a transaction this
// one's snapshot cannot see (the caller's transaction is REPEATABLE READ or SERIALIZABLE).
var ErrSubmissionRace = errors.New("a concurrent submission with this reference is not visible to this transaction")

// InsertSubmission stores sub through q and returns its id; for a reference value already
// submitted, it returns the existing submission's id and duplicate=true.
func InsertSubmission(ctx context.Context, q Querier, sub NewSubmission) (id int64, duplicate bool, err error) {
	var header any
	if sub.Header != nil {
		header = string(sub.Header)
	}
	var ignored bool
	switch {
	case sub.Key != "" || sub.Cost > 1:
		err = q.QueryRow(ctx, insertKeyedSubmissionSQL, sub.TaskID, sub.Priority, sub.ReferenceValue, header, sub.MaxAttempts,
			sub.Trace.Traceparent, sub.Trace.Tracestate, sub.Key, sub.Cost).Scan(&id, &ignored)
	case !sub.Trace.IsZero():
		err = q.QueryRow(ctx, insertTracedSubmissionSQL, sub.TaskID, sub.Priority, sub.ReferenceValue, header, sub.MaxAttempts,
			sub.Trace.Traceparent, sub.Trace.Tracestate).Scan(&id, &ignored)
	default: // a schema before 0021 takes it too
		err = q.QueryRow(ctx, insertSubmissionSQL, sub.TaskID, sub.Priority, sub.ReferenceValue, header, sub.MaxAttempts).Scan(&id, &ignored)
	}
	if err == nil {
		return id, false, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) || sub.ReferenceValue == nil {
		return 0, false, fmt.Errorf("insert submission: %w", err)
	}
	if err := q.QueryRow(ctx, submissionByReferenceSQL, sub.TaskID, *sub.ReferenceValue).Scan(&id); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, false, fmt.Errorf("insert submission: %w", ErrSubmissionRace)
		}
		return 0, false, fmt.Errorf("find submission by reference: %w", err)
	}
	return id, true, nil
}

// ClaimedSubmission is a waiting submission a worker took, to wait for a slot for.
type ClaimedSubmission struct {
	ID          int64     `db:"id"`
	Priority    int       `db:"priority"`
	Reference   *string   `db:"reference_value"`
	Header      []byte    `db:"header"`
	Attempts    int       `db:"attempts"`
	MaxAttempts int       `db:"max_attempts"`
	SubmittedAt time.Time `db:"submitted_at"` // on the database clock
	Traceparent *string   `db:"traceparent"`
	Tracestate  *string   `db:"tracestate"`
	Key         string    `db:"key"`
	Cost        int       `db:"cost"`
	// Rank is its place in the claim's order (claimSubmissionsSQL).
	Rank int64 `db:"rank"`
}

// Trace is the trace context stored with the submission.
func (c ClaimedSubmission) Trace() tasklingtype.TraceContext {
	var t tasklingtype.TraceContext
	if c.Traceparent != nil {
		t.Traceparent = *c.Traceparent
	}
	if c.Tracestate != nil {
		t.Tracestate = *c.Tracestate
	}
	return t
}

// claimSubmissionsSQL takes $4 waiting submissions of the task that no live worker has claimed,
// whose key is not one of $5 (keys with no room), taking turns across keys: by priority, then the
// key with the least cost in use and claimed ($6 keys, $7 their costs; others none), then the
// key served least and least recently by the slots' round robin (taskling.task_key; a key without
// a row as one joining now), then by their place in their key's line, then the key with the
// shorter line, then oldest first — so a key with one submission is claimed before the next of a
// key with many, even when that key's runs have just ended (its row went with its last holder, so
// it ties with a key that never ran). A claim lapses once its worker's session is silent for
// longer than the claim's threshold (on the database clock), as a waiter's ticket does. The
// claim's test is repeated beside the lock: a row another worker claimed since r's snapshot is
// rechecked there (READ COMMITTED), not in r, and must not be claimed twice.
const claimSubmissionsSQL = `
WITH v AS (SELECT d.key_vtime FROM taskling.task_definition d WHERE d.id = $1),
r AS (
    SELECT c.id, c.priority, coalesce(u.used, 0) AS used,
        greatest(coalesce(k.pass, 0), (SELECT key_vtime FROM v)) AS pass, coalesce(k.granted_us, 0) AS granted_us,
        row_number() OVER (PARTITION BY c.key, c.priority ORDER BY c.id) AS turn,
        count(*) OVER (PARTITION BY c.key, c.priority) AS line
    FROM taskling.submission c
    LEFT JOIN unnest($6::text[], $7::integer[]) AS u(key, used) ON u.key = c.key
    LEFT JOIN taskling.task_key k ON k.stripe = $1 % 64 AND k.task_id = $1 AND k.key = c.key
    WHERE c.task_id = $1 AND c.status = taskling.submission_status('waiting')
      AND (c.claimed_by IS NULL OR NOT EXISTS (
          SELECT 1 FROM taskling.session w
          WHERE w.id = c.claimed_by AND clock_timestamp() - w.last_heartbeat <= c.claim_threshold))
      AND c.key <> ALL($5::text[])
), q AS (
    SELECT r.id, row_number() OVER (ORDER BY r.priority DESC, r.used, r.pass, r.granted_us, r.turn, r.line, r.id) AS rank FROM r
)
UPDATE taskling.submission s
SET claimed_by = $2, claim_threshold = $3 * interval '1 microsecond', updated_at = clock_timestamp()
FROM (
    SELECT c.id, q.rank FROM taskling.submission c JOIN q ON q.id = c.id
    WHERE c.task_id = $1 AND c.status = taskling.submission_status('waiting')
      AND (c.claimed_by IS NULL OR NOT EXISTS (
          SELECT 1 FROM taskling.session w
          WHERE w.id = c.claimed_by AND clock_timestamp() - w.last_heartbeat <= c.claim_threshold))
    ORDER BY q.rank
    LIMIT $4
    FOR UPDATE OF c SKIP LOCKED) p
WHERE s.id = p.id
RETURNING s.id, s.priority, s.reference_value, s.header, s.attempts, s.max_attempts, s.submitted_at, s.traceparent, s.tracestate, s.key, s.cost,
    p.rank`

// claimUnkeyedSubmissionsSQL is claimSubmissionsSQL for a task none of whose waiting submissions
// has a key and whose key "" has no limit: one line, by priority then oldest first, read from the
// waiting submissions' index (the keyed order ranks every waiting submission of the task).
const claimUnkeyedSubmissionsSQL = claimUnkeyedHead + claimUnkeyedTail

// claimPlainSQL is claimUnkeyedSubmissionsSQL for a task whose declared settings limit no key: it
// claims only while no waiting submission has a key and the operator overrides no key limit (or
// overrides KeyLimit to none); otherwise it claims nothing and the full claim decides. Both checks
// are uncorrelated, decided once in the claim's own round trip instead of a read before it (a Work
// call makes its claims one at a time, so each round trip of a claim delays all its workers).
const claimPlainSQL = claimUnkeyedHead + `
      AND NOT EXISTS (SELECT 1 FROM taskling.submission k
                      WHERE k.task_id = $1 AND k.key <> '' AND k.status = taskling.submission_status('waiting'))
      AND EXISTS (SELECT 1 FROM taskling.task_definition d
                  WHERE d.id = $1 AND d.key_overrides = '' AND coalesce(d.key_limit, 0) = 0)` + claimUnkeyedTail

const claimUnkeyedHead = `
UPDATE taskling.submission s
SET claimed_by = $2, claim_threshold = $3 * interval '1 microsecond', updated_at = clock_timestamp()
WHERE s.id IN (
    SELECT c.id FROM taskling.submission c
    WHERE c.task_id = $1 AND c.status = taskling.submission_status('waiting')`

const claimUnkeyedTail = `
      AND (c.claimed_by IS NULL OR NOT EXISTS (
          SELECT 1 FROM taskling.session w
          WHERE w.id = c.claimed_by AND clock_timestamp() - w.last_heartbeat <= c.claim_threshold))
    ORDER BY c.priority DESC, c.id
    LIMIT $4
    FOR UPDATE SKIP LOCKED)
RETURNING s.id, s.priority, s.reference_value, s.header, s.attempts, s.max_attempts, s.submitted_at, s.traceparent, s.tracestate, s.key, s.cost`

// claimBoundsSQL reads what bounds task $1's claims: its holders and their keys, the operator's
// key limits, whether a waiting submission has a key (an index of those alone, 0022), and the keys
// and costs of its waiting submissions claimed by live workers. One statement, so one snapshot: a
// claimed submission whose start commits meanwhile is counted once, as a claim or as a holder
// (read apart, it could be neither, and its full key claimed again).
const claimBoundsSQL = `
SELECT d.holders, d.key_holders, d.key_limit, d.key_overrides,
    EXISTS (SELECT 1 FROM taskling.submission c
            WHERE c.task_id = $1 AND c.key <> '' AND c.status = taskling.submission_status('waiting')),
    lc.keys, lc.costs
FROM taskling.task_definition d,
    LATERAL (SELECT coalesce(array_agg(c.key), '{}') AS keys, coalesce(array_agg(c.cost), '{}') AS costs
             FROM taskling.submission c
             WHERE c.task_id = $1 AND c.status = taskling.submission_status('waiting') AND c.claimed_by IS NOT NULL
               AND EXISTS (SELECT 1 FROM taskling.session w
                           WHERE w.id = c.claimed_by AND clock_timestamp() - w.last_heartbeat <= c.claim_threshold)) lc
WHERE d.id = $1`

// claimBounds is what claimBoundsSQL read, the overrides parsed.
type claimBounds struct {
	holders, keyHolders string
	overrides           execution.Overrides
	keyedWaiting        bool
	claimedKeys         []string
	claimedCosts        []int32
}

func (s *Store) readClaimBounds(ctx context.Context, taskID int64) (claimBounds, error) {
	var b claimBounds
	var overrides string
	if err := s.db.QueryRow(ctx, claimBoundsSQL, taskID).Scan(&b.holders, &b.keyHolders, &b.overrides.KeyLimit, &overrides,
		&b.keyedWaiting, &b.claimedKeys, &b.claimedCosts); err != nil {
		return b, err
	}
	var err error
	b.overrides.KeyLimits, err = execution.ParseKeyLimits(overrides)
	return b, err
}

// plain says whether the task's claims can take the plain order: no waiting submission has a key,
// and key "" has no limit (declared or overridden).
func (b claimBounds) plain(declared execution.Settings) bool {
	limit, _ := execution.KeyLimitOf("", declared, b.overrides)
	return !b.keyedWaiting && limit <= 0
}

// noKeyOverrides is claimPlainSQL's own guard on the task row: no key limit overridden (named or
// KeyLimit, 0 meaning none). With plain, it tells that a plain claim that found nothing found the
// queue empty.
func (b claimBounds) noKeyOverrides() bool {
	return (b.overrides.KeyLimit == nil || *b.overrides.KeyLimit == 0) && len(b.overrides.KeyLimits) == 0
}

// keyRooms reads how much each key of the task may still take: its limit, in force over declared,
// minus the cost its holders hold and its live claims wait for (unlimitedRoom: no limit).
// room(key) also says the key's limit (0: none); used are the costs in use and claimed, by key
// (only those keys can be full).
func keyRooms(b claimBounds, declared execution.Settings) (room func(key string) (int, int), used map[string]int, err error) {
	used, err = execution.KeyUsage(b.holders, b.keyHolders)
	if err != nil {
		return nil, nil, err
	}
	for i, k := range b.claimedKeys {
		used[k] += int(b.claimedCosts[i])
	}
	return func(key string) (int, int) {
		l, _ := execution.KeyLimitOf(key, declared, b.overrides)
		if l <= 0 {
			return unlimitedRoom, 0
		}
		return l - used[key], l
	}, used, nil
}

const unlimitedRoom = 1 << 30

// ClaimSubmissions claims up to n of the task's first waiting submissions for session, in
// queue order (none when there is none to claim), of keys that have room now (their limits as
// declared, under the operator's overrides): a key with no room is passed over, and a batch never
// claims more of a key than its room (those past it are given back). It returns the
// submissions claimed. The keys of pass are passed over too (their rate has no room: Work defers
// them).
func (s *Store) ClaimSubmissions(ctx context.Context, taskID, session int64, threshold time.Duration, n int, declared execution.Settings,
	pass []string) ([]ClaimedSubmission, error) {
	byPriority := func(a, b ClaimedSubmission) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.ID, b.ID))
	}
	triedPlain := len(pass) == 0 && !declared.Keyed()
	if triedPlain {
		var out []ClaimedSubmission
		if err := pgxscan.Select(ctx, s.db, &out, claimPlainSQL, taskID, session, threshold.Microseconds(), n); err != nil {
			return nil, fmt.Errorf("claim submissions of task %d: %w", taskID, err)
		}
		if len(out) > 0 {
			slices.SortFunc(out, byPriority)
			return out, nil
		}
		// Nothing waits, or the task's keys bound the claim: the full claim says which.
	}
	bounds, err := s.readClaimBounds(ctx, taskID)
	if err != nil {
		return nil, fmt.Errorf("claim submissions of task %d: %w", taskID, err)
	}
	if bounds.plain(declared) && len(pass) == 0 {
		if triedPlain && bounds.noKeyOverrides() {
			return nil, nil // the plain claim's guards held: it found the queue empty
		}
		var out []ClaimedSubmission
		if err := pgxscan.Select(ctx, s.db, &out, claimUnkeyedSubmissionsSQL, taskID, session, threshold.Microseconds(), n); err != nil {
			return nil, fmt.Errorf("claim submissions of task %d: %w", taskID, err)
		}
		slices.SortFunc(out, byPriority)
		return out, nil
	}
	room, used, err := keyRooms(bounds, declared)
	if err != nil {
		return nil, fmt.Errorf("claim submissions of task %d: %w", taskID, err)
	}
	full, keys, costs := append([]string{}, pass...), []string{}, []int32{}
	for _, k := range slices.Sorted(maps.Keys(used)) {
		if r, _ := room(k); r <= 0 {
			full = append(full, k)
		}
		keys, costs = append(keys, k), append(costs, int32(used[k]))
	}
	var out []ClaimedSubmission
	if err := pgxscan.Select(ctx, s.db, &out, claimSubmissionsSQL, taskID, session, threshold.Microseconds(), n, full, keys, costs); err != nil {
		return nil, fmt.Errorf("claim submissions of task %d: %w", taskID, err)
	}
	slices.SortFunc(out, func(a, b ClaimedSubmission) int { return cmp.Compare(a.Rank, b.Rank) }) // RETURNING keeps no order
	taken := map[string]int{}
	kept := out[:0]
	var over []int64
	for _, sub := range out {
		// A cost above its key's limit is kept: its start refuses it, and that costs an attempt.
		if r, limit := room(sub.Key); limit > 0 && sub.Cost <= limit && taken[sub.Key]+sub.Cost > r {
			over = append(over, sub.ID)
			continue
		}
		taken[sub.Key] += sub.Cost
		kept = append(kept, sub)
	}
	// No worker is woken for them: their key has no room anywhere.
	if err := s.unclaim(ctx, over, session, false); err != nil {
		return nil, err
	}
	return kept, nil
}

// unclaimSQL gives submissions claimed by session $2 back and, if $3, wakes the idle workers of
// their tasks, on every host (on commit), as a submission's insert does.
const unclaimSQL = `
WITH u AS (
    UPDATE taskling.submission SET claimed_by = NULL, updated_at = clock_timestamp()
    WHERE id = ANY($1) AND claimed_by = $2 AND status = taskling.submission_status('waiting')
    RETURNING task_id
)
SELECT pg_notify('taskling_slots', 's' || t.task_id::text) FROM (SELECT DISTINCT task_id FROM u) t WHERE $3`

// UnclaimSubmissions gives submissions claimed by session back, in one statement, and wakes
// the idle workers of their tasks.
func (s *Store) UnclaimSubmissions(ctx context.Context, ids []int64, session int64) error {
	return s.unclaim(ctx, ids, session, true)
}

func (s *Store) unclaim(ctx context.Context, ids []int64, session int64, wake bool) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := s.db.Exec(ctx, unclaimSQL, ids, session, wake); err != nil {
		return fmt.Errorf("unclaim submissions %v: %w", ids, err)
	}
	return nil
}

// failStartSQL spends an attempt of a claimed submission whose attempt could not start: back to
// waiting, or dead once its attempts are spent, with the reason.
const failStartSQL = `
UPDATE taskling.submission
SET attempts = attempts + 1,
    status = CASE WHEN attempts + 1 >= max_attempts THEN taskling.submission_status('dead') ELSE taskling.submission_status('waiting') END,
    finished_at = CASE WHEN attempts + 1 >= max_attempts THEN clock_timestamp() END,
    last_error = 'attempt ' || (attempts + 1) || ' could not start: ' || $3,
    claimed_by = NULL, updated_at = clock_timestamp()
WHERE id = $1 AND claimed_by = $2 AND status = taskling.submission_status('waiting')`

// FailSubmissionStart spends an attempt of submission id, claimed by session, whose attempt could
// not start for a reason its own row gives (message): trying again would fail the same way.
func (s *Store) FailSubmissionStart(ctx context.Context, id, session int64, message string) error {
	if _, err := s.db.Exec(ctx, failStartSQL, id, session, message); err != nil {
		return fmt.Errorf("record that submission %d could not start: %w", id, err)
	}
	return nil
}

// stuckSubmissionsSQL counts task $1's in-progress submissions whose execution ended without
// settling them (a reclaim that committed alongside their start) — ended — or whose holder is
// judged dead on the database clock but not reclaimed yet — dead.
const stuckSubmissionsSQL = `
SELECT count(*) FILTER (WHERE x.execution_id IS NOT NULL),
       count(*) FILTER (WHERE x.execution_id IS NULL AND NOT taskling.holder_alive(e, s.last_heartbeat))
FROM taskling.submission sub
JOIN taskling.task_execution e ON e.id = sub.execution_id
LEFT JOIN taskling.session s ON s.id = e.session_id
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
WHERE sub.status = taskling.submission_status('in_progress') AND sub.task_id = $1`

// settleEndedSQL settles task $1's in-progress submissions whose execution ended, as the trigger
// on execution_end does: through taskling.settle_attempts, the settlement's one definition.
const settleEndedSQL = `
WITH ended AS (
    SELECT x.execution_id, x.outcome
    FROM taskling.submission sub JOIN taskling.execution_end x ON x.execution_id = sub.execution_id
    WHERE sub.task_id = $1 AND sub.status = taskling.submission_status('in_progress')
)
SELECT count(*) FROM taskling.settle_attempts(
    ARRAY(SELECT execution_id FROM ended ORDER BY execution_id),
    ARRAY(SELECT outcome FROM ended ORDER BY execution_id))`

// RecoverSubmissions settles the task's in-progress submissions that no live execution runs any
// more: those whose execution ended are settled at once; those whose holder is dead are reaped
// (reap), and their end settles them. It returns how many it found.
func (s *Store) RecoverSubmissions(ctx context.Context, taskID int64, reap execution.ReapRequest) (int, error) {
	var ended, dead int
	if err := s.db.QueryRow(ctx, stuckSubmissionsSQL, taskID).Scan(&ended, &dead); err != nil {
		return 0, fmt.Errorf("find stuck submissions of task %d: %w", taskID, err)
	}
	if ended > 0 {
		if _, err := s.db.Exec(ctx, settleEndedSQL, taskID); err != nil {
			return 0, fmt.Errorf("settle submissions of task %d: %w", taskID, err)
		}
	}
	if dead > 0 {
		if _, err := s.proto.Reap(ctx, reap); err != nil {
			return ended, err
		}
	}
	return ended + dead, nil
}

// The submission reads: each submission with its task and the progress of its current or last
// execution e. The position counts the waiting submissions ahead (priority, then age).

// submissionSQL reads submission $1.
const submissionSQL = `
SELECT sub.id, d.application_name, d.task_name, sub.status,
    CASE WHEN sub.status = taskling.submission_status('waiting') THEN 1 + (
        SELECT count(*) FROM taskling.submission a
        WHERE a.task_id = sub.task_id AND a.status = taskling.submission_status('waiting')
          AND (a.priority > sub.priority OR (a.priority = sub.priority AND a.id < sub.id))) ELSE 0 END AS position,
    sub.priority, sub.reference_value, sub.header, sub.attempts, sub.max_attempts,
    sub.execution_id, e.items_done, e.items_total, sub.last_error, sub.cancel_requested_at, sub.cancel_reason,
    sub.submitted_at, sub.updated_at, sub.finished_at, sub.traceparent, sub.tracestate, sub.key, sub.cost
FROM taskling.submission sub
JOIN taskling.task_definition d ON d.id = sub.task_id
LEFT JOIN taskling.task_execution e ON e.id = sub.execution_id
WHERE sub.id = $1`

// submissionsSQL lists task $1's submissions of status $2 (0: any) with ids below $3 (0: any),
// the newest $4 first.
const submissionsSQL = `
SELECT sub.id, d.application_name, d.task_name, sub.status,
    CASE WHEN sub.status = taskling.submission_status('waiting') THEN 1 + (
        SELECT count(*) FROM taskling.submission a
        WHERE a.task_id = sub.task_id AND a.status = taskling.submission_status('waiting')
          AND (a.priority > sub.priority OR (a.priority = sub.priority AND a.id < sub.id))) ELSE 0 END AS position,
    sub.priority, sub.reference_value, sub.header, sub.attempts, sub.max_attempts,
    sub.execution_id, e.items_done, e.items_total, sub.last_error, sub.cancel_requested_at, sub.cancel_reason,
    sub.submitted_at, sub.updated_at, sub.finished_at, sub.traceparent, sub.tracestate, sub.key, sub.cost
FROM taskling.submission sub
JOIN taskling.task_definition d ON d.id = sub.task_id
LEFT JOIN taskling.task_execution e ON e.id = sub.execution_id
WHERE sub.task_id = $1 AND ($2 = 0 OR sub.status = $2) AND ($3 = 0 OR sub.id < $3)
ORDER BY sub.id DESC
LIMIT $4`

// waitingSubmissionsSQL lists task $1's waiting submissions with ids below $3 (0: any) in queue
// order, at most $4 ($2 is the waiting status).
const waitingSubmissionsSQL = `
SELECT sub.id, d.application_name, d.task_name, sub.status,
    CASE WHEN sub.status = taskling.submission_status('waiting') THEN 1 + (
        SELECT count(*) FROM taskling.submission a
        WHERE a.task_id = sub.task_id AND a.status = taskling.submission_status('waiting')
          AND (a.priority > sub.priority OR (a.priority = sub.priority AND a.id < sub.id))) ELSE 0 END AS position,
    sub.priority, sub.reference_value, sub.header, sub.attempts, sub.max_attempts,
    sub.execution_id, e.items_done, e.items_total, sub.last_error, sub.cancel_requested_at, sub.cancel_reason,
    sub.submitted_at, sub.updated_at, sub.finished_at, sub.traceparent, sub.tracestate, sub.key, sub.cost
FROM taskling.submission sub
JOIN taskling.task_definition d ON d.id = sub.task_id
LEFT JOIN taskling.task_execution e ON e.id = sub.execution_id
WHERE sub.task_id = $1 AND sub.status = $2 AND ($3 = 0 OR sub.id < $3)
ORDER BY sub.priority DESC, sub.id
LIMIT $4`

// scanSubmission scans a submission read's columns. NULL reads as the zero value (zeronull), as
// tasklingtype.Submission documents it.
func scanSubmission(row pgx.CollectableRow) (tasklingtype.Submission, error) {
	var (
		x               tasklingtype.Submission
		status          int16
		header          []byte // jsonb's text as is
		cancelRequested *time.Time
	)
	err := row.Scan(&x.ID, &x.Application, &x.Task, &status, &x.Position, &x.Priority, (*zeronull.Text)(&x.ReferenceValue),
		&header, &x.Attempts, &x.MaxAttempts, (*zeronull.Int8)(&x.ExecutionID), (*zeronull.Int8)(&x.ItemsDone),
		(*zeronull.Int8)(&x.ItemsTotal), (*zeronull.Text)(&x.LastError), &cancelRequested, (*zeronull.Text)(&x.CancelReason),
		&x.SubmittedAt, &x.UpdatedAt, &x.FinishedAt, (*zeronull.Text)(&x.Trace.Traceparent), (*zeronull.Text)(&x.Trace.Tracestate),
		&x.Key, &x.Cost)
	x.Status = tasklingtype.SubmissionStatus(codes.Name("submission_status", status))
	if x.Status == "" {
		x.Status = tasklingtype.SubmissionStatus(fmt.Sprintf("unknown(%d)", status))
	}
	x.Header, x.HeaderError = storedjson.Read(header)
	x.CancelRequested = cancelRequested != nil
	return x, err
}

// submissions runs a submission read.
func (s *Store) submissions(ctx context.Context, sql string, args ...any) ([]tasklingtype.Submission, error) {
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanSubmission)
}

// Submission returns one submission; ok is false when there is none with that id.
func (s *Store) Submission(ctx context.Context, id int64) (tasklingtype.Submission, bool, error) {
	out, err := s.submissions(ctx, submissionSQL, id)
	if err != nil {
		return tasklingtype.Submission{}, false, fmt.Errorf("submission %d: %w", id, err)
	}
	if len(out) == 0 {
		return tasklingtype.Submission{}, false, nil
	}
	return out[0], true, nil
}

// SubmissionFilter selects a task's submissions.
type SubmissionFilter struct {
	Status int16 // 0: any
	Before int64 // ids below this (paging); 0: from the newest
	Limit  int
}

// Submissions returns the task's submissions, newest first; waiting ones are in queue order
// when Status is codes.SubmissionWaiting.
func (s *Store) Submissions(ctx context.Context, taskID int64, f SubmissionFilter) ([]tasklingtype.Submission, error) {
	q := submissionsSQL
	if f.Status == codes.SubmissionWaiting {
		q = waitingSubmissionsSQL
	}
	out, err := s.submissions(ctx, q, taskID, f.Status, f.Before, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("submissions of task %d: %w", taskID, err)
	}
	return out, nil
}

// SubmissionAttempts lists the executions of a submission's attempts, first attempt first.
func (s *Store) SubmissionAttempts(ctx context.Context, id int64) ([]int64, error) {
	rows, err := s.db.Query(ctx, `SELECT execution_id FROM taskling.submission_attempt WHERE submission_id = $1 ORDER BY attempt`, id)
	if err != nil {
		return nil, fmt.Errorf("attempts of submission %d: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("attempts of submission %d: %w", id, err)
	}
	return out, nil
}

// cancelSubmissionSQL cancels a waiting submission at once; a running one is marked, its
// worker told (NOTIFY 'c<id>', and the next heartbeat), and its end settles it as cancelled.
const cancelSubmissionSQL = `
WITH c AS (
    UPDATE taskling.submission
    SET status = CASE WHEN status = taskling.submission_status('waiting') THEN taskling.submission_status('cancelled') ELSE status END,
        finished_at = CASE WHEN status = taskling.submission_status('waiting') THEN clock_timestamp() ELSE finished_at END,
        cancel_requested_at = clock_timestamp(), cancel_reason = $2, claimed_by = NULL, updated_at = clock_timestamp()
    WHERE id = $1 AND status IN (taskling.submission_status('waiting'), taskling.submission_status('in_progress'))
    RETURNING id, task_id, status
), ch AS (
    INSERT INTO taskling.operator_change (task_id, changed_by, principal, field, old_value, new_value)
    SELECT c.task_id, $3, $4, 'submission #' || c.id, CASE WHEN c.status = taskling.submission_status('cancelled') THEN 'waiting' ELSE 'in_progress' END,
        CASE WHEN c.status = taskling.submission_status('cancelled') THEN 'cancelled' ELSE 'cancel requested' END || CASE WHEN $2 = '' THEN '' ELSE ': ' || $2 END
    FROM c
)
SELECT c.status, pg_notify('taskling_slots', 'c' || c.id) IS NULL FROM c`

// CancelSubmission cancels submission id, recording the operator change ("submission #ID") by
// op: found is false when it does not exist or has already finished (completed, dead or
// cancelled).
func (s *Store) CancelSubmission(ctx context.Context, id int64, reason string, op execution.Operator) (status int16, found bool, err error) {
	var ignored bool
	err = s.db.QueryRow(ctx, cancelSubmissionSQL, id, reason, op.By, op.Principal).Scan(&status, &ignored)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("cancel submission %d: %w", id, err)
	}
	return status, true, nil
}

// submissionCountsSQL counts every task's submissions by status, for the metrics' gauges: the
// sums of taskling.submission_tally (migration 0021), which triggers keep as submissions change.
const submissionCountsSQL = `
SELECT d.application_name, d.task_name, c.status, c.n
FROM (SELECT task_id, status, sum(n)::bigint AS n FROM taskling.submission_tally GROUP BY task_id, status HAVING sum(n) <> 0) c
JOIN taskling.task_definition d ON d.id = c.task_id
ORDER BY d.application_name, d.task_name, c.status`

// CompactSubmissionTally replaces the tally's rows by their sums (one row per task and status),
// unless another compaction runs: it returns the rows replaced, or -1 when it left it to the
// other.
func (s *Store) CompactSubmissionTally(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRow(ctx, `SELECT taskling.compact_submission_tally()`).Scan(&n); err != nil {
		return 0, fmt.Errorf("compact the submission tally: %w", err)
	}
	return n, nil
}

// SubmissionCounts counts every task's submissions by status (tasks without submissions are left
// out).
func (s *Store) SubmissionCounts(ctx context.Context) ([]tasklingtype.SubmissionCount, error) {
	rows, err := s.db.Query(ctx, submissionCountsSQL)
	if err != nil {
		return nil, fmt.Errorf("count submissions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (tasklingtype.SubmissionCount, error) {
		var c tasklingtype.SubmissionCount
		var status int16
		err := row.Scan(&c.Application, &c.Task, &status, &c.Submissions)
		c.Status = tasklingtype.SubmissionStatus(codes.Name("submission_status", status))
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("count submissions: %w", err)
	}
	return out, nil
}
