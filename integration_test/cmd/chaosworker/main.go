// Command chaosworker is one worker process of the chaos tests: G goroutines loop over
// StartExecution (some with WaitForSlot) on the tasks it is given, hold the slot for a random
// short time while checking Execution.Context() before every unit of work, and Complete. Every
// grant, stop and completion is appended to the process's ledger file (package ledger) before
// the worker acts on it. SIGTERM stops it cleanly: holders finish, the client closes, and an
// exit event is written.
//
// With -work, the process runs Client.Work on the first task instead, with G workers: each
// attempt is recorded like a hold (its grant names the submission and attempt), and then, as the
// submission's id decides, completed by the function itself (Complete; the result recorded),
// left for Work to complete (returned nil), or — the first attempt of every -fail-every'th
// submission — failed on purpose (an error returned), so that it is attempted again.
//
// With -blocks, each goroutine loops over executions of the first task that each ask for numeric
// blocks of -range and work through them (blocks.go). With -section, each goroutine loops over
// executions that take their task's critical section, hold it briefly and release it; on
// SIGUSR1 one more goroutine takes the section and holds it until the process ends (section.go).
// Both print "ready" on stdout once the client is up (SIGUSR1 is handled from then on).
//
// With -keys (TestChaosKeys), every start of the plain loop names a key and a cost (keyed.go).
//
// With -isolation-file (TestChaos), the process holds a client per isolation level and each
// start uses the level the file names when it begins (isolation.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/taskling-go/taskling/taskling"

	"github.com/taskling-go/taskling/integration_test/ledger"
)

// ApplicationName marks the workers' connections, so the nemesis terminates only those.
const ApplicationName = "chaos-worker"

func main() {
	var (
		ledgerPath = flag.String("ledger", "", "ledger file")
		host       = flag.String("host", "", "host name recorded on executions (unique per process)")
		app        = flag.String("app", "chaos", "application name")
		taskList   = flag.String("tasks", "", "comma-separated task=declaredLimit list")
		goroutines = flag.Int("g", 8, "goroutines")
		interval   = flag.Duration("interval", 200*time.Millisecond, "KeepAliveInterval")
		threshold  = flag.Duration("threshold", 2*time.Second, "KeepAliveDeathThreshold")
		maxHold    = flag.Duration("hold", 60*time.Millisecond, "longest hold")
		minHold    = flag.Duration("min-hold", 0, "shortest hold (holds are drawn from [min-hold, hold))")
		step       = flag.Duration("step", 5*time.Millisecond, "unit of work while holding")
		verbose    = flag.Bool("v", false, "log warnings of the library")
		sameClock  = flag.Bool("same-clock", false, "the server runs on this host: its clock is ours (the offset is measured and recorded, not applied)")
		work       = flag.Bool("work", false, "run Client.Work on the first task with -g workers")
		failEvery  = flag.Int64("fail-every", 0, "with -work: fail the first attempt of submissions whose id is a multiple of this (0: none)")
		blocks     = flag.Bool("blocks", false, "process numeric blocks of -range in executions of the first task")
		blockRange = flag.String("range", "1:30000:1000", "with -blocks: from:to:size of the numeric range")
		maxBlocks  = flag.Int("max-blocks", 5, "with -blocks: BlockOptions.MaxBlocks")
		retryLimit = flag.Int("retry-limit", 3, "with -blocks: the retry limit of dead and failed blocks")
		failPct    = flag.Int("fail-pct", 5, "with -blocks: percentage of blocks whose first attempt fails on purpose (by a hash of the block's start)")
		section    = flag.Bool("section", false, "take the first task's critical section in executions of it")
		secTimeout = flag.Duration("section-timeout", 10*time.Second, "with -section: the timeout of a wait for the section")
		tinyTO     = flag.Duration("tiny-timeout", 30*time.Millisecond, "with -section: the longest timeout of every fourth goroutine's waits")
		nKeys      = flag.Int("keys", 0, "plain mode: name one of this many keys in each start (Zipf-distributed; 0: no key)")
		keySkew    = flag.Float64("key-skew", 1.1, "with -keys: the Zipf exponent s (> 1; larger: more skewed)")
		keyLimit   = flag.Int("key-limit", 0, "with -keys: TaskSettings.KeyLimit")
		namedKeys  = flag.String("named-keys", "", "with -keys: TaskSettings.Keys, as key=limit,…")
		maxCost    = flag.Int("max-cost", 1, "with -keys: costs are drawn from 1 to this (and to the key's limit)")
		rate       = flag.String("rate", "", "with -keys: TaskSettings.Rate, as taskling.ParseRate reads it (\"50/1s,burst=4\")")
		keyRates   = flag.String("key-rates", "", "with -keys: the rates of named keys, as key=rate;… (\"k00=5/1s,burst=4;k01=…\")")
		isoFile    = flag.String("isolation-file", "", "a file naming the isolation level of new starts (read committed, serializable), read every 20ms; not with -work, -blocks, -section")
	)
	flag.Parse()
	// Before anything else: SIGUSR1's default action ends the process.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	opts := options{minHold: *minHold, work: *work, failEvery: *failEvery, blocks: *blocks, maxBlocks: *maxBlocks, retryLimit: *retryLimit, failPct: *failPct,
		section: *section, sectionTimeout: *secTimeout, tinyTimeout: *tinyTO, usr1: usr1, isolationFile: *isoFile}
	var err error
	if opts.keyed, err = parseKeyed(*nKeys, *keySkew, *keyLimit, *namedKeys, *maxCost, *rate, *keyRates); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		os.Exit(1)
	}
	if *isoFile != "" && (*work || *blocks || *section) {
		fmt.Fprintln(os.Stderr, "chaosworker: -isolation-file is for the plain mode only")
		os.Exit(1)
	}
	if *blocks {
		if _, err := fmt.Sscanf(*blockRange, "%d:%d:%d", &opts.from, &opts.to, &opts.size); err != nil {
			fmt.Fprintf(os.Stderr, "chaosworker: bad -range %q: %v\n", *blockRange, err)
			os.Exit(1)
		}
	}
	// The URL comes from the environment: a command line is anyone's to read.
	dbURL := os.Getenv("TASKLING_DATABASE_URL")
	if err := run(dbURL, *ledgerPath, *host, *app, *taskList, *goroutines, *interval, *threshold, *maxHold, *step, *verbose, *sameClock, opts); err != nil {
		fmt.Fprintf(os.Stderr, "chaosworker %s: %v\n", *host, err)
		os.Exit(1)
	}
}

