// Command blocks imports a file of 100 000 rows in list blocks, and survives being killed: kill it
// mid-run (kill -9, or Ctrl-\), start it again, and it goes on where it stopped — the rows already
// imported are not imported again, the block that was in progress is taken again (a new attempt)
// for its remaining rows, and the rows that failed are retried.
//
//	export TASKLING_DATABASE_URL=postgres://…   # or: export TASKLING_DATABASE_URL=$(make -s pg-start)
//	go run ./examples/blocks                    # Ctrl-\ mid-run, then run it again
//
// Each run is one execution of the task examples/import (limit 1, waiting for the slot). The
// first run splits the file into list blocks of 1 000 rows, in the task's critical section;
// later runs find the blocks exist and ask only for old ones: dead (their execution was killed)
// and failed (some rows failed). A run goes on asking until no block is left to take, then exits
// 0 if every block is completed. To show retries, every row divisible by -fail-every fails on its
// first try. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

const (
	app = "examples"
	// applicationName is the program's PostgreSQL application_name (the test waits for a killed
	// run's connections to go by it).
	applicationName = "taskling examples/blocks"
)

// row is one row of the fake file: one list item.
type row struct {
	Row    int     `json:"row"`
	Amount float64 `json:"amount"`
}

// fileHeader is the header of every block: which file the rows come from.
type fileHeader struct {
	File string `json:"file"`
	Rows int    `json:"rows"`
}

type options struct {
	dbURL, name, task      string
	rows, blockSize, batch int
	maxBlocks, failEvery   int
	retryLimit             int
	slow, threshold        time.Duration
	verbose                bool
}

func main() {
	log.SetFlags(0)
	var o options
	flag.StringVar(&o.dbURL, "database-url", os.Getenv("TASKLING_DATABASE_URL"), "PostgreSQL URL (default $TASKLING_DATABASE_URL)")
	flag.StringVar(&o.name, "name", "", "host name recorded on the execution (default: the OS host name)")
	flag.StringVar(&o.task, "task", "import", "task name (application "+app+"); a new name starts a new import")
	flag.IntVar(&o.rows, "rows", 100_000, "rows in the file")
	flag.IntVar(&o.blockSize, "block-size", 1000, "rows per list block")
	flag.IntVar(&o.batch, "batch", 100, "item statuses written per batch (CommitPeriodically)")
	flag.IntVar(&o.maxBlocks, "max-blocks", 10, "old (dead or failed) blocks taken per request (0: all)")
	flag.IntVar(&o.retryLimit, "retry-limit", 3, "times a dead or failed block is taken again (retry-limit + 1 attempts in all)")
	flag.IntVar(&o.failEvery, "fail-every", 997, "rows divisible by this fail on their first try (0: none)")
	flag.DurationVar(&o.slow, "slow", 200*time.Microsecond, "time spent importing one row, on average (so that a kill lands mid-run)")
	flag.DurationVar(&o.threshold, "death-threshold", 2*time.Second, "a run silent this long is dead: its slot and blocks are taken back")
	flag.BoolVar(&o.verbose, "v", false, `print a line per row ("row N: imported" or "row N: failed")`)
	flag.Parse()
	switch {
	case o.dbURL == "":
		log.Fatal("blocks: set -database-url or TASKLING_DATABASE_URL (export TASKLING_DATABASE_URL=$(make -s pg-start) starts a private one)")
	case o.rows < 1:
		log.Fatal("blocks: -rows must be at least 1")
	case o.blockSize < 1 || o.blockSize > taskling.MaxListBlockSize:
		log.Fatalf("blocks: -block-size must be 1 to %d", taskling.MaxListBlockSize)
	case o.batch < 1:
		log.Fatal("blocks: -batch must be at least 1")
	case o.maxBlocks < 0 || o.retryLimit < 0 || o.failEvery < 0 || o.slow < 0:
		log.Fatal("blocks: -max-blocks, -retry-limit, -fail-every and -slow must not be negative")
	}
	// Ctrl-C or SIGTERM: a clean stop. The execution ends (failed), the item statuses not yet
	// written are written, and the unfinished blocks are taken again by the next run.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	crashOnSIGQUIT()
	if err := run(ctx, o); err != nil {
		if ctx.Err() != nil {
			log.Fatalf("blocks: interrupted (%v); run again to go on", err)
		}
		log.Fatalf("blocks: %v", err)
	}
}

