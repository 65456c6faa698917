package taskling_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/cronspec"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/taskling"
)

// The exactly-once test's processes are this test binary, re-executed to run
// TestScheduleHelperProcess with these variables set.
const (
	helperDBEnv   = "TASKLING_CRON_HELPER_DB"
	helperHostEnv = "TASKLING_CRON_HELPER_HOST"
)

const (
	onceSpec = "* * * * * *"
	onceApp  = "cron"
	onceTask = "exactly-once"
)

var onceOptions = &taskling.ScheduleOptions{
	CatchUp:  taskling.CatchUpRunAll,
	Settings: taskling.TaskSettings{KeepAliveInterval: 200 * time.Millisecond, KeepAliveDeathThreshold: time.Second},
}

// TestScheduleHelperProcess is one scheduler host of TestScheduleChaosExactlyOnceAcrossProcesses:
// it registers the task, runs the scheduler until its stdin closes, and records every run in
// the table cron_run (no unique constraint: a duplicate would show).
func TestScheduleHelperProcess(t *testing.T) {
	url := os.Getenv(helperDBEnv)
	if url == "" {
		t.Skip("runs only as a child of TestScheduleChaosExactlyOnceAcrossProcesses")
	}
	host := os.Getenv(helperHostEnv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: host})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fn := func(ctx context.Context, exec *taskling.Execution) error {
		_, err := pool.Exec(ctx, `INSERT INTO cron_run (instant, execution_id, host) VALUES ($1, $2, $3)`,
			exec.ScheduledFor(), exec.ID(), host)
		return err
	}
	if err := client.Schedule(ctx, onceApp, onceTask, onceSpec, fn, onceOptions); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	done := make(chan error, 1)
	go func() { done <- client.RunScheduler(ctx) }()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	client.Close()
	pool.Close()
	os.Exit(0)
}

// cronProcess is a running helper process.
type cronProcess struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bytes.Buffer
	writer *lockedWriter // stdout and stderr into out
	done   chan struct{}
}

func startCronProcess(t *testing.T, url, name string) *cronProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestScheduleHelperProcess$")
	cmd.Env = append(os.Environ(), helperDBEnv+"="+url, helperHostEnv+"="+name)
	return startProcess(t, name, cmd)
}

