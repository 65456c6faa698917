package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskling-go/taskling/taskling"
)

// The exit codes of `submissions watch` and `executions watch`, their own (issue 28): a script
// waits on a run and branches on how it ended.
const (
	watchCompleted = 0 // it completed
	watchFailed    = 1 // it failed, is dead, was cancelled or was blocked (denied)
	watchNotFound  = 2 // no such submission or execution (and usage errors, as everywhere)
	watchLost      = 3 // the database could not be reached for --timeout
)

// watchState is what a watched run is doing, as the view shows it.
type watchState struct {
	phase   string // waiting, running, or how it ended
	text    string // the view's words for it
	bar     string // a running one's progress bar, for a terminal ("" for none)
	key     string // what a new plain line needs to change (not every item done)
	ended   bool
	code    int
	problem string // why it did not complete (its last error), printed at the end
	// final is an ended run's progress as it ended, as a running state (nil: it has none): a
	// run that ends between two reads is shown with it, not with the last read's.
	final *watchState
}

// groupDigits writes n with a space every three digits: 1 000.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// running is the state of a run with its progress.
func running(done, total int64) watchState {
	s := watchState{phase: "running", text: "running", key: "running"}
	switch {
	case total > 0:
		pct := done * 100 / total
		s.text = fmt.Sprintf("running %d %% (%s of %s items)", pct, groupDigits(done), groupDigits(total))
		s.key = fmt.Sprintf("running %d", pct)
		const width = 20
		fill := int(done * width / total)
		s.bar = "[" + strings.Repeat("#", fill) + strings.Repeat("-", width-fill) + "]"
	case done > 0:
		s.text = fmt.Sprintf("running (%s items done)", groupDigits(done))
		s.key = "running " + strconv.FormatInt(done/100, 10)
	}
	return s
}

// endedState is a run that ended, with the progress it ended with.
func endedState(phase string, code int, problem string, done, total int64) watchState {
	s := watchState{phase: phase, text: phase, key: phase, ended: true, code: code, problem: problem}
	if done > 0 || total > 0 {
		final := running(done, total)
		s.final = &final
	}
	return s
}

// submissionState is what a submission is doing.
func submissionState(s taskling.Submission) watchState {
	switch s.Status {
	case taskling.SubmissionWaiting:
		text := fmt.Sprintf("waiting (position %d)", s.Position)
		if s.Attempts > 0 {
			text = fmt.Sprintf("waiting (position %d; attempt %d of %d next)", s.Position, s.Attempts+1, s.MaxAttempts)
		}
		return watchState{phase: "waiting", text: text, key: text}
	case taskling.SubmissionInProgress:
		return running(s.ItemsDone, s.ItemsTotal)
	case taskling.SubmissionCompleted:
		return endedState("completed", watchCompleted, "", s.ItemsDone, s.ItemsTotal)
	case taskling.SubmissionCancelled:
		return endedState("cancelled", watchFailed, s.CancelReason, s.ItemsDone, s.ItemsTotal)
	}
	return endedState(string(s.Status), watchFailed, s.LastError, s.ItemsDone, s.ItemsTotal) // dead
}

// executionState is what an execution is doing.
func executionState(x taskling.ExecutionDetail) watchState {
	switch x.Status {
	case taskling.StatusInProgress:
		return running(x.ItemsDone, x.ItemsTotal)
	case taskling.StatusCompleted:
		return endedState("completed", watchCompleted, "", x.ItemsDone, x.ItemsTotal)
	case taskling.StatusBlocked:
		return endedState("blocked", watchFailed, x.BlockedReason, 0, 0)
	}
	problem := ""
	for _, ev := range x.Events {
		if ev.Type == taskling.EventError {
			problem = ev.Message
		}
	}
	return endedState(string(x.Status), watchFailed, problem, x.ItemsDone, x.ItemsTotal) // failed or dead
}

// watchView draws the states: on a terminal, one line redrawn in place, its phases joined by
// arrows; elsewhere a plain line each time the state changes.
type watchView struct {
	w        io.Writer // raw: the view writes its own control sequences, and only its own text
	terminal bool
	trail    []string // the last text of each earlier phase
	current  watchState
	shown    string
}

// maxTrail bounds the earlier phases a terminal line keeps (a submission retried goes through
// waiting and running again).
const maxTrail = 3

func (v *watchView) show(s watchState) {
	if s.ended && s.final != nil && v.current.phase == "running" {
		// It ended between two reads: its running phase shows the progress it ended with.
		v.current = *s.final
		if !v.terminal {
			v.plainLine(*s.final)
		}
	}
	if s.phase != v.current.phase && v.current.phase != "" {
		v.trail = append(v.trail, v.current.text)
		if len(v.trail) > maxTrail {
			v.trail = v.trail[len(v.trail)-maxTrail:]
		}
	}
	v.current = s
	if !v.terminal {
		v.plainLine(s)
		return
	}
	line := strings.Join(append(append([]string(nil), v.trail...), strings.TrimSpace(s.text+" "+s.bar)), " → ")
	fmt.Fprint(v.w, "\r\x1b[2K"+terminalSafe(line))
	if s.ended {
		fmt.Fprintln(v.w)
	}
}