type task struct {
	name  string
	limit int
}

// options are the -min-hold flag and the -work, -blocks and -section modes'.
type options struct {
	minHold   time.Duration
	work      bool
	failEvery int64

	blocks              bool
	from, to, size      int64
	maxBlocks           int
	retryLimit, failPct int
	section             bool
	sectionTimeout      time.Duration
	tinyTimeout         time.Duration
	usr1                <-chan os.Signal
	isolationFile       string
	keyed               *keyed // -keys
}

func run(dbURL, ledgerPath, host, app, taskList string, g int, interval, threshold, maxHold, step time.Duration, verbose, sameClock bool, opts options) error {
	tasks, err := parseTasks(taskList)
	if err != nil {
		return err
	}
	stop, cancelStop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancelStop()
	ctx := context.Background()

	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = ApplicationName
	cfg.MaxConns = int32(g + 4)
	// Longer than a loaded server's accept queue may hold a connection: one that gives up sooner
	// is forked a backend for all the same, and its retry queues again. On this 2-core machine a
	// fork of the postmaster takes tens of milliseconds (copy_page_range in its stack), so the
	// fleet's ~100 connections after a restart or pg_terminate_backend take 20-30 s to open. Not
	// much longer: a connection opened through a blackholed proxy lost its startup message (the
	// proxy drops what TCP would resend) and waits out the whole timeout.
	cfg.ConnConfig.ConnectTimeout = 45 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	w, err := ledger.Create(ledgerPath)
	if err != nil {
		return err
	}
	defer w.Close()
	if started, err := recordStart(ctx, stop, pool, w, host, sameClock); err != nil || !started {
		return err
	}

	log := zap.NewNop()
	if verbose {
		log, _ = zap.NewDevelopment()
	}
	newClient := func(iso taskling.Isolation) (*taskling.Client, error) {
		return taskling.NewClient(pool, &taskling.Config{
			Logger:          log,
			HostName:        host,
			Defaults:        taskling.TaskSettings{KeepAliveInterval: interval, KeepAliveDeathThreshold: threshold},
			Settings:        settings(tasks, opts.keyed),
			MaxPollInterval: 250 * time.Millisecond,
			Isolation:       iso,
		})
	}
	var levels *levelSwitch
	var client *taskling.Client
	if opts.isolationFile != "" {
		if levels, err = newLevelSwitch(stop, opts.isolationFile, newClient); err != nil {
			return err
		}
		client, _ = levels.pick()
	} else if client, err = newClient(taskling.IsolationReadCommitted); err != nil {
		return err
	}
	if opts.work {
		wk := worker{w: w, client: client, app: app, task: tasks[0].name, maxHold: maxHold, step: step,
			rnd: rand.New(rand.NewPCG(uint64(os.Getpid()), 0)), wait: true, failEvery: opts.failEvery}
		err := client.Work(stop, app, wk.task, wk.attempt, &taskling.WorkOptions{Workers: g, DrainTimeout: 10 * time.Second})
		client.Close()
		if err != nil {
			return fmt.Errorf("work: %w", err)
		}
		return w.Write(ledger.Event{Kind: ledger.KindExit, Host: host, At: w.Now()})
	}
	if opts.blocks || opts.section {
		runBlocksOrSection(stop, w, client, app, tasks[0].name, g, maxHold, step, opts)
		client.Close()
		return w.Write(ledger.Event{Kind: ledger.KindExit, Host: host, At: w.Now()})
	}
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(i)))
			wk := worker{w: w, client: client, app: app, task: tasks[i%len(tasks)].name, minHold: opts.minHold, maxHold: maxHold, step: step,
				rnd: rnd, wait: i%len(tasks) == 0 || i%2 == 1, run: i%4 == 3, levels: levels, keys: opts.keyed.picker(rnd)}
			if wk.keys != nil {
				wk.wait = i%3 != 2 // a third of the starts are plain (no barging, key refusals)
			}
			wk.loop(stop)
		}()
	}
	wg.Wait()
	if levels != nil {
		levels.close()
	} else {
		client.Close()
	}
	return w.Write(ledger.Event{Kind: ledger.KindExit, Host: host, At: w.Now()})
}

