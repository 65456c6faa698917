// Package settingsfile is a taskling.SettingsSource read from a TOML file that it watches: an
// edit applies to the next start on this host, without a restart. It lives apart from package
// taskling so that programs that do not read such a file do not link its parser and watcher.
//
//	src, err := settingsfile.Open(ctx, "/etc/myapp/taskling.toml", nil)
//	if err != nil {
//		return err // the file is missing or malformed: nothing to run with
//	}
//	defer src.Close()
//	client, err := taskling.NewClient(pool, &taskling.Config{Settings: src})
//
// The file:
//
//	[defaults]                      # every task of every application
//	keep_alive_death_threshold = "30s"
//
//	[applications.billing]          # every task of application billing
//	concurrency_limit = 4
//
//	[applications.billing.tasks.export]
//	concurrency_limit = 1
//	death_mode = "override"         # or "keepalive"
//	override_threshold = "2h"
//
// Keys: concurrency_limit (-1 unlimited, 1 to 10 000), disabled, death_mode,
// keep_alive_interval, keep_alive_death_threshold, override_threshold and lease_safety_margin
// (durations as "90s", "2h"), the retention keep_completed, keep_failed and keep_blocked
// ("14d", "36h" or "forever"), key_limit, rate and key_rate (rates as taskling.ParseRate reads
// them), and [….keys.KEY] tables of a named key's limit and rate. A task's settings are its own keys over its application's over the
// file's defaults; what the file leaves unset inherits from Config.Defaults and the library's
// defaults, and operator overrides win over the file.
//
// A malformed edit (bad TOML, an unknown key, a value out of bounds, a combination no start would
// accept) is refused: the last good settings stay in force, the error names the file, the line
// and the key, it is logged, and Status and the metrics of Collector report it until a good edit.
// So is a file over MaxFileSize (1 MiB), or a path that does not resolve to a regular file (a
// device, a FIFO, a directory): it is refused before it is read, naming the file.
//
// The watch covers the file's directory, and the directory of the file the path resolves to:
// after a change there (and Options.Debounce of quiet), the path is resolved anew and the file
// read if the change named it or the path now resolves elsewhere. A file replaced by a rename,
// a symlink's target edited, and a Kubernetes ConfigMap update (taskling.toml ->
// ..data/taskling.toml, with a new ..data symlink renamed over the old one) are all read.
package settingsfile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"

	"github.com/taskling-go/taskling/taskling"
)

// Options configure a Source. A nil *Options means the defaults.
type Options struct {
	// Logger receives reload errors and successes (default: none).
	Logger *zap.Logger
	// Debounce waits this long after the last change before reading the file, so that an
	// editor's several writes are read once (default 50 ms): an edit applies this long after it.
	Debounce time.Duration
}

// Source is a taskling.SettingsSource read from a file. Its methods are safe for concurrent use.
type Source struct {
	path    string
	log     *zap.Logger
	watcher *fsnotify.Watcher
	done    chan struct{}
	wg      sync.WaitGroup

	mu       sync.RWMutex
	settings *file // the last good file
	status   Status
}

// Status is the state of the file's reloads.
type Status struct {
	// LoadedAt is when the settings in force were read.
	LoadedAt time.Time
	// Reloads counts the good reads since Open (the first included); Failures the refused ones.
	Reloads, Failures int64
	// Err is the error of the last read if it was refused (the settings of LoadedAt stay in
	// force), nil once a read succeeds.
	Err error
}

