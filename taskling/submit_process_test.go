package taskling_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/taskling"
)

// The processes of TestSubmissionKilledAtEveryPointIsCompensated are this test binary,
// re-executed to run TestSubmitProcessHelper with these variables set.
const (
	killHelperDBEnv   = "TASKLING_KILL_HELPER_DB"
	killHelperHostEnv = "TASKLING_KILL_HELPER_HOST"
	killHelperRoleEnv = "TASKLING_KILL_HELPER_ROLE" // submit, or work
	killHelperFnEnv   = "TASKLING_KILL_HELPER_FN"   // hang, return, or wait
)

const (
	killApp  = "kill"
	killTask = "task"
	// killSQL is the table every run of fn (in any process) records itself in.
	killSQL = `CREATE TABLE submit_run (submission_id bigint NOT NULL, attempt integer NOT NULL, execution_id bigint NOT NULL,
		fence bigint NOT NULL, host text NOT NULL, ran_at timestamptz NOT NULL DEFAULT clock_timestamp())`
	recordRunSQL = `INSERT INTO submit_run (submission_id, attempt, execution_id, fence, host) VALUES ($1, $2, $3, $4, $5)`
)

// killThreshold is how long a silent process lives: short, so that killed children are reclaimed
// quickly, but not 1 s, at which a live child starting up beside make test's other packages was
// judged dead before its first run (its submission then had 2 attempts where the row wanted 1).
const killThreshold = 3 * time.Second

// killConfig is every process's configuration: one slot, fast liveness (a silent process is
// dead after killThreshold) and a fast poll (Work's recovery loop runs every 400 ms).
func killConfig(host string) *taskling.Config {
	return &taskling.Config{HostName: host, MaxPollInterval: 200 * time.Millisecond,
		Defaults: taskling.TaskSettings{ConcurrencyLimit: 1, KeepAliveInterval: 200 * time.Millisecond, KeepAliveDeathThreshold: killThreshold}}
}

// TestSubmitProcessHelper is one process of TestSubmissionKilledAtEveryPointIsCompensated. Role
// submit: it submits one submission of kill/task, prints its id and waits to be killed. Role work:
// it runs Work on kill/task; fn records its run in submit_run, prints "running", then hangs
// (fn=hang), returns nil (fn=return), or waits for a line "go" on stdin, prints "returning" and
// returns nil (fn=wait). Its connections are named after its host (application_name), so the
// parent can find its backends. It exits when its stdin closes.
func TestSubmitProcessHelper(t *testing.T) {
	url := os.Getenv(killHelperDBEnv)
	if url == "" {
		t.Skip("runs only as a child of TestSubmissionKilledAtEveryPointIsCompensated")
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	host := os.Getenv(killHelperHostEnv)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		fail(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = host
	// A statement the parent holds up must run to its end once let go, even though this process
	// is dead by then, as it does by default (PostgreSQL 14+ can be told to check the client).
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `SELECT set_config('client_connection_check_interval', '0', false)
			WHERE current_setting('client_connection_check_interval', true) IS NOT NULL`)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fail(err)
	}
	client, err := taskling.NewClient(pool, killConfig(host))
	if err != nil {
		fail(err)
	}
	proceed := make(chan struct{})
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			if in.Text() == "go" {
				close(proceed)
			}
		}
		os.Exit(0) // the parent is done
	}()
	switch role := os.Getenv(killHelperRoleEnv); role {
	case "submit":
		id, err := client.Submit(ctx, killApp, killTask, nil)
		if err != nil {
			fail(err)
		}
		fmt.Printf("submitted %d\n", id)
		select {}
	case "work":
		mode := os.Getenv(killHelperFnEnv)
		fn := func(ctx context.Context, e *taskling.Execution) error {
			if _, err := pool.Exec(ctx, recordRunSQL, e.SubmissionID(), e.Attempt(), e.ID(), e.FencingToken(), host); err != nil {
				return err
			}
			fmt.Printf("running execution %d, attempt %d\n", e.ID(), e.Attempt())
			switch mode {
			case "hang":
				select {}
			case "wait":
				<-proceed
				fmt.Println("returning")
			}
			return nil
		}
		fail(fmt.Errorf("Work returned: %v", client.Work(ctx, killApp, killTask, fn, nil)))
	default:
		fail(fmt.Errorf("unknown role %q", role))
	}
}

