package taskling_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// TestASubmissionThatCannotStartEndsDeadAndTheNextRuns: a submission whose stored row its
// attempt cannot start with (a reference value longer than any start accepts, written with SQL)
// spends its attempts, ends dead naming the cause, and the submission behind it runs (issue 22:
// the Work loop gave it back and took it again forever).
func TestASubmissionThatCannotStartEndsDeadAndTheNextRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	bad, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{ReferenceValue: "r", MaxAttempts: 2})
	require.NoError(t, err)
	b.exec(t, `UPDATE taskling.submission SET reference_value = repeat('r', $2) WHERE id = $1`, bad, taskling.MaxReferenceValueLength+1)
	behind, err := b.client.Submit(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)

	var mu sync.Mutex
	var ran []int64
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, e.SubmissionID())
		return nil
	}, nil)
	b.waitStatus(t, behind, taskling.SubmissionCompleted)
	sub := b.waitStatus(t, bad, taskling.SubmissionDead)
	require.Equal(t, 2, sub.Attempts)
	require.Contains(t, sub.LastError, "attempt 2 could not start")
	require.Contains(t, sub.LastError, "ReferenceValue")
	require.NotNil(t, sub.FinishedAt)
	mu.Lock()
	require.Equal(t, []int64{behind}, ran)
	mu.Unlock()
	attempts, err := b.client.SubmissionAttempts(b.ctx, bad)
	require.NoError(t, err)
	require.Empty(t, attempts, "no execution ran it")
}

// TestASubmissionWhoseRunPanicsEveryTimeEndsDeadAndTheNextRuns: an attempt that panics is a
// failed attempt like any other: once they are spent the submission is dead, its LastError names
// the panic, and the ones behind it run.
func TestASubmissionWhoseRunPanicsEveryTimeEndsDeadAndTheNextRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	poison, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: map[string]bool{"poison": true}})
	require.NoError(t, err)
	behind, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: map[string]bool{"poison": false}})
	require.NoError(t, err)
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		var h struct{ Poison bool }
		if err := e.Header(&h); err != nil {
			return err
		}
		if h.Poison {
			panic("poisoned")
		}
		return nil
	}, &taskling.WorkOptions{Workers: 2})
	b.waitStatus(t, behind, taskling.SubmissionCompleted)
	sub := b.waitStatus(t, poison, taskling.SubmissionDead)
	require.Equal(t, taskling.DefaultMaxAttempts, sub.Attempts)
	require.Contains(t, sub.LastError, "panicked: poisoned")
}

// TestASubmissionWhoseHeaderCannotBeDecodedEndsDeadAndTheNextRuns: a header that does not
// decode into the worker's type — a string where a number goes, or JSON nested deeper than
// encoding/json reads (written with SQL; jsonb stores it) — fails each attempt in
// Execution.Header, naming why; once its attempts are spent it is dead and the ones behind it run.
func TestASubmissionWhoseHeaderCannotBeDecodedEndsDeadAndTheNextRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	mistyped, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: map[string]string{"n": "seven"}, MaxAttempts: 2})
	require.NoError(t, err)
	deep, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: 1, MaxAttempts: 2})
	require.NoError(t, err)
	b.exec(t, `UPDATE taskling.submission SET header = (repeat('[', 10001) || repeat(']', 10001))::jsonb WHERE id = $1`, deep)
	behind, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: map[string]int{"n": 7}})
	require.NoError(t, err)
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		var h struct{ N int }
		if err := e.Header(&h); err != nil {
			return err
		}
		if h.N != 7 {
			return errors.New("wrong header")
		}
		return nil
	}, nil)
	b.waitStatus(t, behind, taskling.SubmissionCompleted)
	for _, id := range []int64{mistyped, deep} {
		sub := b.waitStatus(t, id, taskling.SubmissionDead)
		require.Equal(t, 2, sub.Attempts)
		require.True(t, strings.HasPrefix(sub.LastError, "taskling: decode header of execution"), sub.LastError)
	}
}

// deepJSONSQL is JSON that jsonb stores and encoding/json cannot read (nested deeper than 10 000):
// a value only SQL writes, which the read paths must still show.
const deepJSONSQL = `(repeat('[', 10001) || repeat(']', 10001))::jsonb`