// Open reads the file, refusing it if it is malformed, and watches it until Close.
func Open(_ context.Context, path string, opts *Options) (*Source, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Debounce <= 0 {
		o.Debounce = 50 * time.Millisecond
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("settingsfile: %w", err)
	}
	s := &Source{path: abs, log: o.Logger, done: make(chan struct{})}
	f, err := load(abs)
	if err != nil {
		return nil, err
	}
	s.settings = f
	s.status = Status{LoadedAt: time.Now(), Reloads: 1}
	// Watch the directory: editors and config management replace the file (write a new one,
	// rename it over the old), and Kubernetes swaps a symlink (..data) that the path resolves
	// through, which a watch on the file itself would lose. The directory of the file the path
	// resolves to is watched too, for edits of a symlink's target elsewhere.
	if s.watcher, err = fsnotify.NewWatcher(); err != nil {
		return nil, fmt.Errorf("settingsfile: watch %s: %w", abs, err)
	}
	if err := s.watcher.Add(filepath.Dir(abs)); err != nil {
		_ = s.watcher.Close()
		return nil, fmt.Errorf("settingsfile: watch %s: %w", abs, err)
	}
	w := &watchState{}
	s.follow(w)
	s.wg.Add(1)
	go s.watch(o.Debounce, w)
	return s, nil
}

// TaskSettings implements taskling.SettingsSource: the file's settings for app/task, as last read.
func (s *Source) TaskSettings(_ context.Context, app, task string) (taskling.TaskSettings, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.settings.task(app, task), nil
}

// Status reports the reloads so far.
func (s *Source) Status() Status {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.status
}

// Reload reads the file now; an error leaves the settings in force unchanged (as a watched
// edit does).
func (s *Source) Reload() error {
	f, err := load(s.path)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.status.Failures++
		s.status.Err = err
		s.log.Error("taskling: settings file refused; the last good settings stay in force", zap.Error(err),
			zap.Time("in_force_since", s.status.LoadedAt))
		return err
	}
	s.settings = f
	s.status = Status{LoadedAt: time.Now(), Reloads: s.status.Reloads + 1, Failures: s.status.Failures}
	s.log.Info("taskling: settings file reloaded", zap.String("file", s.path))
	return nil
}

// Close stops watching the file; the settings last read stay available.
func (s *Source) Close() {
	select {
	case <-s.done:
		return
	default:
	}
	close(s.done)
	_ = s.watcher.Close()
	s.wg.Wait()
}

// watchState is what the watch goroutine knows of the path: the file it resolved to when last
// read, and the other directory watched for it ("" when that is the path's own).
type watchState struct {
	target, targetDir string
}

// follow re-resolves the path and watches the directory of the file it resolves to.
func (s *Source) follow(w *watchState) {
	t, err := filepath.EvalSymlinks(s.path)
	if err != nil {
		return
	}
	w.target = t
	dir := filepath.Dir(t)
	if dir == filepath.Dir(s.path) || dir == w.targetDir {
		return
	}
	if w.targetDir != "" {
		_ = s.watcher.Remove(w.targetDir) // gone already when Kubernetes removed the old version
	}
	w.targetDir = ""
	if err := s.watcher.Add(dir); err != nil {
		s.log.Warn("taskling: watching the settings file's target", zap.String("file", s.path), zap.String("dir", dir), zap.Error(err))
		return
	}
	w.targetDir = dir
}

func (s *Source) watch(debounce time.Duration, w *watchState) {
	defer s.wg.Done()
	var timer *time.Timer
	var fire <-chan time.Time
	named := false // an event of the batch named the path or the file it resolves to
	for {
		select {
		case <-s.done:
			if timer != nil {
				timer.Stop()
			}
			return
		case ev, ok := <-s.watcher.Events:
			if !ok {
				return
			}
			if ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Remove) == 0 {
				continue
			}
			// Any other name may be a symlink the path resolves through: re-resolved below.
			name := filepath.Clean(ev.Name)
			named = named || name == s.path || name == w.target
			if timer == nil {
				timer = time.NewTimer(debounce)
			} else {
				timer.Reset(debounce)
			}
			fire = timer.C
		case err, ok := <-s.watcher.Errors:
			if !ok {
				return
			}
			s.log.Warn("taskling: watching the settings file", zap.String("file", s.path), zap.Error(err))
		case <-fire:
			fire = nil
			before := w.target
			if _, err := os.Stat(s.path); errors.Is(err, os.ErrNotExist) {
				continue // replaced by a rename: its Create follows
			}
			s.follow(w)
			if !named && w.target == before {
				continue // another file of a watched directory
			}
			named = false
			_ = s.Reload() // logged; the last good settings stay
		}
	}
}
