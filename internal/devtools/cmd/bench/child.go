package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/internal/devtools/bench"
	"github.com/taskling-go/taskling/taskling"
)

// childFlags configure a child process of a multi-process scenario.
type childFlags struct {
	mode       string // "cycles" or "holders"; "" in the parent
	goroutines int
	limit      int
	iso        string
	startAt    int64
	duration   time.Duration
	tasks      int
	holders    int
}

func (c *childFlags) register() {
	flag.StringVar(&c.mode, "child", "", "internal: run one process of a multi-process scenario (cycles, holders, busy, pingpong, blocks, rawblocks)")
	flag.IntVar(&c.goroutines, "goroutines", 4, "internal: goroutines of a cycles child")
	flag.IntVar(&c.limit, "limit", 16, "internal: limit declared by a child")
	flag.StringVar(&c.iso, "isolation", "serializable", "internal: isolation of a child")
	flag.Int64Var(&c.startAt, "start-at", 0, "internal: unix nanoseconds at which a child starts measuring")
	flag.DurationVar(&c.duration, "child-duration", 0, "internal: measuring time of a child")
	flag.IntVar(&c.tasks, "tasks", 80, "internal: tasks of a holders child")
	flag.IntVar(&c.holders, "child-holders", 0, "internal: executions a holders child holds (blocks: blocks per execution)")
}

// childResult is what a child prints.
type childResult struct {
	bench.Result
	LeaseLosses int64
	CPU         time.Duration   // the child's user + system CPU time
	Busy        time.Duration   // busy: the time its jobs ran inside the window
	Handoffs    []bench.Handoff // pingpong: its grants
}

// childDatabaseEnv names a child's database in its environment (the parent's names the server):
// a command line is anyone's to read (ps), and the URL holds the password.
const childDatabaseEnv = "TASKLING_DATABASE_URL"

func (c *childFlags) run(ctx context.Context) error {
	counter := &bench.StatementCounter{}
	cfg, err := pgxpool.ParseConfig(os.Getenv(childDatabaseEnv))
	if err != nil {
		return err
	}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	isolation := taskling.IsolationSerializable
	if c.iso == "read committed" {
		isolation = taskling.IsolationReadCommitted
	}
	settings := taskling.TaskSettings{ConcurrencyLimit: c.limit}
	if c.mode == "holders" {
		settings = bench.HeartbeatSettings(c.limit)
	}
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: fmt.Sprintf("bench-%d", os.Getpid()),
		Isolation: isolation, Defaults: settings})
	if err != nil {
		return err
	}
	defer client.Close()
	var out childResult
	switch c.mode {
	case "cycles":
		out.Result, err = c.cycles(ctx, client, counter)
	case "holders":
		out, err = c.hold(ctx, client)
	case "busy":
		// Open the connections, register the session and create the task before the common start.
		if err = warm(ctx, pool, client, c.goroutines); err == nil {
			out.Busy, out.Cycles, err = bench.Busy(ctx, client, "bench", "busy", c.goroutines, 200*time.Millisecond, time.Unix(0, c.startAt), c.duration)
		}
	case "blocks", "rawblocks":
		if err = warm(ctx, pool, client, c.goroutines); err == nil {
			start := time.Unix(0, c.startAt)
			if c.mode == "blocks" {
				out.Cycles, err = bench.BlockCycles(ctx, client, "bench", "blocks", c.goroutines, c.holders, start, c.duration)
			} else {
				out.Cycles, err = bench.RawBlockCycles(ctx, pool, c.goroutines, c.holders, start, c.duration)
			}
		}
	case "pingpong":
		time.Sleep(time.Until(time.Unix(0, c.startAt)))
		out.Handoffs, err = bench.PingPong(ctx, client, "bench", "pingpong", c.holders, 2*time.Millisecond)
	default:
		err = fmt.Errorf("unknown child mode %q", c.mode)
	}
	if err != nil {
		return err
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		out.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

func (c *childFlags) cycles(ctx context.Context, client *taskling.Client, counter *bench.StatementCounter) (bench.Result, error) {
	// Warm up: create the task row and prepare the statements before the common start.
	if e, err := client.StartExecution(ctx, "bench", "task-0", nil); err == nil {
		_ = e.Complete(ctx)
	}
	time.Sleep(time.Until(time.Unix(0, c.startAt)))
	n0 := counter.Count()
	res, err := bench.Taskling(ctx, client, "bench", c.goroutines, 1, c.duration)
	res.Statements = counter.Count() - n0
	return res, err
}

// hold starts its holders before the common start, keeps them through the window, then
// completes them.
func (c *childFlags) hold(ctx context.Context, client *taskling.Client) (childResult, error) {
	h, err := bench.Hold(ctx, client, "bench", c.tasks, c.holders)
	if err != nil {
		return childResult{}, err
	}
	if time.Until(time.Unix(0, c.startAt)) < 0 {
		_ = h.Release(ctx)
		return childResult{}, fmt.Errorf("%d holders took past the common start", c.holders)
	}
	time.Sleep(time.Until(time.Unix(0, c.startAt).Add(c.duration)))
	lost := h.LeaseLosses()
	if err := h.Release(ctx); err != nil && lost == 0 {
		return childResult{}, err
	}
	return childResult{LeaseLosses: lost}, nil
}

// warm opens n of the pool's connections (at most its size) and registers the client's session.
func warm(ctx context.Context, pool *pgxpool.Pool, client *taskling.Client, n int) error {
	n = min(n, int(pool.Config().MaxConns))
	conns := make([]*pgxpool.Conn, 0, n)
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release() // open and back in the pool, for the client below
	}
	if err := client.UpdateTaskSettings(ctx, "bench", "busy", taskling.SettingsUpdate{}); err != nil {
		return err
	}
	e, err := client.StartExecution(ctx, "bench", "warm-up", nil)
	if err != nil {
		return err
	}
	return e.Complete(ctx)
}

// children runs n child processes with args and collects their results.
func children(ctx context.Context, n int, dbURL string, args ...string) ([]childResult, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		out  []childResult
		wg   sync.WaitGroup
		errs = make(chan error, n)
	)
	for range n {
		cmd := childCommand(ctx, self, dbURL, args...)
		cmd.Stderr = os.Stderr
		wg.Go(func() {
			b, err := cmd.Output()
			if err != nil {
				errs <- err
				return
			}
			var res childResult
			if err := json.Unmarshal(b, &res); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			out = append(out, res)
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return out, err
	}
	return out, nil
}

// childCommand is one child process on the database of dbURL, named in its environment.
func childCommand(ctx context.Context, self, dbURL string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = append(os.Environ(), childDatabaseEnv+"="+dbURL)
	return cmd
}

// multiProcess runs procs child processes of goroutines each against one task of the database.
func multiProcess(ctx context.Context, pool *pgxpool.Pool, procs, goroutines int, iso taskling.Isolation, d time.Duration) (bench.Result, error) {
	startAt := time.Now().Add(2 * time.Second) // time for every child to connect and warm up
	results, err := children(ctx, procs, pool.Config().ConnString(), "-child", "cycles",
		"-goroutines", fmt.Sprint(goroutines), "-limit", fmt.Sprint(procs*goroutines),
		"-isolation", isoName(iso), "-start-at", fmt.Sprint(startAt.UnixNano()), "-child-duration", d.String())
	var merged bench.Result
	for _, r := range results {
		merged.Merge(r.Result)
	}
	return merged, err
}
