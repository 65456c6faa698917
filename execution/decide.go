package execution

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/taskling-go/taskling/tokens"
)

// A token transaction has three parts: read the task's state under its row lock (round trip 1,
// readState), decide everything in decide — a pure function of that state and the requests, with
// no I/O and no clock — and write the plan (round trip 2, writePlan).

// ProtocolVersion is the version of the grant rules this binary follows. The migration that
// changes them bumps taskling.protocol; a binary older than the database refuses to grant.
const ProtocolVersion = 1

// ErrUpgradeRequired: the database's grant protocol is newer than this binary's.
var ErrUpgradeRequired = errors.New("taskling: upgrade required")

// request is one acquire or release served by a token transaction.
type request struct {
	acquire *AcquireRequest
	release *ReleaseRequest
}

// txState is what round trip 1 read, under the task row's lock.
type txState struct {
	reserved      []int64 // execution ids reserved for the acquires, in order
	tokens        string
	fence         int64
	overrides     Overrides
	declaredLimit *int
	declaredBy    *string
	waiters       bool // someone waits for a slot: a freed one is announced
	protocol      int  // the database's grant protocol (ProtocolVersion when they agree)
	// holders are the executions that may hold a slot, judged on the DB clock.
	holders map[int64]holder
	// duplicates maps a reference value to the executions that make a new idempotent start
	// with it a duplicate (succeeded, or running and alive).
	duplicates map[string][]int64
}

type holder struct {
	alive     bool
	expiresIn time.Duration // until it may be judged dead
}

// txPlan is what round trip 2 writes, with each request's outcome.
type txPlan struct {
	tokens        string
	fence         int64
	declaredLimit *int
	declaredBy    *string
	markWaiting   bool  // a waiter was denied: releases must notify for the next minute
	inserts       []int // requests whose execution row is written, in order
	reclaims      []int64
	completes     []int // release requests, in order
	claims        []int // acquire requests whose schedule claim is written
	notify        bool
	outcomes      []outcome // one per request
}

// outcome is one request's result.
type outcome struct {
	acquire AcquireResult
	release ReleaseResult
	err     error   // the request's own error (bad settings); others were served
	reclaim []int64 // the dead holders this acquire's grant or adjust took slots from
}

// nothingToWrite reports a plan whose transaction can be rolled back: no row changes, nobody
// to mark as waiting.
func (p txPlan) nothingToWrite(before string) bool {
	return len(p.inserts) == 0 && len(p.completes) == 0 && !p.markWaiting && p.tokens == before
}

// decide serves reqs on st exactly as if they ran one after another: every release first
// (identity-checked Return), then every acquire in order (Adjust to its effective limit, Grant).
// newID makes token ids. An error fails the whole transaction (a corrupted token list).
func decide(st txState, reqs []request, newID func() uuid.UUID) (txPlan, error) {
	list, err := tokens.Parse(st.tokens)
	if err != nil {
		return txPlan{}, fmt.Errorf("task %s: stored token list: %w", taskNameOf(reqs), err)
	}
	d := decider{st: st, list: list, holders: copyHolders(st.holders), newID: newID,
		plan:      txPlan{fence: st.fence, outcomes: make([]outcome, len(reqs))},
		failedNow: map[int64]bool{}, grantedRefs: map[string]bool{}}
	for i, r := range reqs {
		if r.release != nil {
			d.release(i, r.release)
		}
	}
	next := 0
	for i, r := range reqs {
		if r.acquire != nil {
			if err := d.acquire(i, r.acquire, st.reserved[next]); err != nil {
				return txPlan{}, err
			}
			next++
		}
	}
	d.plan.tokens = d.list.String()
	d.plan.notify = d.freed && st.waiters
	return d.plan, nil
}

// decider holds the state one decision moves through.
type decider struct {
	st          txState
	list        tokens.List
	holders     map[int64]holder
	newID       func() uuid.UUID
	plan        txPlan
	freed       bool            // a slot went back
	failedNow   map[int64]bool  // executions completing as failed in this transaction
	grantedRefs map[string]bool // idempotent references granted in this transaction
}

func (d *decider) alive(id int64) bool { h, ok := d.holders[id]; return ok && h.alive }

func (d *decider) release(i int, r *ReleaseRequest) {
	next, held := d.list.Return(r.TokenID, r.ExecutionID)
	d.plan.outcomes[i].release.LeaseLost = !held
	d.freed = d.freed || (held && !d.list.IsUnlimited())
	d.list = next
	delete(d.holders, r.ExecutionID) // it completes in this transaction
	d.plan.completes = append(d.plan.completes, i)
	if r.Failed {
		d.failedNow[r.ExecutionID] = true
	}
}