// crashOnSIGQUIT makes Ctrl-\ (SIGQUIT) a crash: the process exits at once, with no cleanup —
// as kill -9 would, and without Go's goroutine dump.
func crashOnSIGQUIT() {
	quit := make(chan os.Signal, 1)
	signal.Notify(quit, syscall.SIGQUIT)
	go func() {
		<-quit
		fmt.Printf("%s  SIGQUIT: exiting at once, as a crash would (nothing cleaned up)\n", stamp())
		os.Exit(3)
	}()
}

// stats are what this run did.
type stats struct {
	blocks, imported, failed int
}

func run(ctx context.Context, o options) error {
	cfg, err := pgxpool.ParseConfig(o.dbURL)
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = applicationName
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return err
	}
	// A short death threshold, so that a run started after a kill gets the dead run's slot (and
	// its blocks) back within seconds; the default, 20 s, suits real jobs better.
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: o.name, Defaults: taskling.TaskSettings{
		ConcurrencyLimit: 1, KeepAliveInterval: o.threshold / 4, KeepAliveDeathThreshold: o.threshold}})
	if err != nil {
		return err
	}
	defer client.Close()

	file := fileHeader{File: fmt.Sprintf("rows-%d.jsonl", o.rows), Rows: o.rows}
	fmt.Printf("%s  pid %d: importing %s as %s/%s (kill -9 %d, or Ctrl-\\, to crash it; run again to resume)\n",
		stamp(), os.Getpid(), file.File, app, o.task, os.Getpid())
	asked := time.Now()
	var st stats
	err = client.Run(ctx, app, o.task, func(ctx context.Context, exec *taskling.Execution) error {
		fmt.Printf("%s  execution %d started (waited %s for the slot)\n", stamp(), exec.ID(), time.Since(asked).Round(time.Millisecond))
		return importFile(ctx, exec, o, file, &st)
	}, &taskling.StartOptions{WaitForSlot: true, ReferenceValue: file.File})
	if err != nil {
		return err
	}
	return summary(ctx, client, o.task, st)
}

// importFile runs one execution: it takes blocks and imports them until no block is left.
func importFile(ctx context.Context, exec *taskling.Execution, o options, file fileHeader, st *stats) error {
	req := taskling.ListBlocksRequest{MaxBlockSize: o.blockSize, Header: file, Commit: taskling.CommitPeriodically, BatchSize: o.batch}
	// Dead and failed blocks are taken again, at most retryLimit times each, while their last
	// attempt's execution started within the last 24 hours.
	retry := &taskling.RetryPolicy{Within: 24 * time.Hour, RetryLimit: o.retryLimit}
	old := &taskling.BlockOptions{OnlyOld: true, ReprocessDead: retry, ReprocessFailed: retry, MaxBlocks: o.maxBlocks}

	// Whether the file's blocks exist, and creating them, is decided in the task's critical
	// section: with a limit of 1 no other run can race this one, but with a higher limit two
	// runs could both find no blocks and both create them.
	section, err := exec.CriticalSection(ctx, time.Minute)
	if err != nil {
		return err
	}
	lists, err := firstBlocks(ctx, exec, req, old, o, file)
	if err := errors.Join(err, section.Release(ctx)); err != nil {
		return err
	}
	// Then blocks until none is left. A block that failed in this run (a row failed) is no
	// longer live, so a later request of this same run takes it again, as its next attempt.
	for len(lists) > 0 {
		for _, l := range lists {
			if err := importBlock(ctx, l, o, st); err != nil {
				return err
			}
		}
		if lists, err = exec.ListBlocks(ctx, req, old); err != nil {
			return err
		}
	}
	return nil
}

// firstBlocks creates the file's blocks if the task has none (every one is then this run's, as
// its first attempt), else takes old ones.
func firstBlocks(ctx context.Context, exec *taskling.Execution, req taskling.ListBlocksRequest, old *taskling.BlockOptions,
	o options, file fileHeader) ([]*taskling.ListBlock, error) {
	last, err := exec.LastBlock(ctx, taskling.KindList, taskling.LastCreated)
	if err != nil {
		return nil, err
	}
	if last != nil {
		var h fileHeader
		if err := last.Decode(&h); err != nil {
			return nil, err
		}
		if h != file {
			return nil, fmt.Errorf("task %s/%s holds the blocks of %s (%d rows), not of %s: use -task to start another import",
				app, o.task, h.File, h.Rows, file.File)
		}
		lists, err := exec.ListBlocks(ctx, req, old)
		if err == nil {
			fmt.Printf("%s  the blocks exist: took %d old ones (dead or failed)\n", stamp(), len(lists))
		}
		return lists, err
	}
	req.Items = make([]any, o.rows)
	for i := range req.Items {
		n := i + 1
		req.Items[i] = row{Row: n, Amount: float64(n*7919%100_000) / 100}
	}
	lists, err := exec.ListBlocks(ctx, req, nil)
	if err == nil {
		fmt.Printf("%s  created %d blocks of at most %d rows\n", stamp(), len(lists), o.blockSize)
	}
	return lists, err
}

