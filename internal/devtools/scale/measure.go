package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskling-go/taskling/taskling"
)

// Latencies are the durations of one kind of call.
type Latencies []time.Duration

// Percentile returns the p-th percentile (0–100), nearest rank; 0 when empty.
func (l Latencies) Percentile(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p/100)]
}

// timed calls f n times in a row and returns each call's duration.
func timed(n int, f func(i int) error) (Latencies, error) {
	out := make(Latencies, 0, n)
	for i := range n {
		began := time.Now()
		if err := f(i); err != nil {
			return out, err
		}
		out = append(out, time.Since(began))
	}
	return out, nil
}

// lastExecutions times client.LastExecutions(n) over tasks picked at random (a fixed sequence).
func lastExecutions(ctx context.Context, client *taskling.Client, tasks, calls, n int) (Latencies, error) {
	r := rand.New(rand.NewPCG(13, 1))
	return timed(calls, func(int) error {
		t := r.IntN(tasks)
		got, err := client.LastExecutions(ctx, AppName(t), TaskName(t, tasks), n)
		if err == nil && len(got) == 0 {
			err = fmt.Errorf("no executions of %s/%s", AppName(t), TaskName(t, tasks))
		}
		return err
	})
}

// apiGet times GET base+path calls times; every answer must be 200 with a page of tasks.
func apiGet(ctx context.Context, hc *http.Client, base, path string, calls int) (Latencies, error) {
	return timed(calls, func(int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
		}
		var page struct {
			Tasks []json.RawMessage `json:"tasks"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return fmt.Errorf("GET %s: %w", path, err)
		}
		if len(page.Tasks) == 0 {
			return fmt.Errorf("GET %s: no tasks", path)
		}
		return nil
	})
}

// Phases of an acquire measurement.
const (
	phaseIdle    = iota // no cleanup has started yet
	phaseCleanup        // a cleanup batch may be running
	phasePaused         // the cleanup waits between two batches (interleaved windows)
	phaseOff            // warming up, or after the cleanup: not counted
	phases
)

// acquirer runs StartExecution + Complete cycles on a few tasks from a few goroutines and files
// each cycle's latency under the phase it ran in; a cycle during which the phase changed is
// dropped.
type acquirer struct {
	client  *taskling.Client
	tasks   []int // seeded task numbers
	ntasks  int   // how many tasks were seeded (for their names)
	perTask int   // goroutines per task = its limit

	state atomic.Uint64 // epoch<<2 | phase: written by one goroutine (setPhase)

	mu        sync.Mutex
	lat       [phases]Latencies
	counted   [phases]atomic.Int64 // cycles filed under each phase so far
	denied    atomic.Int64
	straddled atomic.Int64
}

func (a *acquirer) setPhase(p int) {
	old := a.state.Load()
	a.state.Store((old>>2+1)<<2 | uint64(p))
}

// run cycles until stop is closed or ctx ends; the first error stops every goroutine.
func (a *acquirer) run(ctx context.Context, stop <-chan struct{}) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(a.tasks)*a.perTask)
	for g := range len(a.tasks) * a.perTask {
		t := a.tasks[g%len(a.tasks)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.loop(ctx, stop, AppName(t), TaskName(t, a.ntasks)); err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (a *acquirer) loop(ctx context.Context, stop <-chan struct{}, app, task string) error {
	var lat [phases]Latencies
	defer func() {
		a.mu.Lock()
		for p := range lat {
			a.lat[p] = append(a.lat[p], lat[p]...)
		}
		a.mu.Unlock()
	}()
	for {
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		s0 := a.state.Load()
		began := time.Now()
		exec, err := a.client.StartExecution(ctx, app, task, nil)
		if errors.Is(err, taskling.ErrLimitReached) {
			a.denied.Add(1)
			continue
		}
		if err != nil {
			return fmt.Errorf("start %s/%s: %w", app, task, err)
		}
		if err := exec.Complete(ctx); err != nil {
			return fmt.Errorf("complete %s/%s: %w", app, task, err)
		}
		took := time.Since(began)
		if s1 := a.state.Load(); s1 != s0 {
			a.straddled.Add(1)
			continue
		}
		lat[s0&3] = append(lat[s0&3], took)
		a.counted[s0&3].Add(1)
	}
}

// pacer interleaves the cleanup with pauses: called after each of its batches (the cleanup's
// Progress), it pauses it, between two batches, for pause once every running stretch.
type pacer struct {
	a              *acquirer
	every, pause   time.Duration
	stretch        time.Time
	paused         time.Duration
	windows, calls int
}

func (p *pacer) start() {
	p.stretch = time.Now()
	p.a.setPhase(phaseCleanup)
}

func (p *pacer) afterBatch() {
	p.calls++
	if p.every <= 0 || time.Since(p.stretch) < p.every {
		return
	}
	p.a.setPhase(phasePaused)
	began := time.Now()
	time.Sleep(p.pause)
	p.paused += time.Since(began)
	p.windows++
	p.start()
}
