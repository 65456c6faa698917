package taskling_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// TestSubmissionHeadersWithJSONEscapesReadBack: a header holding escapes (\" \n \\) reads back
// equal from Submission, Submissions and the claimed run's Execution.Header, and does not stop
// the queue (issue 22: they were read through bytea, which treats \ as its own escape).
func TestSubmissionHeadersWithJSONEscapesReadBack(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	headers := []string{`{"note":"say \"hi\""}`, `{"lines":"a\nb\tc"}`, `{"path":"C:\\dir\\"}`, `"\\000\\x41"`, `["\u00e9\ud83d\ude00"]`}
	ids := make([]int64, len(headers))
	for i, h := range headers {
		id, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: json.RawMessage(h)})
		require.NoError(t, err)
		ids[i] = id
		sub, err := b.client.Submission(b.ctx, id)
		require.NoError(t, err)
		require.JSONEq(t, h, string(sub.Header))
	}
	list, err := b.client.Submissions(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	require.Len(t, list, len(headers))

	var mu sync.Mutex
	got := map[int64]string{}
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		var raw json.RawMessage
		if err := e.Header(&raw); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		got[e.SubmissionID()] = string(raw)
		return nil
	}, nil)
	for i, id := range ids {
		b.waitStatus(t, id, taskling.SubmissionCompleted)
		mu.Lock()
		require.JSONEq(t, headers[i], got[id])
		mu.Unlock()
	}
}

// TestSubmissionHeaderLongerAsStoredStillRuns: a header near the size limit comes back from jsonb
// longer (1e+21 as 22 digits), and its attempt still starts with it (issue 22: the claimed header
// was checked against MaxHeaderLength again, and the Work loop retried it forever).
func TestSubmissionHeaderLongerAsStoredStillRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	ones := make([]float64, (taskling.MaxHeaderLength-2)/len("1e+21,"))
	for i := range ones {
		ones[i] = 1e21
	}
	big, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: ones, MaxAttempts: 1})
	require.NoError(t, err)
	behind, err := b.client.Submit(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	sub, err := b.client.Submission(b.ctx, big)
	require.NoError(t, err)
	require.Greater(t, len(sub.Header), taskling.MaxHeaderLength, "jsonb's text is longer than the header submitted")

	got := make(chan []float64, 2)
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		var h []float64
		if err := e.Header(&h); err != nil {
			return err
		}
		got <- h
		return nil
	}, nil)
	b.waitStatus(t, big, taskling.SubmissionCompleted)
	b.waitStatus(t, behind, taskling.SubmissionCompleted)
	require.Equal(t, ones, <-got)
}
