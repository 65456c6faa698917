package taskling

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"go.uber.org/zap"
)

// PanicError is returned by Run when the function panicked; the execution is marked failed.
type PanicError struct {
	Value any
	Stack []byte
}

func (p *PanicError) Error() string {
	return fmt.Sprintf("taskling: task function panicked: %v", p.Value)
}

// Run starts an execution of app/task, runs fn under it and completes it. fn's context ends
// with Run's ctx and when the execution's lease is lost. An error or a panic of fn marks the
// execution failed (a panic comes back as *PanicError). A denied start returns its error (ErrLimitReached,
// ErrRateLimited, ErrTaskDisabled, ErrTaskRetired, ErrDuplicateReference: see StartExecution)
// without calling fn. Run returns fn's error; or, when fn succeeded but the slot had been
// reclaimed meanwhile, an error wrapping ErrLeaseLost.
func (c *Client) Run(ctx context.Context, app, task string, fn func(ctx context.Context, exec *Execution) error, opts *StartOptions) error {
	if fn == nil {
		return fmt.Errorf("%w: fn is nil", ErrInvalidArgument)
	}
	exec, err := c.StartExecution(ctx, app, task, opts)
	if err != nil {
		return err
	}
	return c.runStarted(ctx, exec, fn)
}

// runStarted runs fn under a granted execution and completes it, as Run does.
func (c *Client) runStarted(ctx context.Context, exec *Execution, fn func(ctx context.Context, exec *Execution) error) error {
	app, task := exec.app, exec.task
	runCtx, cancel := context.WithCancelCause(exec.Context())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	// fn's context checks the lease deadline itself, as Execution.Context() does.
	err := callProtected(leaseContext{Context: runCtx, e: exec}, exec, fn)
	stop()
	cancel(nil)

	// Release even when ctx is over; a release past the lease is pointless (the slot is
	// reclaimed by then), so that bounds the wait.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), max(exec.leaseTTL, time.Second))
	defer ccancel()
	if err != nil {
		_ = exec.RecordError(cctx, err.Error(), true)
		if exec.startedBlocks.Load() {
			// The blocks it was running are dead once it ends: say why.
			msg := truncate(cleanText(fmt.Sprintf("execution %d failed: %v", exec.id, err)))
			if nerr := c.blocks.NoteBlockFailure(cctx, exec.id, msg); nerr != nil {
				c.log.Warn("taskling: could not note a failure on its blocks", zap.Int64("execution", exec.id), zap.Error(nerr))
			}
		}
	}
	cerr := exec.finish(cctx, err != nil, err)
	if err != nil {
		if cerr != nil && !errors.Is(cerr, ErrLeaseLost) {
			return errors.Join(err, cerr)
		}
		return err
	}
	if cerr == nil && errors.Is(context.Cause(exec.Context()), ErrLeaseLost) {
		return fmt.Errorf("%w: execution %d of %s/%s lost its lease while running", ErrLeaseLost, exec.id, app, task)
	}
	return cerr
}

func callProtected(ctx context.Context, exec *Execution, fn func(context.Context, *Execution) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn(ctx, exec)
}