// TestRowsWhoseJSONCannotBeReadStillShowWithTheirError: a submission, an execution and a block
// whose stored JSON encoding/json cannot read are listed and shown with the reason in place of
// the value, and each answer still encodes as JSON (issue 22: one such row made the API's
// answer, and the CLI's JSON output, fail for the whole list).
func TestRowsWhoseJSONCannotBeReadStillShowWithTheirError(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(2)))
	e := b.start(t, &taskling.StartOptions{Header: 1})
	objects, err := e.ObjectBlocks(b.ctx, []any{1, 2}, nil)
	require.NoError(t, err)
	sub, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: 1})
	require.NoError(t, err)
	good, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: 2})
	require.NoError(t, err)
	b.exec(t, `UPDATE taskling.submission SET header = `+deepJSONSQL+` WHERE id = $1`, sub)
	b.exec(t, `UPDATE taskling.task_execution SET header = `+deepJSONSQL+` WHERE id = $1`, e.ID())
	b.exec(t, `UPDATE taskling.block SET value = `+deepJSONSQL+` WHERE id = $1`, objects[0].ID)
	encodes := func(v any) {
		t.Helper()
		_, err := json.Marshal(v)
		require.NoError(t, err)
	}
	unreadable := func(raw json.RawMessage, why string) {
		t.Helper()
		require.Nil(t, raw)
		require.Contains(t, why, "cannot be read")
		require.Contains(t, why, "exceeded max depth")
	}

	s, err := b.client.Submission(b.ctx, sub)
	require.NoError(t, err)
	unreadable(s.Header, s.HeaderError)
	encodes(s)
	subs, err := b.client.Submissions(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	require.Len(t, subs, 2)
	require.Equal(t, good, subs[0].ID)
	require.JSONEq(t, `2`, string(subs[0].Header))
	require.Empty(t, subs[0].HeaderError)
	unreadable(subs[1].Header, subs[1].HeaderError)
	encodes(subs)

	d, err := b.client.Execution(b.ctx, e.ID())
	require.NoError(t, err)
	unreadable(d.Header, d.HeaderError)
	encodes(d)
	last, err := b.client.LastExecutions(b.ctx, b.app, b.task, 5)
	require.NoError(t, err)
	unreadable(last[0].Header, last[0].HeaderError)
	page, err := b.client.Executions(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	encodes(page)

	bl, err := b.client.Block(b.ctx, objects[0].ID)
	require.NoError(t, err)
	unreadable(bl.Value, bl.ValueError)
	encodes(bl)
	blocks, err := b.client.TaskBlocks(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	require.Len(t, blocks, 2)
	encodes(blocks)
	blocks, err = b.client.ExecutionBlocks(b.ctx, e.ID())
	require.NoError(t, err)
	require.Len(t, blocks, 2)
	require.JSONEq(t, `2`, string(blocks[1].Value))
	encodes(blocks)
}

// TestABlockWhoseRunPanicsEveryTimeEndsDeadAndTheBlocksBehindItRun: object blocks processed in
// order, one of which cannot be decoded and makes every run that starts it panic. Each run's
// panic leaves the blocks it took dead; the next run takes first the dead ones it never started,
// so the blocks behind the poison one complete, and the poison one, once its retries are spent,
// stays dead at its retry limit with a message naming the panic.
func TestABlockWhoseRunPanicsEveryTimeEndsDeadAndTheBlocksBehindItRun(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	retry := &taskling.RetryPolicy{Within: time.Hour, RetryLimit: 2}
	opts := &taskling.BlockOptions{ReprocessDead: retry, ReprocessFailed: retry}
	values := []any{map[string]any{"n": "seven"}, map[string]any{"n": 1}, map[string]any{"n": 2}}
	done := map[int]bool{}
	var poison int64
	for run := range 5 {
		err := b.client.Run(b.ctx, b.app, b.task, func(ctx context.Context, e *taskling.Execution) error {
			vals := values
			if run > 0 {
				vals = nil
			}
			blocks, err := e.ObjectBlocks(ctx, vals, opts)
			if err != nil {
				return err
			}
			for _, bl := range blocks {
				if err := bl.Start(ctx); err != nil {
					return err
				}
				var v struct{ N int }
				if err := bl.Decode(&v); err != nil {
					poison = bl.ID
					panic(err)
				}
				done[v.N] = true
				if err := bl.Complete(ctx, 1); err != nil {
					return err
				}
			}
			return nil
		}, nil)
		if run < 3 {
			var p *taskling.PanicError
			require.ErrorAs(t, err, &p, "run %d", run)
		} else {
			require.NoError(t, err, "run %d: the poison block is at its retry limit", run)
		}
	}
	require.Equal(t, map[int]bool{1: true, 2: true}, done)
	bl, err := b.client.Block(b.ctx, poison)
	require.NoError(t, err)
	require.Equal(t, taskling.BlockDead, bl.Status)
	require.True(t, bl.AtRetryLimit)
	require.Equal(t, 3, bl.Attempts)
	require.Contains(t, bl.Message, "panicked")
	require.Contains(t, bl.Message, "cannot unmarshal string")
}