// plainLine prints s off a terminal, if it differs from the line printed last.
func (v *watchView) plainLine(s watchState) {
	if s.key != v.shown {
		v.shown = s.key
		fmt.Fprintln(v.w, terminalSafe(s.text))
	}
}

// isTerminal reports whether w is a terminal that can redraw a line.
func isTerminal(w io.Writer, getenv func(string) string) bool {
	f, ok := w.(*os.File)
	if !ok || getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// watchOptions are the flags of the watch commands.
type watchOptions struct{ interval time.Duration }

func (o *watchOptions) register(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&o.interval, "interval", time.Second, "how often to read it (at least 100ms)")
}

const watchHelp = `Exit codes of watch (its own): 0 completed; 1 failed, dead, cancelled or blocked;
2 not found (and usage errors); 3 the database could not be reached for --timeout (30s).
On a terminal the line is redrawn in place; otherwise a line is printed each time the state
changes (a running one's at each whole percent).`

func newSubmissionWatchCommand(e *env) *cobra.Command {
	var o watchOptions
	cmd := &cobra.Command{
		Use:   "watch ID [--interval D]",
		Short: "Follow a submission until it ends: waiting (position) → running (progress) → completed",
		Long: `Follow a submission until it ends: "waiting (position 3) → running 41 % (410 of 1 000 items)
[bar] → completed". The position is its place among the task's waiting submissions, highest
priority first, then oldest (1: next); it counts every waiting submission of the task ahead of
it, so it says how many will be taken before it, not when a slot frees.

` + watchHelp,
		Args: exactArgs(1, "one argument, a submission ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID("submission", args[0])
			if err != nil {
				return err
			}
			return e.watch(cmd.Context(), o, "submission", id, func(ctx context.Context, c *taskling.Client) (watchState, error) {
				s, err := c.Submission(ctx, id)
				return submissionState(s), err
			})
		},
	}
	o.register(cmd)
	return cmd
}

func newExecutionWatchCommand(e *env) *cobra.Command {
	var o watchOptions
	cmd := &cobra.Command{
		Use:   "watch ID [--interval D]",
		Short: "Follow an execution until it ends: running (progress) → completed",
		Long:  "Follow an execution until it ends: \"running 41 % (410 of 1 000 items) [bar] → completed\".\n\n" + watchHelp,
		Args:  exactArgs(1, "one argument, an execution ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID("execution", args[0])
			if err != nil {
				return err
			}
			return e.watch(cmd.Context(), o, "execution", id, func(ctx context.Context, c *taskling.Client) (watchState, error) {
				x, err := c.Execution(ctx, id)
				return executionState(x), err
			})
		},
	}
	o.register(cmd)
	return cmd
}

// watch reads a run every interval and shows it until it ends. A read that fails is retried
// until reads have failed for --timeout: the connection is then lost.
func (e *env) watch(ctx context.Context, o watchOptions, kind string, id int64,
	read func(ctx context.Context, c *taskling.Client) (watchState, error)) error {
	if o.interval < 100*time.Millisecond {
		return usageErrorf("--interval is %s; want at least 100ms", o.interval)
	}
	lost := func(err error) error {
		return &exitError{code: watchLost, err: fmt.Errorf("%s %d: connection lost: %w", kind, id, err)}
	}
	cctx, cancel := context.WithTimeout(ctx, e.timeout)
	pool, err := e.connect(cctx)
	cancel()
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) && ee.code == exitUsage {
			return err
		}
		return lost(err)
	}
	defer pool.Close()
	c, err := taskling.NewClient(pool, &taskling.Config{HostName: hostName(e), CleanupInterval: -1})
	if err != nil {
		return err
	}
	defer c.Close()
	view := &watchView{w: e.rawStdout, terminal: isTerminal(e.rawStdout, e.getenv)}
	lastRead := time.Now()
	for {
		rctx, cancel := context.WithTimeout(ctx, e.timeout)
		s, err := read(rctx, c)
		cancel()
		switch {
		case errors.Is(err, taskling.ErrNotFound):
			return &exitError{code: watchNotFound, err: err}
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil && time.Since(lastRead) >= e.timeout:
			return lost(err)
		case err == nil:
			lastRead = time.Now()
			view.show(s)
			if s.ended {
				return watchEnd(kind, id, s)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(o.interval):
		}
	}
}

// watchEnd is how a watch that saw the end exits.
func watchEnd(kind string, id int64, s watchState) error {
	if s.code == watchCompleted {
		return nil
	}
	msg := fmt.Sprintf("%s %d is %s", kind, id, s.phase)
	if s.problem != "" {
		msg += ": " + s.problem
	}
	return &exitError{code: s.code, err: errors.New(msg)}
}
