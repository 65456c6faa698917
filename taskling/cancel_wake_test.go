package taskling_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// TestAListenerReconnectCancelsNoRunningSubmission: the listener, reconnecting, wakes every
// subscriber (anything may have been missed); a running submission's cancel watcher took that wake
// for a cancel and cancelled the run ("cancelled by an operator", with no reason:
// TestCancelWaitingAndRunningSubmissions failed so once under make test). The run goes on, and an
// operator's cancel afterwards still reaches it with its reason.
func TestAListenerReconnectCancelsNoRunningSubmission(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	id, err := b.client.Submit(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	started := make(chan struct{})
	cause := make(chan error, 1)
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return context.Cause(ctx)
	}, nil)
	<-started
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(pg_terminate_backend(pid))::integer FROM pg_stat_activity
            WHERE query = 'LISTEN taskling_slots' AND datname = current_database()`) == 1
	}, 10*time.Second, 50*time.Millisecond, "the listener's connection is cut")
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN taskling_slots' AND datname = current_database()`) == 1
	}, 10*time.Second, 50*time.Millisecond, "the listener reconnects")
	select {
	case err := <-cause:
		t.Fatalf("the reconnect cancelled the run: %v", err)
	case <-time.After(time.Second):
	}
	_, err = b.client.CancelSubmission(b.ctx, id, "operator said so")
	require.NoError(t, err)
	select {
	case err := <-cause:
		require.ErrorIs(t, err, taskling.ErrSubmissionCancelled)
		require.ErrorContains(t, err, "operator said so")
	case <-time.After(5 * time.Second):
		t.Fatal("the operator's cancel did not reach the run")
	}
}