// killRig is one row's database, its parent client and its child processes.
type killRig struct {
	b     *testBundle
	url   string
	procs []*cronProcess
}

func newKillRig(t *testing.T) *killRig {
	t.Helper()
	pool, url := pgtest.NewDB(t)
	r := &killRig{url: url, b: &testBundle{ctx: context.Background(), pool: pool, app: killApp, task: killTask,
		client: newClient(t, pool, killConfig("parent"))}}
	r.b.exec(t, killSQL)
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range r.procs {
				t.Logf("output of %s:\n%s", p.name, p.output())
			}
		}
	})
	return r
}

// child starts a helper process named host.
func (r *killRig) child(t *testing.T, host, role, fn string) *cronProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSubmitProcessHelper$")
	cmd.Env = append(os.Environ(), killHelperDBEnv+"="+r.url, killHelperHostEnv+"="+host, killHelperRoleEnv+"="+role, killHelperFnEnv+"="+fn)
	p := startProcess(t, host, cmd)
	r.procs = append(r.procs, p)
	return p
}

// waitOutput waits for p to print s.
func waitOutput(t *testing.T, p *cronProcess, s string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(p.output(), s) }, 30*time.Second, 5*time.Millisecond,
		"%s did not print %q:\n%s", p.name, s, p.output())
}

// kill sends SIGKILL to p and waits for it to die.
func kill(t *testing.T, p *cronProcess) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Kill())
	<-p.done
	require.Contains(t, p.cmd.ProcessState.String(), "killed")
	require.NotContains(t, p.output(), "DATA RACE")
}

func (r *killRig) submit(t *testing.T, maxAttempts int) int64 {
	t.Helper()
	id, err := r.b.client.Submit(r.b.ctx, killApp, killTask, &taskling.SubmitOptions{MaxAttempts: maxAttempts})
	require.NoError(t, err)
	return id
}

// claimedBy waits until the submission is claimed by host's session and host waits in the
// task's queue for a slot.
func (r *killRig) claimedBy(t *testing.T, id int64, host string) {
	t.Helper()
	require.Eventually(t, func() bool {
		if r.tryCount(`SELECT count(*) FROM taskling.submission s JOIN taskling.session w ON w.id = s.claimed_by
			WHERE s.id = $1 AND s.status = 1 AND w.host_name = $2`, id, host) != 1 {
			return false
		}
		task, err := r.b.client.Task(r.b.ctx, killApp, killTask)
		return err == nil && task.Waiting == 1
	}, 30*time.Second, 5*time.Millisecond, "%s claims submission %d and waits for a slot", host, id)
}

