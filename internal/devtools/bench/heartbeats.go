package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/taskling"
)

// HeartbeatSettings are the settings of the heartbeat scenario: interval 1 s, threshold 2 s, the
// default safety margin, tasks of slots slots.
func HeartbeatSettings(slots int) taskling.TaskSettings {
	return taskling.TaskSettings{ConcurrencyLimit: slots, KeepAliveInterval: time.Second, KeepAliveDeathThreshold: 2 * time.Second}
}

// Holders are executions a process holds while the heartbeat scenario measures.
type Holders struct {
	execs []*taskling.Execution
	lost  atomic.Int64
}

// Hold starts holders executions of client (declaring HeartbeatSettings), spread evenly over
// tasks tasks of app, with up to 32 starts in flight, and counts the leases they lose.
func Hold(ctx context.Context, client *taskling.Client, app string, tasks, holders int) (*Holders, error) {
	h := &Holders{}
	client.AddHooks(taskling.Hooks{LeaseLost: func(string, string) { h.lost.Add(1) }})
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		next atomic.Int64
		errs = make(chan error, 32)
	)
	for range 32 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(holders) {
					return
				}
				e, err := client.StartExecution(ctx, app, fmt.Sprintf("hb-%d", i%int64(tasks)), nil)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				h.execs = append(h.execs, e)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		_ = h.Release(ctx)
		return nil, fmt.Errorf("bench: start holder: %w", err)
	}
	return h, nil
}

// LeaseLosses is the number of holders that lost their lease so far.
func (h *Holders) LeaseLosses() int64 { return h.lost.Load() }

// Release completes every holder.
func (h *Holders) Release(ctx context.Context) error {
	var first error
	for _, e := range h.execs {
		if err := e.Complete(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// DBCommits is the number of transactions the pool's database committed (pg_stat_database, which
// lags by up to a second: measure over long windows).
func DBCommits(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n, err
}

// CPUTimes are the machine's CPU times (all CPUs) from /proc/stat, in clock ticks.
type CPUTimes struct{ Busy, Total int64 }

// ReadCPU reads /proc/stat; on systems without it, the zero value.
func ReadCPU() CPUTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	var t CPUTimes
	for i, f := range fields[1:] {
		v, _ := strconv.ParseInt(f, 10, 64)
		t.Total += v
		if i != 3 && i != 4 { // idle, iowait
			t.Busy += v
		}
	}
	return t
}

// BusySince is the fraction of the machine's CPU time that was busy since t.
func (t CPUTimes) BusySince(start CPUTimes) float64 {
	if t.Total <= start.Total {
		return 0
	}
	return float64(t.Busy-start.Busy) / float64(t.Total-start.Total)
}