// parseTasks reads -tasks: "name=limit,…".
func parseTasks(list string) ([]task, error) {
	var tasks []task
	for _, s := range strings.Split(list, ",") {
		var t task
		name, limit, ok := strings.Cut(s, "=")
		if _, err := fmt.Sscan(limit, &t.limit); !ok || err != nil {
			return nil, fmt.Errorf("bad -tasks entry %q", s)
		}
		t.name = name
		tasks = append(tasks, t)
	}
	return tasks, nil
}

// recordStart measures the offset to the DB clock and writes the ledger's start event; started is
// false when the process was stopped before it could start (nothing to record).
func recordStart(ctx, stop context.Context, pool *pgxpool.Pool, w *ledger.Writer, host string, sameClock bool) (started bool, err error) {
	var offset, offErr time.Duration
	// A replacement process may start while the server restarts, or recovers from a crash under
	// load (seconds): keep trying for a minute rather than die and leave its slot empty.
	giveUp := time.Now().Add(time.Minute)
	for {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		offset, offErr, err = ledger.MeasureOffset(octx, func(ctx context.Context) (time.Time, error) {
			var t time.Time
			err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t)
			return t, err
		}, 7)
		cancel()
		if err == nil || time.Now().After(giveUp) {
			break
		}
		if sleep(stop, 250*time.Millisecond); stop.Err() != nil {
			return false, nil
		}
	}
	if err != nil {
		return false, fmt.Errorf("measure the DB clock: %w", err)
	}
	if !sameClock {
		w.SetOffset(offset)
	}
	return true, w.Write(ledger.Event{Kind: ledger.KindStart, Host: host, At: w.Now(), PID: os.Getpid(), Offset: offset, OffsetError: offErr})
}

// runBlocksOrSection runs the -blocks or -section workers until stopped.
func runBlocksOrSection(stop context.Context, w *ledger.Writer, client *taskling.Client, app, task string, g int, maxHold, step time.Duration, opts options) {
	fmt.Println("ready")
	var wg sync.WaitGroup
	for i := range g {
		wg.Go(func() {
			wk := worker{w: w, client: client, app: app, task: task, maxHold: maxHold, step: step,
				rnd: rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(i))), wait: true}
			if opts.blocks {
				(&blockWorker{worker: &wk, opts: opts}).loop(stop)
				return
			}
			timeout := opts.sectionTimeout
			if i%4 == 3 {
				timeout = -1 // tiny: drawn for each wait
			}
			(&sectionWorker{worker: &wk, opts: opts, timeout: timeout}).loop(stop)
		})
	}
	if opts.section {
		wg.Go(func() {
			select {
			case <-stop.Done():
				return
			case <-opts.usr1:
			}
			wk := worker{w: w, client: client, app: app, task: task, maxHold: maxHold, step: step,
				rnd: rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(g))), wait: true}
			(&sectionWorker{worker: &wk, opts: opts}).holdUntilStopped(stop)
		})
	}
	wg.Wait()
}

