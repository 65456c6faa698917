package execution

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskling-go/taskling/tokens"
)

// tokenTx is one token transaction on a task (DESIGN §5), serving a batch of acquires and
// releases in two round trips:
//
//  1. BEGIN; write the task row (takes its lock, reserves ids) returning it; reserve more ids;
//     read the holders' liveness on the DB clock; look up duplicate reference values.
//  2. In Go, on the token list: every release (identity-checked Return), then every acquire in
//     queue order (Adjust to its effective limit, Grant) — exactly as if they ran one after
//     another. Then write the list and fence, the executions and their events, the reclaims and
//     the completions, notify waiters if a slot was freed; COMMIT.
//
// It sets each op's result, or an op's own error (bad settings); it returns an error when the
// whole transaction failed, errRollback when there was nothing to write.
func (s *Store) tokenTx(ctx context.Context, tx *txConn, taskID int64, ops []*op) error {
	var acquires, releases []*op
	var refs []string
	for _, o := range ops {
		o.acquireRes, o.releaseRes = AcquireResult{}, ReleaseResult{}
		if o.acquire != nil {
			acquires = append(acquires, o)
			if o.acquire.Idempotent && o.acquire.ReferenceValue != nil {
				refs = append(refs, *o.acquire.ReferenceValue)
			}
		} else {
			releases = append(releases, o)
		}
	}

	// Round trip 1.
	b := &pgx.Batch{}
	b.Queue(lockTaskSQL, taskID)
	if len(acquires) > 1 {
		b.Queue(moreIDsSQL, len(acquires)-1)
	}
	if len(acquires) > 0 {
		b.Queue(holdersSQL, taskID) // releases need no liveness: Return is identity-checked
	}
	if len(refs) > 0 {
		b.Queue(duplicatesSQL, taskID, refs)
	}
	br := tx.first(ctx, b)
	row, err := readTaskRow(br)
	if err != nil {
		_ = br.Close()
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("task row %d is gone", taskID)
		}
		return err
	}
	ids := []int64{row.reservedID}
	if len(acquires) > 1 {
		more, err := pgx.CollectRows(mustQuery(br), pgx.RowTo[int64])
		if err != nil {
			_ = br.Close()
			return err
		}
		ids = append(ids, more...)
	}
	holders := map[int64]holder{}
	if len(acquires) > 0 {
		rows := mustQuery(br)
		for rows.Next() {
			var id, expiresUS int64
			var alive bool
			if err := rows.Scan(&id, &alive, &expiresUS); err != nil {
				rows.Close()
				_ = br.Close()
				return err
			}
			holders[id] = holder{alive: alive, expiresIn: time.Duration(expiresUS) * time.Microsecond}
		}
		if err := rows.Err(); err != nil {
			_ = br.Close()
			return err
		}
	}
	duplicates := map[string][]int64{} // reference value -> executions that make it a duplicate
	if len(refs) > 0 {
		rows := mustQuery(br)
		for rows.Next() {
			var id int64
			var ref string
			if err := rows.Scan(&id, &ref); err != nil {
				rows.Close()
				_ = br.Close()
				return err
			}
			duplicates[ref] = append(duplicates[ref], id)
		}
		if err := rows.Err(); err != nil {
			_ = br.Close()
			return err
		}
	}
	if err := br.Close(); err != nil {
		return err
	}

	// The token logic, in Go.
	list, err := tokens.Parse(row.tokens)
	if err != nil {
		return fmt.Errorf("task %s: stored token list: %w", opTaskName(ops), err)
	}
	before := row.tokens
	alive := func(id int64) bool { h, ok := holders[id]; return ok && h.alive }

	var w writes
	freed := false // a slot went back: waiters, if any, are notified
	failedNow := map[int64]bool{}
	for _, o := range releases {
		r := o.release
		next, held := list.Return(r.TokenID, r.ExecutionID)
		o.releaseRes.LeaseLost = !held
		freed = freed || (held && !list.IsUnlimited())
		list = next
		delete(holders, r.ExecutionID) // it is completing in this transaction
		w.completeIDs = append(w.completeIDs, r.ExecutionID)
		w.completeFailed = append(w.completeFailed, r.Failed)
		if r.Failed {
			failedNow[r.ExecutionID] = true
		}
	}

	var reclaimed []int64            // every reclaim of the transaction
	ownReclaims := map[*op][]int64{} // and which acquire made it
	waiting := false                 // a wait-loop attempt was denied
	fence := row.fence
	grantedRefs := map[string]bool{}
	var declaredLimit *int
	var declaredBy *string
	for i, o := range acquires {
		req, res := o.acquire, &o.acquireRes
		execID := ids[i]
		res.Effective = row.overrides.Apply(req.Declared)
		res.Overridden = !row.overrides.IsZero()
		if err := res.Effective.Validate("with operator overrides"); err != nil {
			o.err = fmt.Errorf("task %s: %w", req.TaskName, err)
			continue
		}
		if !res.Effective.Enabled {
			res.Denied = DeniedDisabled // nothing is written for a disabled task
			continue
		}
		if row.declaredLimit != nil && row.declaredBy != nil && *row.declaredLimit != req.Declared.ConcurrencyLimit && *row.declaredBy != req.Host {
			res.ConflictingDeclaration = &Declaration{Limit: *row.declaredLimit, Host: *row.declaredBy}
		}
		declaredLimit, declaredBy = &req.Declared.ConcurrencyLimit, &req.Host
		var adopt []int64
		if list.IsUnlimited() || len(list.Tokens) == 0 {
			for id, h := range holders {
				if h.alive {
					adopt = append(adopt, id)
				}
			}
			sort.Slice(adopt, func(i, j int) bool { return adopt[i] < adopt[j] })
		}
		newID := req.NewTokenID
		if newID == nil {
			newID = uuid.New
		}
		next, gone, err := list.Adjust(res.Effective.ConcurrencyLimit, alive, adopt, newID)
		if err != nil {
			return fmt.Errorf("task %s: %w", req.TaskName, err)
		}
		list = next
		ownReclaims[o] = append(ownReclaims[o], gone...)

		var grant tokens.GrantResult
		if req.Idempotent && req.ReferenceValue != nil && (grantedRefs[*req.ReferenceValue] || anyNot(duplicates[*req.ReferenceValue], failedNow)) {
			res.Denied = DeniedDuplicate
		} else {
			list, grant = list.Grant(execID, alive)
			if !grant.Granted {
				res.Denied = DeniedLimit
			}
		}
		switch {
		case grant.Granted:
			fence++
			res.ExecutionID, res.Fence, res.TokenID = execID, fence, grant.TokenID
			if grant.Reclaimed != 0 {
				ownReclaims[o] = append(ownReclaims[o], grant.Reclaimed)
			}
			holders[execID] = holder{alive: true, expiresIn: res.Effective.Threshold()}
			if req.Idempotent && req.ReferenceValue != nil {
				grantedRefs[*req.ReferenceValue] = true
			}
		case res.Denied == DeniedLimit:
			for _, id := range list.Grantees() {
				if h, ok := holders[id]; ok && h.alive && (res.NextExpiry == 0 || h.expiresIn < res.NextExpiry) {
					res.NextExpiry = max(h.expiresIn, time.Millisecond)
				}
			}
		}
		reclaimed = append(reclaimed, ownReclaims[o]...)
		if res.Denied == NotDenied || req.RecordDenial {
			res.ExecutionID = execID
			w.addExecution(req, res)
		} else if res.Denied == DeniedLimit {
			waiting = true
		}
	}
	after := list.String()
	if len(w.execIDs) == 0 && len(releases) == 0 && !waiting && after == before {
		return errRollback
	}

	// Round trip 2.
	b = &pgx.Batch{}
	b.Queue(updateTokensSQL, taskID, after, fence, declaredLimit, declaredBy, waiting)
	if len(w.execIDs) > 0 {
		b.Queue(insertExecutionsSQL, taskID, s.opts.LibraryVersion, w.execIDs, w.hosts, w.modes, w.kai, w.kadt, w.ot,
			w.refs, w.idempotent, w.headers, w.blocked, w.reasons, w.tokenIDs, w.fences, w.scheduledFor)
		b.Queue(insertEventsSQL, w.eventExec, w.eventType, w.eventMsg)
	}
	if len(reclaimed) > 0 {
		b.Queue(reclaimSQL, reclaimed)
	}
	claims := 0
	for _, o := range acquires {
		if req := o.acquire; req.Schedule != nil && req.ScheduledFor != nil && o.acquireRes.ExecutionID != 0 {
			queueClaim(b, *req)
			claims++
		}
	}
	if len(releases) > 0 {
		b.Queue(completeSQL, w.completeIDs, w.completeFailed)
	}
	freed = freed && row.waiters
	if freed {
		b.Queue(notifySQL, taskID)
	}
	// A holder's lease is measured from here: the execution row's last_keep_alive is set by this
	// round trip, so on the DB clock it is later than this instant. (Measuring from the first
	// round trip would spend the lease on the wait for the row lock.)
	sentAt := time.Now()
	for _, o := range acquires {
		o.acquireRes.SentAt = sentAt
	}
	br = tx.last(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return err
	}
	if len(w.execIDs) > 0 {
		rows := mustQuery(br)
		startedAt := map[int64]time.Time{}
		for rows.Next() {
			var id int64
			var at time.Time
			if err := rows.Scan(&id, &at); err != nil {
				rows.Close()
				return err
			}
			startedAt[id] = at
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, o := range acquires {
			o.acquireRes.StartedAt = startedAt[o.acquireRes.ExecutionID]
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if len(reclaimed) > 0 {
		var n int64
		if err := br.QueryRow().Scan(&n); err != nil {
			return err
		}
	}
	for range claims {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if len(releases) > 0 {
		byID := map[int64]*op{}
		for _, o := range releases {
			byID[o.release.ExecutionID] = o
		}
		rows := mustQuery(br)
		for rows.Next() {
			var id int64
			var wasReclaimed bool
			if err := rows.Scan(&id, &wasReclaimed); err != nil {
				rows.Close()
				return err
			}
			if o := byID[id]; o != nil {
				o.releaseRes.LeaseLost = o.releaseRes.LeaseLost || wasReclaimed
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
	}
	if freed {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if _, err := br.Exec(); err != nil { // COMMIT
		return err
	}
	tx.open = false
	for o, ids := range ownReclaims {
		o.acquireRes.Reclaimed = ids
	}
	return nil
}

// taskRow is the task row as the lock statement returns it.
type taskRow struct {
	reservedID    int64
	tokens        string
	fence         int64
	overrides     Overrides
	declaredLimit *int
	declaredBy    *string
	waiters       bool // someone waits for a slot: notify on release
}

func readTaskRow(br pgx.BatchResults) (taskRow, error) {
	var r taskRow
	var mode *int16
	o := &r.overrides
	err := br.QueryRow().Scan(&r.reservedID, &r.tokens, &r.fence, &o.ConcurrencyLimit, &o.Enabled, &mode,
		&o.KeepAliveInterval, &o.KeepAliveDeathThreshold, &o.OverrideThreshold, &r.declaredLimit, &r.declaredBy, &r.waiters)
	if mode != nil {
		m := DeathMode(*mode)
		o.DeathMode = &m
	}
	return r, err
}

// mustQuery returns the next result's rows; an error surfaces from rows.Err.
func mustQuery(br pgx.BatchResults) pgx.Rows {
	rows, _ := br.Query()
	return rows
}

// anyNot reports whether ids has an id not in except.
func anyNot(ids []int64, except map[int64]bool) bool {
	for _, id := range ids {
		if !except[id] {
			return true
		}
	}
	return false
}

func opTaskName(ops []*op) string {
	if len(ops) == 0 {
		return ""
	}
	if a := ops[0].acquire; a != nil {
		return a.TaskName
	}
	return ops[0].release.TaskName
}

// writes collects the rows the second round trip inserts, as column arrays.
type writes struct {
	execIDs      []int64
	hosts        []string
	modes        []int16
	kai, kadt    []time.Duration
	ot           []time.Duration
	refs         []*string
	idempotent   []bool
	headers      []*string
	blocked      []bool
	reasons      []*string
	tokenIDs     []*string
	fences       []*int64
	scheduledFor []*time.Time

	eventExec []int64
	eventType []int16
	eventMsg  []*string

	completeIDs    []int64
	completeFailed []bool
}

func (w *writes) addExecution(req *AcquireRequest, res *AcquireResult) {
	e := res.Effective
	w.execIDs = append(w.execIDs, res.ExecutionID)
	w.hosts = append(w.hosts, req.Host)
	w.modes = append(w.modes, int16(e.DeathMode))
	w.kai = append(w.kai, e.KeepAliveInterval)
	w.kadt = append(w.kadt, e.KeepAliveDeathThreshold)
	w.ot = append(w.ot, e.OverrideThreshold)
	w.refs = append(w.refs, req.ReferenceValue)
	w.idempotent = append(w.idempotent, req.Idempotent)
	var header *string
	if req.Header != nil {
		h := string(req.Header)
		header = &h
	}
	w.headers = append(w.headers, header)
	w.scheduledFor = append(w.scheduledFor, req.ScheduledFor)
	w.eventExec = append(w.eventExec, res.ExecutionID)
	w.eventType = append(w.eventType, EventStart)
	w.eventMsg = append(w.eventMsg, nil)
	if res.Denied == NotDenied {
		token, fence := res.TokenID.String(), res.Fence
		w.blocked = append(w.blocked, false)
		w.reasons = append(w.reasons, nil)
		w.tokenIDs = append(w.tokenIDs, &token)
		w.fences = append(w.fences, &fence)
		return
	}
	reason := denyMessage(res.Denied, e.ConcurrencyLimit)
	w.blocked = append(w.blocked, true)
	w.reasons = append(w.reasons, &reason)
	w.tokenIDs = append(w.tokenIDs, nil)
	w.fences = append(w.fences, nil)
	w.eventExec = append(w.eventExec, res.ExecutionID, res.ExecutionID)
	w.eventType = append(w.eventType, EventBlocked, EventEnd)
	w.eventMsg = append(w.eventMsg, &reason, nil)
}
