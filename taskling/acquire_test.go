package taskling_test

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

func TestLimitOneGrantsOneOfTwoConcurrentStarts(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	var wg sync.WaitGroup
	results := make([]error, 2)
	execs := make([]*taskling.Execution, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			execs[i], results[i] = b.client.StartExecution(b.ctx, b.app, b.task, nil)
		}()
	}
	wg.Wait()
	granted := 0
	for i, err := range results {
		if err == nil {
			granted++
			require.NoError(t, execs[i].Complete(b.ctx))
		} else {
			require.ErrorIs(t, err, taskling.ErrLimitReached)
		}
	}
	require.Equal(t, 1, granted)

	infos, err := b.client.LastExecutions(b.ctx, b.app, b.task, 10)
	require.NoError(t, err)
	require.Len(t, infos, 2)
	var blocked *taskling.ExecutionInfo
	for i := range infos {
		if infos[i].Status == taskling.StatusBlocked {
			blocked = &infos[i]
		}
	}
	require.NotNil(t, blocked, "the denied attempt is recorded as Blocked")
	require.Equal(t, []taskling.EventType{taskling.EventStart, taskling.EventBlocked, taskling.EventEnd}, eventTypes(t, b, blocked.ID))
}

func TestLimitFourGrantsFourOfFiveStarts(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(4))
	for range 4 {
		b.start(t, nil)
	}
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached)
	require.Equal(t, 4, b.count(t, `SELECT count(*) FROM taskling.task_execution WHERE NOT blocked`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.task_execution WHERE blocked`))
}

func TestConcurrentCyclesNeverOverlap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		isolation taskling.Isolation
		clients   int // separate clients act like separate hosts: no local queueing between them
	}{
		{"serializable/one client", taskling.IsolationSerializable, 1},
		{"serializable/four clients", taskling.IsolationSerializable, 4},
		{"read committed/four clients", taskling.IsolationReadCommitted, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := withLimit(1)
			cfg.Isolation = tc.isolation
			b := setup(t, cfg)
			clients := []*taskling.Client{b.client}
			for len(clients) < tc.clients {
				c := *cfg
				clients = append(clients, newClient(t, b.pool, &c))
			}
			const goroutines, cycles = 16, 100
			var inside, granted atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					client := clients[g%len(clients)]
					for done := 0; done < cycles; {
						exec, err := client.StartExecution(b.ctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true})
						if err != nil {
							errs <- err
							return
						}
						if n := inside.Add(1); n != 1 {
							errs <- errors.New("two holders at once")
						}
						runtime.Gosched()
						inside.Add(-1)
						granted.Add(1)
						if err := exec.Complete(b.ctx); err != nil {
							errs <- err
							return
						}
						done++
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.Equal(t, int64(goroutines*cycles), granted.Load())
			// Every grant got a distinct, increasing fencing token and was released.
			require.Equal(t, goroutines*cycles, b.count(t, `SELECT count(DISTINCT fence) FROM taskling.task_execution WHERE NOT blocked`))
			require.Equal(t, 0, b.count(t, `SELECT count(*) FROM taskling.task_execution e
WHERE NOT EXISTS (SELECT 1 FROM taskling.execution_end x WHERE x.execution_id = e.id) AND NOT e.blocked`))
		})
	}
}

func TestFencingTokensIncreasePerTask(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(2))
	var last int64
	for range 5 {
		e := b.start(t, nil)
		require.Greater(t, e.FencingToken(), last)
		last = e.FencingToken()
		require.NoError(t, e.Complete(b.ctx))
	}
}

func TestCorruptedTokensAreAnErrorNamingTaskAndToken(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	require.NoError(t, b.start(t, nil).Complete(b.ctx))
	const bad = `I:not-a-uuid,S:0,G:5`
	b.exec(t, `UPDATE taskling.task_definition SET tokens = $1`, bad)

	err := b.denied(t, nil)
	require.NotErrorIs(t, err, taskling.ErrLimitReached)
	require.Contains(t, err.Error(), "app/task")
	require.Contains(t, err.Error(), "not-a-uuid")
	require.Contains(t, err.Error(), "field I")
	var stored string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT tokens FROM taskling.task_definition`).Scan(&stored))
	require.Equal(t, bad, stored, "a corrupted list is never reset (a reset could over-grant)")
}

func eventTypes(t *testing.T, b *testBundle, execID int64) []taskling.EventType {
	t.Helper()
	d, err := b.client.Execution(b.ctx, execID)
	require.NoError(t, err)
	var out []taskling.EventType
	for _, ev := range d.Events {
		out = append(out, ev.Type)
	}
	return out
}
