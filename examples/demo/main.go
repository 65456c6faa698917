// Command demo shows taskling limiting a batch job across processes: three worker processes
// (examples/worker) share one task whose limit is 2; while they run, an operator raises the limit
// to 3. It then prints who held which slot when, and the task's execution history.
//
// Run it with `make demo`, which starts a private PostgreSQL (or uses TASKLING_DATABASE_URL).
// The demo works in a database of its own that it creates and drops.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

const (
	app, task = "billing", "export"
	workers   = 3
)

func main() {
	log.SetFlags(0)
	serverURL := os.Getenv("TASKLING_DATABASE_URL")
	if serverURL == "" {
		log.Fatal("demo: TASKLING_DATABASE_URL is not set; run `make demo`, which starts a private PostgreSQL")
	}
	if err := run(context.Background(), serverURL); err != nil {
		log.Fatalf("demo: %v", err)
	}
}

func run(ctx context.Context, serverURL string) error {
	dbURL, drop, err := createDatabase(ctx, serverURL, fmt.Sprintf("taskling_demo_%d", os.Getpid()))
	if err != nil {
		return err
	}
	defer drop()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return err
	}
	operator, err := taskling.NewClient(pool, &taskling.Config{HostName: "operator"})
	if err != nil {
		return err
	}
	defer operator.Close()

	bin, err := buildWorker(ctx)
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Dir(bin))

	fmt.Printf("== %d worker processes, task %s/%s, limit 2; each does 3 runs of ~1.5 s\n", workers, app, task)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := 1; i <= workers; i++ {
		name := fmt.Sprintf("w%d", i)
		cmd := workerCommand(ctx, bin, dbURL, name)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				fmt.Println(sc.Text())
			}
			if err := cmd.Wait(); err != nil {
				errs <- fmt.Errorf("worker %s: %w", name, err)
			}
		}()
	}

	time.Sleep(3500 * time.Millisecond)
	raisedAt := time.Now()
	fmt.Printf("%s  operator raises the limit of %s/%s to 3 (an override stored in the task row)\n", raisedAt.Format("15:04:05.000"), app, task)
	if err := operator.UpdateTaskSettings(ctx, app, task, taskling.SettingsUpdate{ConcurrencyLimit: ptr(3)}); err != nil {
		return err
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	fmt.Printf("== all workers done in %.1fs\n\n", time.Since(start).Seconds())
	return report(ctx, operator)
}

// workerCommand is one worker process (examples/worker). The database URL, password and all,
// goes in its environment: a command line is anyone's to read (ps).
func workerCommand(ctx context.Context, bin, dbURL, name string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, "-name", name, "-app", app, "-task", task,
		"-limit", "2", "-runs", "3", "-items", "10", "-item-time", "150ms")
	cmd.Env = append(os.Environ(), "TASKLING_DATABASE_URL="+dbURL)
	return cmd
}

func ptr[T any](v T) *T { return &v }

// span is one execution's hold of a slot.
type span struct {
	id, fence  int64
	host       string
	start, end time.Time
}

