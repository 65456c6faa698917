// Command webjobs is a web app that runs uploads as background jobs: a browser uploads a text or
// CSV file, the app stores it and submits a job in one transaction (SubmitTx), and redirects to a
// progress page that polls the app — never taskling — for the job's status. Workers take the jobs
// (Work), one at a time fleet-wide (the task's limit is 1), and process the file line by line,
// reporting progress.
//
//	scripts/with-db.sh go run ./examples/webjobs          # web server + 2 worker processes
//	TASKLING_DATABASE_URL=postgres://… go run ./examples/webjobs -role web -addr :8080
//	TASKLING_DATABASE_URL=postgres://… go run ./examples/webjobs -role worker -name w1
//
// With -role all (the default) the program works in a database of its own that it creates and
// drops, serves the web app and runs two copies of itself with -role worker; upload two files and
// watch the second wait while the first runs. With -role web or -role worker it is one part of
// the app on the database you name, until SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

const (
	app, task = "webjobs", "process-upload"
	workers   = 2 // worker processes started by -role all
)

type config struct {
	dbURL     string
	addr      string
	name      string
	lineDelay time.Duration
	maxUpload int64
	drain     time.Duration
}

func main() {
	var (
		cfg      config
		role     = flag.String("role", "all", "all (web server + 2 worker processes, in a fresh database), web or worker")
		lifeline = flag.Bool("stdin-lifeline", false, "stop when stdin reaches EOF (-role all gives its workers this, so they die with it)")
	)
	flag.StringVar(&cfg.dbURL, "database-url", os.Getenv("TASKLING_DATABASE_URL"), "PostgreSQL URL (default $TASKLING_DATABASE_URL)")
	flag.StringVar(&cfg.addr, "addr", "localhost:8080", "web server address")
	flag.StringVar(&cfg.name, "name", "", "host name recorded on executions (default: the OS host name)")
	flag.DurationVar(&cfg.lineDelay, "line-delay", 10*time.Millisecond, "time the job spends on each line")
	flag.Int64Var(&cfg.maxUpload, "max-upload", 5<<20, "largest upload, in bytes")
	flag.DurationVar(&cfg.drain, "drain", 10*time.Second, "on SIGTERM, how long a running job may go on before it is cancelled (and later retried)")
	flag.Parse()
	if cfg.name != "" {
		log.SetPrefix(cfg.name + ": ")
	}
	log.SetFlags(log.Ltime | log.Lmsgprefix)
	if cfg.dbURL == "" {
		log.Fatal("webjobs: set -database-url or TASKLING_DATABASE_URL (or run it under scripts/with-db.sh)")
	}
	if cfg.maxUpload <= 0 {
		log.Fatal("webjobs: -max-upload must be positive")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *lifeline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	}
	var err error
	switch *role {
	case "all":
		err = launch(ctx, cfg)
	case "web":
		err = runWeb(ctx, cfg)
	case "worker":
		err = runWorker(ctx, cfg)
	default:
		err = fmt.Errorf("unknown -role %q; want all, web or worker", *role)
	}
	if err != nil {
		log.Fatalf("webjobs: %v", err)
	}
}

// launch creates a database, starts the worker processes on it and serves the web app until ctx
// ends or a worker exits.
func launch(ctx context.Context, cfg config) error {
	db, err := pgtest.CreateDatabase(ctx, cfg.dbURL, false)
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := db.Drop(dctx); err != nil {
			log.Printf("webjobs: %v", err)
		}
	}()
	// Connecting first creates the schema and the uploads table, before any worker starts.
	pool, client, err := connect(ctx, db.URL, "web")
	if err != nil {
		return err
	}
	defer pool.Close()
	defer client.Close()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program: %w", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel(nil) // stops the workers (SIGTERM)
		wg.Wait()   // before the database is dropped
	}()
	for i := 1; i <= workers; i++ {
		name := fmt.Sprintf("worker-%d", i)
		cmd := workerCommand(ctx, self, db.URL, name, cfg)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		// Stop it as SIGTERM would: it finishes its job first.
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = cfg.drain + 5*time.Second
		// Only this process holds the pipe's other end: if it dies, the worker sees EOF and stops.
		if _, err := cmd.StdinPipe(); err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
		wg.Go(func() {
			err := cmd.Wait()
			switch {
			case ctx.Err() == nil:
				if err == nil {
					err = errors.New("exit status 0")
				}
				cancel(fmt.Errorf("%s exited early: %w", name, err))
			case err != nil && !errors.Is(err, context.Canceled): // Canceled: stopped by SIGTERM, exit status 0
				log.Printf("webjobs: %s: %v", name, err)
			}
		})
	}
	if err := serve(ctx, cfg, pool, client); err != nil {
		return err
	}
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// workerCommand is one worker process of -role all. The database URL, password and all, goes
// in its environment: a command line is anyone's to read (ps).
func workerCommand(ctx context.Context, self, dbURL, name string, cfg config) *exec.Cmd {
	cmd := exec.CommandContext(ctx, self, "-role", "worker", "-name", name,
		"-line-delay", cfg.lineDelay.String(), "-drain", cfg.drain.String(), "-stdin-lifeline")
	cmd.Env = append(os.Environ(), "TASKLING_DATABASE_URL="+dbURL)
	return cmd
}

func runWeb(ctx context.Context, cfg config) error {
	pool, client, err := connect(ctx, cfg.dbURL, cfg.name)
	if err != nil {
		return err
	}
	defer pool.Close()
	defer client.Close()
	return serve(ctx, cfg, pool, client)
}

// connect opens a pool and a client on dbURL, creating taskling's schema and the uploads table
// if they are missing.
func connect(ctx context.Context, dbURL, name string) (*pgxpool.Pool, *taskling.Client, error) {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	if err := setup(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: name, Defaults: taskling.TaskSettings{
		ConcurrencyLimit: 1, // one job at a time, fleet-wide: the next upload waits its turn
		// A worker that dies mid-job is judged dead 5 s after its last heartbeat; its job is retried.
		KeepAliveInterval: time.Second, KeepAliveDeathThreshold: 5 * time.Second,
	}})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, client, nil
}

// uploadsSQL is the app's own table. submission_id names the job (taskling.submission); it is
// not a foreign key, to leave taskling's tables to taskling.
const uploadsSQL = `
CREATE TABLE IF NOT EXISTS webjobs_upload (
    id            bigserial   PRIMARY KEY,
    file_name     text        NOT NULL,
    body          bytea       NOT NULL,
    submission_id bigint,
    uploaded_at   timestamptz NOT NULL DEFAULT now()
)`

func setup(ctx context.Context, pool *pgxpool.Pool) error {
	if err := migrations.Up(ctx, pool); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// Under a lock: two processes running CREATE TABLE IF NOT EXISTS at once can both try to create it.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('webjobs_upload'))`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, uploadsSQL)
		return err
	})
	if err != nil {
		return fmt.Errorf("create table webjobs_upload: %w", err)
	}
	return nil
}