// startProcess starts a helper process (this test binary) and kills it at cleanup.
func startProcess(t *testing.T, name string, cmd *exec.Cmd) *cronProcess {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	p := &cronProcess{name: name, cmd: cmd, stdin: stdin, out: &bytes.Buffer{}, done: make(chan struct{})}
	p.writer = &lockedWriter{w: p.out}
	cmd.Stdout, cmd.Stderr = p.writer, p.writer // one lock for both
	require.NoError(t, cmd.Start())
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

// output is what the process printed so far.
func (p *cronProcess) output() string {
	p.writer.mu.Lock()
	defer p.writer.mu.Unlock()
	return p.out.String()
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestScheduleChaosExactlyOnceAcrossProcesses: three OS processes run the scheduler of one
// task with a 1-second spec under RunAll; midway one is killed with SIGKILL and restarted.
// Every instant of the run window is executed exactly once: no duplicate, no miss. Short
// profile: 60 instants; TASKLING_CHAOS=long: 200.
func TestScheduleChaosExactlyOnceAcrossProcesses(t *testing.T) {
	t.Parallel()
	instants := 60
	if os.Getenv("TASKLING_CHAOS") == "long" {
		instants = 200
	}
	ctx := context.Background()
	pool, url := pgtest.NewDB(t)
	_, err := pool.Exec(ctx, `CREATE TABLE cron_run (instant timestamptz NOT NULL, execution_id bigint NOT NULL, host text NOT NULL,
		ran_at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	require.NoError(t, err)

	// Register first, so that the window starts at the first instant after the registration.
	registrar := newClient(t, pool, &taskling.Config{HostName: "registrar"})
	require.NoError(t, registrar.Schedule(ctx, onceApp, onceTask, onceSpec,
		func(context.Context, *taskling.Execution) error { return nil }, onceOptions))
	var cursor time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT cursor_at FROM taskling.schedule`).Scan(&cursor))
	s, err := cronspec.Parse(onceSpec, "UTC")
	require.NoError(t, err)
	first := s.Next(cursor)
	last := first.Add(time.Duration(instants-1) * time.Second)

	procs := []*cronProcess{startCronProcess(t, url, "p1"), startCronProcess(t, url, "p2"), startCronProcess(t, url, "p3")}
	defer func() {
		if t.Failed() {
			for _, p := range procs {
				t.Logf("output of %s:\n%s", p.name, p.output())
			}
		}
	}()

	// Midway, between two instants, kill p2 without warning; restart it 3 s later.
	killAt := first.Add(time.Duration(instants/2)*time.Second + 500*time.Millisecond)
	sleepUntilDB(t, pool, killAt)
	// Between two runs, not in one: on a loaded machine a run may still be completing half a
	// second after its instant, and killing its host then makes the next instant an overlap.
	require.Eventually(t, func() bool {
		var running bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM taskling.task_execution e
			WHERE e.scheduled_for IS NOT NULL AND NOT e.blocked
			  AND NOT EXISTS (SELECT 1 FROM taskling.execution_end x WHERE x.execution_id = e.id))`).Scan(&running)
		return err == nil && !running
	}, 5*time.Second, 5*time.Millisecond, "no run ends")
	require.NoError(t, procs[1].cmd.Process.Kill())
	<-procs[1].done
	killed := procs[1]
	time.Sleep(3 * time.Second)
	procs[1] = startCronProcess(t, url, "p2")

	sleepUntilDB(t, pool, last.Add(1500*time.Millisecond))
	for _, p := range procs {
		_ = p.stdin.Close()
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s did not stop", p.name)
		}
		if p.cmd.ProcessState.ExitCode() != 0 {
			t.Errorf("%s exited with %d:\n%s", p.name, p.cmd.ProcessState.ExitCode(), p.output())
		}
	}
	require.Contains(t, killed.cmd.ProcessState.String(), "killed")

	rows, err := pool.Query(ctx, `SELECT instant, count(*), string_agg(DISTINCT host, ',') FROM cron_run
		WHERE instant BETWEEN $1 AND $2 GROUP BY instant ORDER BY instant`, first, last)
	require.NoError(t, err)
	runs := map[time.Time]int{}
	byHost := map[string]int{}
	for rows.Next() {
		var at time.Time
		var n int
		var hosts string
		require.NoError(t, rows.Scan(&at, &n, &hosts))
		runs[at.UTC()] = n
		for _, h := range strings.Split(hosts, ",") {
			byHost[h]++
		}
	}
	require.NoError(t, rows.Err())
	var duplicates, misses int
	var missed []string
	executions := 0
	for at := first; !at.After(last); at = s.Next(at) {
		n := runs[at.UTC()]
		executions += n
		switch {
		case n == 0:
			misses++
			missed = append(missed, at.Format(time.RFC3339))
		case n > 1:
			duplicates += n - 1
		}
	}
	var claimed, blocked int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT blocked), count(*) FILTER (WHERE blocked)
		FROM taskling.task_execution WHERE scheduled_for BETWEEN $1 AND $2`, first, last).Scan(&claimed, &blocked))
	hosts := make([]string, 0, len(byHost))
	for h, n := range byHost {
		hosts = append(hosts, fmt.Sprintf("%s=%d", h, n))
	}
	sort.Strings(hosts)
	t.Logf("exactly once across 3 processes (p2 killed with SIGKILL at instant %d and restarted 3 s later): instants=%d executions=%d duplicates=%d misses=%d claimed=%d blocked=%d by host: %s",
		instants/2, instants, executions, duplicates, misses, claimed, blocked, strings.Join(hosts, " "))
	require.Zero(t, duplicates, "duplicate runs")
	require.Zero(t, misses, "missed instants: %v", missed)
	require.Equal(t, instants, claimed, "one claimed execution per instant")
	require.Zero(t, blocked)
}