// report prints the slot timeline and the execution history, both from the public API (times
// on the database clock).
func report(ctx context.Context, client *taskling.Client) error {
	infos, err := client.LastExecutions(ctx, app, task, 200)
	if err != nil {
		return err
	}
	var spans []span
	for _, i := range infos {
		if i.Status == taskling.StatusBlocked || i.Status == taskling.StatusWaiting {
			continue
		}
		end := i.CompletedAt
		if end.IsZero() {
			end = i.ReclaimedAt
		}
		spans = append(spans, span{id: i.ID, fence: i.FencingToken, host: i.Host, start: i.StartedAt, end: end})
	}
	if len(spans) == 0 {
		return errors.New("no execution held a slot")
	}
	detail, err := client.Task(ctx, app, task)
	if err != nil {
		return err
	}
	raisedAt := detail.OverridesUpdatedAt
	for _, line := range chart(spans, raisedAt, chartWidth) {
		fmt.Println(line)
	}

	before, after := maxOverlap(spans, func(s span) (time.Time, time.Time) { return s.start, s.end }, raisedAt)
	fmt.Printf("\nMost slots held at once: %d before the raise (limit 2), %d after it (limit 3).\n\n", before, after)

	blocked := 0
	fmt.Println("Execution history (newest first):")
	fmt.Printf("  %-5s %-12s %-4s %-10s %-8s %s\n", "ID", "STATUS", "HOST", "REFERENCE", "ITEMS", "DURATION")
	for n, i := range infos {
		if i.Status == taskling.StatusBlocked {
			blocked++
		}
		if n >= 50 {
			continue
		}
		fmt.Printf("  %-5d %-12s %-4s %-10s %3d/%-4d %.2fs\n", i.ID, i.Status, i.Host, i.ReferenceValue,
			i.ItemsDone, i.ItemsTotal, i.CompletedAt.Sub(i.StartedAt).Seconds())
	}
	fmt.Printf("(%d blocked attempts: workers waited for a slot instead of failing)\n", blocked)
	return nil
}

// chartWidth is the chart's width in columns, whatever the run's length.
const chartWidth = 60

// chart draws who held a slot when: a row per span, in start order, its columns '#' while it
// held the slot, and ':' down the column of the raise (raisedAt; none if zero or outside the
// run). The columns share the run, from the first start to the last end, so the chart is full
// whatever the run's length.
func chart(spans []span, raisedAt time.Time, width int) []string {
	spans = slices.Clone(spans)
	sort.Slice(spans, func(a, b int) bool { return spans[a].start.Before(spans[b].start) })
	t0, last := spans[0].start, spans[0].end
	for _, s := range spans {
		if s.end.After(last) {
			last = s.end
		}
	}
	step := max(last.Sub(t0)/time.Duration(width), time.Nanosecond)
	col := func(t time.Time) int { return min(int(t.Sub(t0)/step), width-1) }
	raiseCol := -1
	if !raisedAt.IsZero() && !raisedAt.Before(t0) && !raisedAt.After(last) {
		raiseCol = col(raisedAt)
	}
	lines := []string{fmt.Sprintf("Who held a slot when (seconds on the database clock; a column is %.2fs, '#' holding):", step.Seconds())}
	for _, s := range spans {
		row := []byte(strings.Repeat(" ", width))
		for c := col(s.start); c <= col(s.end); c++ {
			row[c] = '#'
		}
		if raiseCol >= 0 && row[raiseCol] == ' ' {
			row[raiseCol] = ':'
		}
		lines = append(lines, fmt.Sprintf("  %-3s exec %-3d fence %-3d %5.2f–%5.2f |%s|", s.host, s.id, s.fence,
			s.start.Sub(t0).Seconds(), s.end.Sub(t0).Seconds(), row))
	}
	if raiseCol >= 0 {
		lines = append(lines, fmt.Sprintf("  (':' marks the raise of the limit, at %.2fs)", raisedAt.Sub(t0).Seconds()))
	}
	return lines
}

// maxOverlap returns the most intervals open at once before and after t.
func maxOverlap[S any](spans []S, interval func(S) (time.Time, time.Time), t time.Time) (before, after int) {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, s := range spans {
		a, b := interval(s)
		edges = append(edges, edge{a, +1}, edge{b, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta // a release at the same instant comes first
		}
		return edges[i].at.Before(edges[j].at)
	})
	open := 0
	for _, e := range edges {
		open += e.delta
		if e.at.Before(t) {
			before = max(before, open)
		} else {
			after = max(after, open)
		}
	}
	return before, after
}

func buildWorker(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "taskling-demo-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "worker")
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, "./examples/worker")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build the worker (run the demo from the repository root): %w", err)
	}
	return bin, nil
}

// createDatabase creates a database on the server and returns its URL and a func that drops it.
func createDatabase(ctx context.Context, serverURL, name string) (string, func(), error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("parse TASKLING_DATABASE_URL: %w", err)
	}
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", nil, err
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	drop := func() {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}