func (d *decider) acquire(i int, req *AcquireRequest, execID int64) error {
	out := &d.plan.outcomes[i]
	if d.st.protocol > ProtocolVersion {
		out.err = fmt.Errorf("%w: the database runs grant protocol %d; this binary speaks protocol %d and must not grant by older rules: upgrade it (README: Upgrading)",
			ErrUpgradeRequired, d.st.protocol, ProtocolVersion)
		return nil
	}
	res := &out.acquire
	res.Effective = d.st.overrides.Apply(req.Declared)
	res.Overridden = !d.st.overrides.IsZero()
	if err := res.Effective.Validate("with operator overrides"); err != nil {
		out.err = fmt.Errorf("task %s: %w", req.TaskName, err)
		return nil
	}
	if !res.Effective.Enabled {
		res.Denied = DeniedDisabled // nothing is written for a disabled task
		return nil
	}
	if st := d.st; st.declaredLimit != nil && st.declaredBy != nil && *st.declaredLimit != req.Declared.ConcurrencyLimit && *st.declaredBy != req.Host {
		res.ConflictingDeclaration = &Declaration{Limit: *st.declaredLimit, Host: *st.declaredBy}
	}
	d.plan.declaredLimit, d.plan.declaredBy = &req.Declared.ConcurrencyLimit, &req.Host

	newID := req.NewTokenID
	if newID == nil {
		newID = d.newID
	}
	next, gone, err := d.list.Adjust(res.Effective.ConcurrencyLimit, d.alive, d.adoptable(), newID)
	if err != nil {
		return fmt.Errorf("task %s: %w", req.TaskName, err)
	}
	d.list = next
	out.reclaim = append(out.reclaim, gone...)

	var grant tokens.GrantResult
	if ref := req.ReferenceValue; req.Idempotent && ref != nil && (d.grantedRefs[*ref] || anyNot(d.st.duplicates[*ref], d.failedNow)) {
		res.Denied = DeniedDuplicate
	} else if d.list, grant = d.list.Grant(execID, d.alive); !grant.Granted {
		res.Denied = DeniedLimit
	}
	switch {
	case grant.Granted:
		d.plan.fence++
		res.ExecutionID, res.Fence, res.TokenID = execID, d.plan.fence, grant.TokenID
		if grant.Reclaimed != 0 {
			out.reclaim = append(out.reclaim, grant.Reclaimed)
		}
		d.holders[execID] = holder{alive: true, expiresIn: res.Effective.Threshold()}
		if req.Idempotent && req.ReferenceValue != nil {
			d.grantedRefs[*req.ReferenceValue] = true
		}
	case res.Denied == DeniedLimit:
		res.NextExpiry = d.nextExpiry()
	}
	d.plan.reclaims = append(d.plan.reclaims, out.reclaim...)
	switch {
	case res.Denied == NotDenied || req.RecordDenial:
		res.ExecutionID = execID
		d.plan.inserts = append(d.plan.inserts, i)
		if req.Schedule != nil && req.ScheduledFor != nil {
			d.plan.claims = append(d.plan.claims, i)
		}
	case res.Denied == DeniedLimit:
		d.plan.markWaiting = true
	}
	return nil
}

// adoptable are the live executions that Adjust adopts when an unlimited (or new) list gets a
// limit, in id order.
func (d *decider) adoptable() []int64 {
	if !d.list.IsUnlimited() && len(d.list.Tokens) > 0 {
		return nil
	}
	var ids []int64
	for id, h := range d.holders {
		if h.alive {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// nextExpiry is how long until the earliest live grantee could be judged dead (0 if none).
func (d *decider) nextExpiry() time.Duration {
	var next time.Duration
	for _, id := range d.list.Grantees() {
		if h, ok := d.holders[id]; ok && h.alive && (next == 0 || h.expiresIn < next) {
			next = max(h.expiresIn, time.Millisecond)
		}
	}
	return next
}

func copyHolders(in map[int64]holder) map[int64]holder {
	out := make(map[int64]holder, len(in)+1)
	for id, h := range in {
		out[id] = h
	}
	return out
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

func taskNameOf(reqs []request) string {
	if len(reqs) == 0 {
		return ""
	}
	if a := reqs[0].acquire; a != nil {
		return a.TaskName
	}
	return reqs[0].release.TaskName
}
