package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// fileLock is an exclusive flock. Each lock opens the file anew, so it excludes other goroutines
// of this process as well as other processes.
type fileLock struct{ f *os.File }

func lockFile(ctx context.Context, path string) (*fileLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: open lock file: %w", err)
	}
	// Poll a non-blocking flock so that ctx can end the wait.
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &fileLock{f: f}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("pgcluster: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("pgcluster: wait for lock %s: %w", path, context.Cause(ctx))
		case <-time.After(delay):
		}
	}
}

func (l *fileLock) unlock() {
	// Closing the file releases the flock.
	l.f.Close()
}
