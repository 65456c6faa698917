package taskling_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

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
