package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/taskling"
)

// The flow scenarios measure what a user of waiting and submissions sees: how much of a limit's
// capacity jobs actually use when demand exceeds it, how fast a freed slot reaches a waiter in
// another process, and how submissions compare with direct starts.

// Busy runs jobs of length job in workers goroutines of client, each always wanting a slot of
// app/task (WaitForSlot), from start for d, and returns the time user functions ran inside the
// window [start, start+d], summed. Utilization = busy / (limit × d).
func Busy(ctx context.Context, client *taskling.Client, app, task string, workers int, job time.Duration, start time.Time, d time.Duration) (time.Duration, int64, error) {
	end := start.Add(d)
	var busy, runs atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	time.Sleep(time.Until(start))
	for range workers {
		wg.Go(func() {
			for time.Now().Before(end) {
				wctx, cancel := context.WithDeadline(ctx, end)
				exec, err := client.StartExecution(wctx, app, task, &taskling.StartOptions{WaitForSlot: true})
				cancel()
				if errors.Is(err, taskling.ErrLimitReached) {
					return // the window closed while waiting
				}
				if err != nil {
					errs <- err
					return
				}
				from := time.Now()
				time.Sleep(job)
				to := time.Now()
				if err := exec.Complete(ctx); err != nil {
					errs <- err
					return
				}
				runs.Add(1)
				busy.Add(int64(clip(from, to, start, end)))
			}
		})
	}
	wg.Wait()
	close(errs)
	return time.Duration(busy.Load()), runs.Load(), <-errs
}

// clip is the part of [from, to] inside [start, end].
func clip(from, to, start, end time.Time) time.Duration {
	if from.Before(start) {
		from = start
	}
	if to.After(end) {
		to = end
	}
	return max(0, to.Sub(from))
}

// Handoff is one grant of a ping-pong between processes: when this process's StartExecution
// returned, and when its Complete returned, in Unix nanoseconds.
type Handoff struct {
	Granted, Released int64
}

// PingPong holds app/task's only slot for hold, then waits for it again, n times; run in two
// processes, every grant but a few is a handover from the other process.
func PingPong(ctx context.Context, client *taskling.Client, app, task string, n int, hold time.Duration) ([]Handoff, error) {
	out := make([]Handoff, 0, n)
	for range n {
		exec, err := client.StartExecution(ctx, app, task, &taskling.StartOptions{WaitForSlot: true})
		if err != nil {
			return out, err
		}
		h := Handoff{Granted: time.Now().UnixNano()}
		time.Sleep(hold)
		if err := exec.Complete(ctx); err != nil {
			return out, err
		}
		h.Released = time.Now().UnixNano()
		out = append(out, h)
	}
	return out, nil
}

// HandoverLatencies merges the processes' ping-pong logs (one per process) and returns, for
// every grant that followed another process's release, the time from that Complete returning to
// this StartExecution returning.
func HandoverLatencies(logs [][]Handoff) []time.Duration {
	type ev struct {
		proc int
		h    Handoff
	}
	var all []ev
	for p, l := range logs {
		for _, h := range l {
			all = append(all, ev{p, h})
		}
	}
	slices.SortFunc(all, func(a, b ev) int { return int(a.h.Granted - b.h.Granted) })
	var out []time.Duration
	for i := 1; i < len(all); i++ {
		if prev := all[i-1]; prev.proc != all[i].proc {
			out = append(out, time.Duration(all[i].h.Granted-prev.h.Released))
		}
	}
	return out
}

// Drain measures submissions against direct starts at the same concurrency on one task of limit
// workers: it submits n no-op submissions, then times Work with workers workers until all are
// completed; and it times n direct StartExecution(WaitForSlot)+Complete cycles of workers
// goroutines. It returns both rates (runs per second).
func Drain(ctx context.Context, client *taskling.Client, pool *pgxpool.Pool, app string, workers, n int) (submitted, direct float64, err error) {
	const task = "drain"
	if err := SubmitMany(ctx, client, app, task, n); err != nil {
		return 0, 0, err
	}
	var done atomic.Int64
	all := make(chan struct{})
	wctx, stop := context.WithCancel(ctx)
	began := time.Now()
	workErr := make(chan error, 1)
	go func() {
		workErr <- client.Work(wctx, app, task, func(context.Context, *taskling.Execution) error {
			if done.Add(1) == int64(n) {
				close(all)
			}
			return nil
		}, &taskling.WorkOptions{Workers: workers})
	}()
	select {
	case <-all:
	case err := <-workErr:
		stop()
		return 0, 0, fmt.Errorf("work ended early: %w", err)
	case <-time.After(10 * time.Minute):
		stop()
		return 0, 0, fmt.Errorf("drain: %d of %d ran in 10 minutes", done.Load(), n)
	}
	// Completed means the end committed: wait for the last attempts' ends, then stop.
	for {
		var left int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM taskling.submission WHERE status <> 3`).Scan(&left); err != nil {
			stop()
			return 0, 0, err
		}
		if left == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	submitted = float64(n) / time.Since(began).Seconds()
	stop()
	if err := <-workErr; err != nil {
		return 0, 0, err
	}

	var cycles atomic.Int64
	began = time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for cycles.Add(1) <= int64(n) {
				exec, err := client.StartExecution(ctx, app, "direct", &taskling.StartOptions{WaitForSlot: true})
				if err == nil {
					err = exec.Complete(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	direct = float64(n) / time.Since(began).Seconds()
	close(errs)
	return submitted, direct, <-errs
}

// SubmitMany stores n no-op submissions of app/task, 16 at a time.
func SubmitMany(ctx context.Context, client *taskling.Client, app, task string, n int) error {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := client.Submit(ctx, app, task, nil); err != nil {
				first.CompareAndSwap(nil, &err)
			}
		})
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return nil
}

// EndToEnd submits n submissions one after another, every gap, to a task idle workers wait on,
// and returns each one's time from Submit returning to its completion being visible (polled
// every millisecond).
func EndToEnd(ctx context.Context, client *taskling.Client, app string, workers, n int, gap time.Duration) ([]time.Duration, error) {
	const task = "end-to-end"
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	workErr := make(chan error, 1)
	go func() {
		workErr <- client.Work(wctx, app, task, func(_ context.Context, e *taskling.Execution) error {
			return nil
		}, &taskling.WorkOptions{Workers: workers})
	}()
	time.Sleep(200 * time.Millisecond) // the workers are idle, listening
	var out []time.Duration
	for range n {
		id, err := client.Submit(ctx, app, task, nil)
		if err != nil {
			return out, err
		}
		submittedAt := time.Now()
		for {
			s, err := client.Submission(ctx, id)
			if err != nil {
				return out, err
			}
			if s.Status == taskling.SubmissionCompleted {
				break
			}
			if time.Since(submittedAt) > time.Minute {
				return out, fmt.Errorf("submission %d still %s after a minute", id, s.Status)
			}
			time.Sleep(time.Millisecond)
		}
		out = append(out, time.Since(submittedAt))
		time.Sleep(gap)
	}
	stop()
	return out, <-workErr
}