// importBlock imports a block's rows still to do (pending, or failed by an earlier attempt), then
// completes it: it ends completed, or failed if a row failed (a later request retries it).
func importBlock(ctx context.Context, l *taskling.ListBlock, o options, st *stats) error {
	if err := l.Start(ctx); err != nil {
		return err
	}
	items, err := l.Items(ctx, taskling.ItemPending, taskling.ItemFailed)
	if err != nil {
		return err
	}
	pace := pacer{per: o.slow}
	imported, failed := 0, 0
	var first, last int
	for i, it := range items {
		var r row
		if err := it.Decode(&r); err != nil {
			return err
		}
		if i == 0 {
			first = r.Row
		}
		last = r.Row
		pace.step() // the import of the row
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		// The row's import fails on its first try: a pending row has never been tried (or its
		// failure was not written), a failed one is a retry. The outcome is printed (-v) once the
		// work is done, before its status is recorded: a crash in between leaves the row to do
		// again, which the next run does.
		if o.failEvery > 0 && r.Row%o.failEvery == 0 && it.Status == taskling.ItemPending {
			if o.verbose {
				fmt.Printf("row %d: failed\n", r.Row)
			}
			if err := l.ItemFailed(ctx, it, "simulated error: fails on its first try", 1); err != nil {
				return err
			}
			failed++
			continue
		}
		if o.verbose {
			fmt.Printf("row %d: imported\n", r.Row)
		}
		if err := l.ItemCompleted(ctx, it); err != nil {
			return err
		}
		imported++
	}
	if err := l.Complete(ctx); err != nil { // failed if a row is still pending or failed
		return err
	}
	st.blocks++
	st.imported += imported
	st.failed += failed
	outcome := "completed"
	if failed > 0 {
		outcome = "failed (taken again later)"
	}
	span := "nothing left to do"
	if len(items) > 0 {
		span = fmt.Sprintf("rows %d-%d", first, last)
	}
	fmt.Printf("%s  block %d attempt %d: %d of %d rows to do (%s): %d imported, %d failed: %s; this run: %d rows imported\n",
		stamp(), l.ID, l.Attempt, len(items), l.ItemCount, span, imported, failed, outcome, st.imported)
	return nil
}

// summary prints what this run did, and whether every block of the task is completed (an error
// if not).
func summary(ctx context.Context, client *taskling.Client, task string, st stats) error {
	counts, err := client.BlockCounts(ctx)
	if err != nil {
		return err
	}
	var total, completed, atLimit int64
	for _, c := range counts {
		if c.Application != app || c.Task != task {
			continue
		}
		total += c.Blocks
		atLimit += c.AtRetryLimit
		if c.Status == taskling.BlockCompleted {
			completed += c.Blocks
		}
	}
	fmt.Printf("%s  this run: %d block attempts, %d rows imported, %d failed\n", stamp(), st.blocks, st.imported, st.failed)
	if completed != total {
		return fmt.Errorf("%d of %d blocks not completed (%d at their retry limit: taskling blocks list %s/%s --at-retry-limit)",
			total-completed, total, atLimit, app, task)
	}
	fmt.Printf("%s  import complete: %d of %d blocks completed\n", stamp(), completed, total)
	return nil
}

// pacer spaces its steps per apart, on average: it sleeps only when a millisecond or more ahead,
// since a shorter sleep lasts about a millisecond on many systems.
type pacer struct {
	per  time.Duration
	next time.Time
}

func (p *pacer) step() {
	if p.per <= 0 {
		return
	}
	now := time.Now()
	if p.next.Before(now.Add(-10 * time.Millisecond)) { // first row, or fell behind: no catching up
		p.next = now
	}
	p.next = p.next.Add(p.per)
	if d := p.next.Sub(now); d >= time.Millisecond {
		time.Sleep(d)
	}
}

func stamp() string { return time.Now().Format("15:04:05.000") }