// lock takes a row lock in a transaction of its own (rolled back at cleanup) and returns that
// transaction and its backend's pid.
func (r *killRig) lock(t *testing.T, sql string, args ...any) (pgx.Tx, int) {
	t.Helper()
	tx, err := r.b.pool.Begin(r.b.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	var pid int
	require.NoError(t, tx.QueryRow(r.b.ctx, sql, args...).Scan(&pid))
	return tx, pid
}

// tryCount is count for the conditions of Eventually and Never, which run on goroutines of
// their own (no require there): -1 on error.
func (r *killRig) tryCount(sql string, args ...any) int {
	var n int
	if err := r.b.pool.QueryRow(r.b.ctx, sql, args...).Scan(&n); err != nil {
		return -1
	}
	return n
}

// blockedBy reports whether a backend of host waits for a lock held by backend pid.
func (r *killRig) blockedBy(host string, pid int) bool {
	return r.tryCount(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND $2 = ANY (pg_blocking_pids(pid))`, host, pid) > 0
}

// waitStatus waits for the submission to reach status.
func (r *killRig) waitStatus(t *testing.T, id int64, status taskling.SubmissionStatus) {
	t.Helper()
	require.Eventually(t, func() bool {
		sub, err := r.b.client.Submission(r.b.ctx, id)
		return err == nil && sub.Status == status
	}, 30*time.Second, 10*time.Millisecond, "submission %d to become %s", id, status)
}

// gone waits until no backend of host is left.
func (r *killRig) gone(t *testing.T, host string) {
	t.Helper()
	require.Eventually(t, func() bool {
		return r.tryCount(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, host) == 0
	}, 30*time.Second, 10*time.Millisecond, "the backends of %s end", host)
}

func (r *killRig) submission(t *testing.T, id int64) taskling.Submission {
	t.Helper()
	sub, err := r.b.client.Submission(r.b.ctx, id)
	require.NoError(t, err)
	return sub
}

// killAttempt is one attempt of a submission: its execution and that execution's end.
type killAttempt struct {
	attempt   int
	execution int64
	host      string
	fence     int64
	started   time.Time
	ended     *time.Time
	outcome   *int16
}

func (a killAttempt) String() string {
	end := "running"
	if a.outcome != nil {
		end = map[int16]string{1: "completed", 2: "failed", 3: "reclaimed"}[*a.outcome]
	}
	return fmt.Sprintf("%d:%s@%s", a.attempt, end, a.host)
}

func (r *killRig) attempts(t *testing.T, id int64) []killAttempt {
	t.Helper()
	rows, err := r.b.pool.Query(r.b.ctx, `
SELECT a.attempt, a.execution_id, e.host_name, e.fence, e.started_at, x.ended_at, x.outcome
FROM taskling.submission_attempt a
JOIN taskling.task_execution e ON e.id = a.execution_id
LEFT JOIN taskling.execution_end x ON x.execution_id = a.execution_id
WHERE a.submission_id = $1 ORDER BY a.attempt`, id)
	require.NoError(t, err)
	var out []killAttempt
	for rows.Next() {
		var a killAttempt
		require.NoError(t, rows.Scan(&a.attempt, &a.execution, &a.host, &a.fence, &a.started, &a.ended, &a.outcome))
		out = append(out, a)
	}
	require.NoError(t, rows.Err())
	return out
}

// killRun is one run of fn.
type killRun struct {
	attempt   int
	execution int64
	fence     int64
	host      string
	at        time.Time
}

func (r *killRig) runs(t *testing.T, id int64) []killRun {
	t.Helper()
	rows, err := r.b.pool.Query(r.b.ctx, `SELECT attempt, execution_id, fence, host, ran_at FROM submit_run WHERE submission_id = $1 ORDER BY ran_at`, id)
	require.NoError(t, err)
	var out []killRun
	for rows.Next() {
		var k killRun
		require.NoError(t, rows.Scan(&k.attempt, &k.execution, &k.fence, &k.host, &k.at))
		out = append(out, k)
	}
	require.NoError(t, rows.Err())
	return out
}

// checkNoOverlap: the attempts are numbered 1…n, each ended before the next started (on the
// database clock: no two ran at once under live holders), with increasing fences; every run of fn
// happened under one attempt's execution, inside its lifetime, and no attempt ran fn twice.
func checkNoOverlap(t *testing.T, attempts []killAttempt, runs []killRun) {
	t.Helper()
	for i, a := range attempts {
		require.Equal(t, i+1, a.attempt)
		require.NotNil(t, a.ended, "attempt %d (execution %d) has ended", a.attempt, a.execution)
		if i > 0 {
			prev := attempts[i-1]
			require.Greater(t, a.fence, prev.fence, "fences increase with attempts")
			require.False(t, a.started.Before(*prev.ended), "attempt %d started at %s, before attempt %d ended at %s",
				a.attempt, a.started, prev.attempt, *prev.ended)
		}
	}
	seen := map[int64]bool{}
	for _, run := range runs {
		require.False(t, seen[run.execution], "fn ran twice under execution %d", run.execution)
		seen[run.execution] = true
		require.Positive(t, run.attempt)
		require.LessOrEqual(t, run.attempt, len(attempts), "run of an attempt that is not recorded")
		a := attempts[run.attempt-1]
		require.Equal(t, a.execution, run.execution, "run of attempt %d", run.attempt)
		require.Equal(t, a.fence, run.fence)
		require.Equal(t, a.host, run.host)
		require.False(t, run.at.Before(a.started) || run.at.After(*a.ended), "run of attempt %d at %s, outside its execution's [%s, %s]",
			a.attempt, run.at, a.started, *a.ended)
	}
}

// killRow is one failure point: drive submits, starts children and kills one at the point; the
// parent then runs Work (fn records its run as host "parent" and returns nil) until the
// submission reaches status.
type killRow struct {
	name  string
	point string
	drive func(t *testing.T, r *killRig) int64
	// after runs once the submission reached status, with the parent's worker still running.
	after func(t *testing.T, r *killRig, id int64)

	status      taskling.SubmissionStatus
	attempts    int
	childRuns   int
	parentRuns  int
	firstStatus taskling.Status // the status of attempt 1's execution
	// lastReclaimed is the attempt whose reclaim LastError reports (0: LastError is empty).
	lastReclaimed int
}

// TestSubmissionKilledAtEveryPointIsCompensated is issue 11 item 3: a worker process killed
// with SIGKILL at any point of a submission's life loses nothing and runs nothing twice under a
// live holder. Each row runs its own database and child processes (this test binary) with 3-second
// liveness; rows run in parallel.
func TestSubmissionKilledAtEveryPointIsCompensated(t *testing.T) {
	t.Parallel()
	rows := []killRow{{
		name:  "after-submit",
		point: "child submitted, then died before any Work",
		drive: func(t *testing.T, r *killRig) int64 {
			p := r.child(t, "after-submit-child", "submit", "")
			waitOutput(t, p, "submitted ")
			m := regexp.MustCompile(`submitted (\d+)`).FindStringSubmatch(p.output())
			require.NotNil(t, m)
			id, err := strconv.ParseInt(m[1], 10, 64)
			require.NoError(t, err)
			kill(t, p)
			sub := r.submission(t, id)
			require.Equal(t, taskling.SubmissionWaiting, sub.Status)
			require.Zero(t, sub.Attempts)
			return id
		},
		status: taskling.SubmissionCompleted, attempts: 1, parentRuns: 1, firstStatus: taskling.StatusCompleted,
	}, {
		name:  "after-claim",
		point: "child claimed it, killed while waiting for the slot the parent holds",
		drive: func(t *testing.T, r *killRig) int64 {
			holder, err := r.b.client.StartExecution(r.b.ctx, killApp, killTask, nil)
			require.NoError(t, err)
			id := r.submit(t, 0)
			p := r.child(t, "after-claim-child", "work", "hang")
			r.claimedBy(t, id, p.name)
			kill(t, p)
			require.NoError(t, holder.Complete(r.b.ctx))
			// The claim is still the dead child's: only its lapse lets the parent take it.
			require.Equal(t, 1, r.b.count(t, `SELECT count(*) FROM taskling.submission WHERE id = $1 AND status = 1 AND claimed_by IS NOT NULL`, id))
			return id
		},
		status: taskling.SubmissionCompleted, attempts: 1, parentRuns: 1, firstStatus: taskling.StatusCompleted,
	}, {
		// Killing the child between its link and fn needs a hook in Work; the database cannot tell
		// this apart: the child's link (or grant and link) is held on the submission's row lock,
		// the child is killed, then the lock is let go and the link commits for a dead process
		// that never ran fn.
		name:  "after-link",
		point: "grant and link committed after the child died, fn never called",
		drive: func(t *testing.T, r *killRig) int64 {
			holder, err := r.b.client.StartExecution(r.b.ctx, killApp, killTask, nil)
			require.NoError(t, err)
			id := r.submit(t, 0)
			p := r.child(t, "after-link-child", "work", "hang")
			r.claimedBy(t, id, p.name)
			tx, pid := r.lock(t, `SELECT pg_backend_pid() FROM taskling.submission WHERE id = $1 FOR UPDATE`, id)
			require.NoError(t, holder.Complete(r.b.ctx)) // the child is granted the slot
			require.Eventually(t, func() bool { return r.blockedBy(p.name, pid) }, 30*time.Second, 5*time.Millisecond,
				"the child's link waits for the submission's row")
			kill(t, p)
			require.NoError(t, tx.Commit(r.b.ctx))
			r.gone(t, p.name)
			sub := r.submission(t, id)
			require.Equal(t, taskling.SubmissionInProgress, sub.Status, "the link committed")
			require.Equal(t, 1, sub.Attempts)
			attempts := r.attempts(t, id)
			require.Len(t, attempts, 1)
			require.Equal(t, p.name, attempts[0].host)
			require.Nil(t, attempts[0].ended, "its holder is dead but not judged so yet")
			require.Empty(t, r.runs(t, id), "fn never ran")
			return id
		},
		status: taskling.SubmissionCompleted, attempts: 2, parentRuns: 1, firstStatus: taskling.StatusDead, lastReclaimed: 1,
	}, {
		name:  "in-fn",
		point: "child killed inside fn",
		drive: func(t *testing.T, r *killRig) int64 {
			id := r.submit(t, 0)
			p := r.child(t, "in-fn-child", "work", "hang")
			waitOutput(t, p, "running")
			kill(t, p)
			return id
		},
		status: taskling.SubmissionCompleted, attempts: 2, childRuns: 1, parentRuns: 1, firstStatus: taskling.StatusDead, lastReclaimed: 1,
	}, {
		// The child's fn returns nil while the parent holds the task row's lock, which every
		// release transaction takes: the child is killed with its release not committed.
		name:  "after-fn",
		point: "fn returned nil, child killed before its completion committed",
		drive: func(t *testing.T, r *killRig) int64 {
			id := r.submit(t, 0)
			p := r.child(t, "after-fn-child", "work", "wait")
			waitOutput(t, p, "running")
			tx, pid := r.lock(t, `SELECT pg_backend_pid() FROM taskling.task_definition WHERE application_name = $1 AND task_name = $2 FOR UPDATE`,
				killApp, killTask)
			_, err := fmt.Fprintln(p.stdin, "go")
			require.NoError(t, err)
			waitOutput(t, p, "returning")
			// Its release waits for the lock (unless, on a very slow machine, it gave up first:
			// it did not commit either way).
			blocked := false
			for deadline := time.Now().Add(5 * time.Second); !blocked && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				blocked = r.blockedBy(p.name, pid)
			}
			if !blocked {
				t.Logf("the child's release was not seen waiting for the task row")
			}
			kill(t, p)
			require.NoError(t, tx.Rollback(r.b.ctx))
			r.gone(t, p.name)
			sub := r.submission(t, id)
			require.Equal(t, taskling.SubmissionInProgress, sub.Status, "the completion never committed")
			require.Equal(t, 1, sub.Attempts)
			attempts := r.attempts(t, id)
			require.Len(t, attempts, 1)
			require.Nil(t, attempts[0].ended)
			require.Len(t, r.runs(t, id), 1)
			return id
		},
		status: taskling.SubmissionCompleted, attempts: 2, childRuns: 1, parentRuns: 1, firstStatus: taskling.StatusDead, lastReclaimed: 1,
	}, {
		name:  "after-complete",
		point: "child killed after its completion committed",
		drive: func(t *testing.T, r *killRig) int64 {
			id := r.submit(t, 0)
			p := r.child(t, "after-complete-child", "work", "return")
			r.waitStatus(t, id, taskling.SubmissionCompleted)
			kill(t, p)
			return id
		},
		after: func(t *testing.T, r *killRig, id int64) {
			// Once the child is judged dead, and the parent's worker has run another submission,
			// the completed one still never runs again.
			require.Eventually(t, func() bool {
				return r.tryCount(`SELECT count(*) FROM taskling.session
					WHERE host_name = 'after-complete-child' AND clock_timestamp() - last_heartbeat > $1::interval`, killThreshold) == 1
			}, 30*time.Second, 10*time.Millisecond)
			next := r.submit(t, 0)
			r.waitStatus(t, next, taskling.SubmissionCompleted)
			require.Never(t, func() bool {
				sub, err := r.b.client.Submission(r.b.ctx, id)
				return err != nil || sub.Status != taskling.SubmissionCompleted || sub.Attempts != 1 ||
					r.tryCount(`SELECT count(*) FROM submit_run WHERE submission_id = $1`, id) != 1
			}, killThreshold+200*time.Millisecond, 50*time.Millisecond, "the completed submission is never run again")
		},
		status: taskling.SubmissionCompleted, attempts: 1, childRuns: 1, firstStatus: taskling.StatusCompleted,
	}, {
		name:  "max-attempts",
		point: "MaxAttempts 2, a child killed inside fn twice",
		drive: func(t *testing.T, r *killRig) int64 {
			id := r.submit(t, 2)
			a := r.child(t, "max-attempts-child-a", "work", "hang")
			waitOutput(t, a, "running")
			kill(t, a)
			// The second child's recovery loop reaps the first once it is judged dead, then runs
			// the second attempt.
			b := r.child(t, "max-attempts-child-b", "work", "hang")
			waitOutput(t, b, "running")
			kill(t, b)
			return id
		},
		status: taskling.SubmissionDead, attempts: 2, childRuns: 2, firstStatus: taskling.StatusDead,
		lastReclaimed: 2,
	}}

	var mu sync.Mutex
	outcomes := map[string]string{}
	t.Run("rows", func(t *testing.T) {
		for _, row := range rows {
			t.Run(row.name, func(t *testing.T) {
				t.Parallel()
				began := time.Now()
				r := newKillRig(t)
				id := row.drive(t, r)
				r.b.work(t, r.b.client, func(ctx context.Context, e *taskling.Execution) error {
					_, err := r.b.pool.Exec(ctx, recordRunSQL, e.SubmissionID(), e.Attempt(), e.ID(), e.FencingToken(), "parent")
					return err
				}, nil)
				r.waitStatus(t, id, row.status)
				if row.after != nil {
					row.after(t, r, id)
				}
				sub := r.submission(t, id)
				attempts, runs := r.attempts(t, id), r.runs(t, id)
				childRuns, parentRuns := 0, 0
				for _, run := range runs {
					if run.host == "parent" {
						parentRuns++
					} else {
						childRuns++
					}
				}
				var trail []string
				for _, a := range attempts {
					trail = append(trail, a.String())
				}
				mu.Lock()
				outcomes[row.name] = fmt.Sprintf("| %-14s | %-68s | %-9s | %d | %d+%d | %-52s | %4.1fs |", row.name, row.point, sub.Status,
					sub.Attempts, childRuns, parentRuns, strings.Join(trail, " "), time.Since(began).Seconds())
				mu.Unlock()

				require.Equal(t, row.status, sub.Status)
				require.Equal(t, row.attempts, sub.Attempts)
				require.Len(t, attempts, row.attempts)
				require.Equal(t, row.childRuns, childRuns, "runs of fn in the children")
				require.Equal(t, row.parentRuns, parentRuns, "runs of fn in the parent")
				checkNoOverlap(t, attempts, runs)
				require.Equal(t, attempts[len(attempts)-1].execution, sub.ExecutionID)
				first, err := r.b.client.Execution(r.b.ctx, attempts[0].execution)
				require.NoError(t, err)
				require.Equal(t, row.firstStatus, first.Status, "attempt 1's execution")
				if row.lastReclaimed == 0 {
					require.Empty(t, sub.LastError)
				} else {
					a := attempts[row.lastReclaimed-1]
					require.Equal(t, fmt.Sprintf("attempt %d (execution %d): its holder was judged dead and its slot reclaimed", a.attempt, a.execution),
						sub.LastError)
				}
				require.NotNil(t, sub.FinishedAt)
				for _, p := range r.procs {
					require.NotContains(t, p.output(), "DATA RACE", p.name)
				}
			})
		}
	})
	var table []string
	for _, row := range rows {
		if o, ok := outcomes[row.name]; ok {
			table = append(table, o)
		}
	}
	t.Logf("outcomes (fn runs: in children + in the parent; attempts: attempt:end@host):\n%s", strings.Join(table, "\n"))
}