func settings(tasks []task, k *keyed) taskling.SettingsSource {
	m := taskling.StaticSettings{}
	for _, t := range tasks {
		m["chaos/"+t.name] = k.settings(taskling.TaskSettings{ConcurrencyLimit: t.limit})
	}
	return taskling.SettingsFunc(func(ctx context.Context, app, task string) (taskling.TaskSettings, error) {
		return m[app+"/"+task], nil
	})
}

type worker struct {
	w       *ledger.Writer
	client  *taskling.Client
	app     string
	task    string
	minHold time.Duration
	maxHold time.Duration
	step    time.Duration
	rnd     *rand.Rand
	wait    bool // use WaitForSlot
	run     bool // use Client.Run (which completes) instead of StartExecution and Complete

	rndMu     sync.Mutex // rnd is shared by Work's workers
	failEvery int64

	// levels (-isolation-file): each start of loop takes the client of the level in force, and
	// records that level (isolation) in its grant.
	levels    *levelSwitch
	isolation string

	keys *picker // -keys: each start's key and cost
}

// errInjected fails an attempt on purpose (-fail-every).
var errInjected = errors.New("chaosworker: attempt failed on purpose")

// attempt is the function Work runs for each submission attempt: it works like a holder, then
// completes the execution itself, leaves that to Work, or fails on purpose.
func (wk *worker) attempt(ctx context.Context, e *taskling.Execution) error {
	lost := wk.work(ctx, e, time.Now())
	sub := e.SubmissionID()
	switch {
	case wk.failEvery > 0 && sub%wk.failEvery == 0 && e.Attempt() == 1 && !lost:
		wk.recordResult(e.ID(), ledger.ResultFailed)
		return errInjected
	case sub%4 == 0:
		wk.recordResult(e.ID(), ledger.ResultReturned)
		return nil
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wk.completed(e.ID(), e.Complete(cctx))
	return nil
}

// recordResult records how an attempt ended when the function did not call Complete.
func (wk *worker) recordResult(id int64, result string) {
	must(wk.w.Write(ledger.Event{Kind: ledger.KindComplete, Host: wk.client.HostName(), Exec: id, Task: wk.task, Result: result, At: wk.w.Now()}))
}

// holdFor is how long the next hold lasts: from minHold up to maxHold.
func (wk *worker) holdFor() time.Duration {
	wk.rndMu.Lock()
	defer wk.rndMu.Unlock()
	return wk.minHold + time.Duration(wk.rnd.Int64N(int64(max(wk.maxHold-wk.minHold, 1))))
}

// startTimeout bounds each start of loop: TestChaos waits this long after switching the level in
// force before it measures a reclaim at the new level.
const startTimeout = 3 * time.Second

func (wk *worker) loop(stop context.Context) {
	failures := 0 // starts in a row that failed other than at a limit or a rate
	for stop.Err() == nil {
		if wk.levels != nil {
			wk.client, wk.isolation = wk.levels.pick()
		}
		sctx, cancel := context.WithTimeout(stop, startTimeout)
		var err error
		opts := &taskling.StartOptions{WaitForSlot: wk.wait}
		wk.keys.options(opts)
		if wk.run {
			var id int64
			err = wk.client.Run(sctx, wk.app, wk.task, func(ctx context.Context, e *taskling.Execution) error {
				id = e.ID()
				wk.work(ctx, e, time.Now())
				return nil
			}, opts)
			cancel()
			if id != 0 {
				failures = 0
				wk.completed(id, err)
				continue
			}
		} else {
			var e *taskling.Execution
			e, err = wk.client.StartExecution(sctx, wk.app, wk.task, opts)
			returned := time.Now()
			cancel()
			if err == nil {
				failures = 0
				wk.hold(e, returned)
				continue
			}
		}
		if errors.Is(err, taskling.ErrInvalidArgument) {
			must(err) // a start the worker got wrong (a cost above its key's limit): end the run
		}
		if err != nil {
			var rl *taskling.RateLimitedError
			if errors.Is(err, taskling.ErrLimitReached) || errors.As(err, &rl) {
				failures = 0 // the database answered
			} else {
				failures++
			}
			sleep(stop, wk.backoff(err, failures))
		}
	}
}

// backoff is how long loop waits after a start that failed with err, the failures-th other
// failure in a row: briefly at a limit, until the rate has room when a rate refused it
// (RetryAfter, at most a second, a little jitter added so that the refused do not all come back
// at once), else 50 ms to 200 ms, doubling with each failure in a row up to 0.5 s to 2 s. A fleet
// that retried every 50–200 ms kept a loaded server's accept queue full after a restart (each
// attempt that timed out left a connection for the postmaster to fork a backend for), and new
// connections then waited minutes.
func (wk *worker) backoff(err error, failures int) time.Duration {
	var rl *taskling.RateLimitedError
	if errors.As(err, &rl) {
		d := min(max(rl.RetryAfter, 0), time.Second)
		return d + time.Duration(wk.rnd.Int64N(int64(time.Millisecond+d/4)))
	}
	d := 2 * time.Millisecond
	if !errors.Is(err, taskling.ErrLimitReached) {
		d = min(50*time.Millisecond<<min(max(failures-1, 0), 4), 500*time.Millisecond)
	}
	return d + time.Duration(wk.rnd.Int64N(int64(3*d)))
}

// hold works under e (started by StartExecution) and completes it.
func (wk *worker) hold(e *taskling.Execution, returned time.Time) {
	wk.work(e.Context(), e, returned)
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = e.Complete(cctx)
		cancel()
		if err == nil || errors.Is(err, taskling.ErrLeaseLost) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	wk.completed(e.ID(), err)
}

// completed records the result of Complete (or of Run, which completes).
func (wk *worker) completed(id int64, err error) {
	res := ledger.Event{Kind: ledger.KindComplete, Host: wk.client.HostName(), Exec: id, Task: wk.task, Result: ledger.ResultOK}
	switch {
	case err == nil:
	case errors.Is(err, taskling.ErrLeaseLost):
		res.Result = ledger.ResultLeaseLost
	default:
		res.Result, res.Error = ledger.ResultError, err.Error()
	}
	res.At = wk.w.Now()
	must(wk.w.Write(res))
}

// work records the grant, works in steps while ctx is not cancelled and records the stop; it
// reports whether ctx was cancelled. Under Run, Run completes the execution afterwards (its
// result is recorded by runResult).
func (wk *worker) work(ctx context.Context, e *taskling.Execution, returned time.Time) (lost bool) {
	must(wk.w.Write(ledger.Event{Kind: ledger.KindGrant, Host: wk.client.HostName(), At: wk.w.DBTime(returned), Exec: e.ID(),
		Task: wk.task, Fence: e.FencingToken(), GrantedAt: e.StartedAt(), Waited: wk.wait, Note: map[bool]string{true: "run"}[wk.run],
		Submission: e.SubmissionID(), Attempt: e.Attempt(), Isolation: wk.isolation, Key: e.Key(), Cost: e.Cost()}))
	until := time.Now().Add(wk.holdFor())
	var lastOK time.Time // zero until a check passes: a holder whose first check fails never worked
	for {
		if ctx.Err() != nil {
			lost = true
			break
		}
		now := time.Now()
		lastOK = now // a unit of work done while the context was not cancelled
		if !now.Before(until) {
			break
		}
		t := time.NewTimer(min(wk.step, until.Sub(now)))
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	stopEv := ledger.Event{Kind: ledger.KindStop, Host: wk.client.HostName(), Exec: e.ID(), Task: wk.task, Reason: ledger.ReasonCompleted}
	if !lastOK.IsZero() {
		stopEv.At = wk.w.DBTime(lastOK)
	}
	if lost {
		stopEv.Reason = ledger.ReasonCancelled
		stopEv.Observed = wk.w.Now()
		if c := context.Cause(ctx); c != nil {
			stopEv.Cause = c.Error()
			if errors.Is(c, taskling.ErrLeaseLost) {
				stopEv.Reason = ledger.ReasonLeaseLost
			}
		}
	} else {
		stopEv.At = wk.w.Now() // Complete is called after this instant
	}
	must(wk.w.Write(stopEv))
	return lost
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		os.Exit(2)
	}
}
