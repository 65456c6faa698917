package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/taskling"
)

// jobHeader is a job's input, stored with its submission.
type jobHeader struct {
	UploadID int64 `json:"upload_id"`
}

// progressEvery spaces out progress reports: one write per line would be one UPDATE per line.
const progressEvery = 200 * time.Millisecond

// runWorker runs jobs until ctx ends, then lets the running one finish for up to cfg.drain.
func runWorker(ctx context.Context, cfg config) error {
	pool, client, err := connect(ctx, cfg.dbURL, cfg.name)
	if err != nil {
		return err
	}
	defer pool.Close()
	defer client.Close()
	j := &job{pool: pool, lineDelay: cfg.lineDelay}
	done := make(chan error, 1)
	go func() {
		// Not ctx: Shutdown, below, ends Work once the running job is done.
		done <- client.Work(context.WithoutCancel(ctx), app, task, j.run, &taskling.WorkOptions{Workers: 1})
	}()
	log.Printf("waiting for jobs")
	select {
	case err := <-done: // a bad task name, or the client closed
		if err == nil {
			err = errors.New("stopped unexpectedly")
		}
		return fmt.Errorf("work: %w", err)
	case <-ctx.Done():
	}
	log.Printf("stopping: a running job has %s to finish", cfg.drain)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.drain)
	defer cancel()
	serr := client.Shutdown(sctx) // past the deadline the job is cancelled and goes back to waiting
	if err := <-done; err != nil {
		return fmt.Errorf("work: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("shutdown: %w", serr)
	}
	log.Printf("stopped")
	return nil
}

type job struct {
	pool      *pgxpool.Pool
	lineDelay time.Duration
}

// run processes one upload, line by line.
func (j *job) run(ctx context.Context, exec *taskling.Execution) error {
	var h jobHeader
	if err := exec.Header(&h); err != nil {
		return err
	}
	var name string
	var body []byte
	err := j.pool.QueryRow(ctx, `SELECT file_name, body FROM webjobs_upload WHERE id = $1`, h.UploadID).Scan(&name, &body)
	if err != nil {
		return fmt.Errorf("load upload %d: %w", h.UploadID, err)
	}
	total := countLines(body)
	log.Printf("upload %d (%s): %d lines, attempt %d", h.UploadID, name, total, exec.Attempt())
	if err := exec.SetProgress(ctx, 0, total); err != nil {
		return fmt.Errorf("report progress: %w", err)
	}
	var done int64
	reported := time.Now()
	for range bytes.Lines(body) {
		// A real job would parse and import the line here; the delay stands in for that work.
		select {
		case <-ctx.Done():
			return context.Cause(ctx) // shutdown past the drain deadline, cancelled, or lease lost
		case <-time.After(j.lineDelay):
		}
		done++
		if done == total || time.Since(reported) >= progressEvery {
			if err := exec.SetProgress(ctx, done, total); err != nil {
				return fmt.Errorf("report progress: %w", err)
			}
			reported = time.Now()
		}
	}
	log.Printf("upload %d (%s): done", h.UploadID, name)
	return nil
}

// countLines counts lines as bytes.Lines yields them: a last line without a newline counts.
func countLines(b []byte) int64 {
	var n int64
	for range bytes.Lines(b) {
		n++
	}
	return n
}
