package taskling

import (
	"context"
	"errors"
	"fmt"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/store/adminstore"
	"github.com/taskling-go/taskling/internal/store/blockstore"
)

// Operator names who makes an operator change — an override, a retirement, a cancelled
// submission, a forced block — as the task's audit trail records it (TaskChanges).
type Operator struct {
	// Name is recorded as the change's Principal: who made it. "" means "library@" followed by
	// the client's host name (Config.HostName). `taskling serve` records the name of the
	// principal that signed the request, the CLI its --by.
	Name string
	// Note is free text recorded beside it, as the change's By ("ticket OPS-12"); "" records
	// Name there too. Both must pass ValidateOperator: at most 200 bytes of UTF-8 without control
	// or invisible characters.
	Note string
}

// Operations are the operator changes of a client made as one Operator: see Client.As.
type Operations struct {
	c  *Client
	op Operator
}

// As returns the operator changes of c recorded as made by op, the one way to name who makes
// them:
//
//	err := client.As(taskling.Operator{Name: "alice", Note: "OPS-12"}).RetireTask(ctx, "billing", "export-v1")
//
// op is checked by each change, which fails with ErrInvalidArgument, writing nothing, when a
// name is not valid.
func (c *Client) As(op Operator) *Operations { return &Operations{c: c, op: op} }

// asBy is As for the deprecated forms that take a name: by is checked under field, the name those
// forms' errors have always given it.
func (c *Client) asBy(field, by string) (*Operations, error) {
	if err := ValidateOperator(field, by); err != nil {
		return nil, err
	}
	return c.As(Operator{Name: by}), nil
}

// operator checks the operator's names and returns what the audit trail records.
func (o *Operations) operator() (execution.Operator, error) {
	name, note := o.op.Name, o.op.Note
	if name == "" {
		name = "library@" + o.c.host
	} else if err := ValidateOperator("Operator.Name", name); err != nil {
		return execution.Operator{}, err
	}
	if note == "" {
		note = name
	} else if err := ValidateOperator("Operator.Note", note); err != nil {
		return execution.Operator{}, err
	}
	return execution.Operator{Principal: name, By: note}, nil
}

// UpdateTaskSettings stores operator overrides for a task (creating its row if needed). nil
// fields are left as they are (SettingsUpdate.By is ignored: the operator is o's). The next start
// on every host obeys them, whatever its own settings declare; waiters are woken so that a raised
// limit admits them at once. Each field whose value changes is recorded in the task's audit trail
// (TaskChanges), in the same transaction. A retired task's Enabled cannot be changed
// (ErrTaskRetired): unretire it first. A refused update writes nothing but the task's row, which
// it creates for a task that had none.
//
// An update of the liveness settings (DeathMode, KeepAliveInterval, KeepAliveDeathThreshold,
// OverrideThreshold) is checked as it would be in force: the overrides over the settings a host
// of the task last declared (before any host did, over this client's own settings for the task).
// Overrides that no start would accept — a threshold under twice the declared interval, Override
// mode with no threshold — are refused with a *SettingsError (ErrInvalidSettings) naming the
// field and where each value comes from.
func (o *Operations) UpdateTaskSettings(ctx context.Context, app, task string, update SettingsUpdate) (err error) {
	defer wrapErr(&err, "update settings of %s/%s", app, task)
	c := o.c
	if err := validateOwnTask(app, task); err != nil {
		return err
	}
	if update.DeathMode != nil && *update.DeathMode != DeathModeKeepAlive && *update.DeathMode != DeathModeOverride {
		return fmt.Errorf("%w: DeathMode (operator override) is %d; want DeathModeKeepAlive or DeathModeOverride", ErrInvalidSettings, int(*update.DeathMode))
	}
	if err := overrides(update).ValidateFields(); err != nil {
		return err // before the task row is created: a refused update writes nothing
	}
	if err := retentionOverrides(update).ValidateFields(); err != nil {
		return err
	}
	op, err := o.operator()
	if err != nil {
		return err
	}
	id, err := c.taskID(ctx, app, task)
	if err != nil {
		return err
	}
	change := adminstore.OverridesChange{Set: overrides(update), Keep: retentionOverrides(update), Op: op,
		FallbackAs: "this client's settings, as no host declared any yet"}
	if change.Set.Liveness() {
		_, own, err := c.declared(ctx, app, task)
		if err != nil {
			return err
		}
		change.Fallback = &own
	}
	if _, err := c.admin.ChangeOverrides(ctx, id, change); err != nil {
		if se := (*SettingsError)(nil); errors.As(err, &se) {
			return fmt.Errorf("taskling: overrides of %s/%s: %w", app, task, se)
		}
		return fmt.Errorf("taskling: update settings of %s/%s: %w", app, task, err)
	}
	return nil
}

// KeySettingsUpdate is an operator's override of a named key's settings: nil fields are left as
// they are.
type KeySettingsUpdate struct {
	// Limit overrides the key's limit (1 to MaxConcurrencyLimit), whatever KeyLimit and the
	// declared named keys say.
	Limit *int
	// Rate overrides the key's rate, whatever KeyRate and the declared named keys say: a zero
	// Rate overrides it to none. See docs/rates.md.
	Rate *Rate
}

// UpdateKeySettings stores the operator's override of key's settings for a task (creating its row
// if needed): the next start on every host obeys it, and waiters are woken so that a raised limit
// admits them at once. The change is recorded in the task's audit trail (fields key_limit[KEY]
// and key_rate[KEY]). At most MaxNamedKeys keys of a task are overridden, for their limits and
// for their rates. See docs/keys.md and docs/rates.md.
func (o *Operations) UpdateKeySettings(ctx context.Context, app, task, key string, update KeySettingsUpdate) (err error) {
	defer wrapErr(&err, "update settings of key %q of %s/%s", key, app, task)
	if err := validateOwnTask(app, task); err != nil {
		return err
	}
	if err := validateKey("key", key); err != nil {
		return err
	}
	if update.Limit == nil && update.Rate == nil {
		return nil
	}
	if update.Limit != nil {
		if err := execution.CheckNamedKeyLimit("KeySettingsUpdate.Limit", *update.Limit, "operator override"); err != nil {
			return err
		}
	}
	rate := storeRate(update.Rate)
	if rate != nil {
		if err := rate.Validate("KeySettingsUpdate.Rate", " (operator override)"); err != nil {
			return err
		}
	}
	op, err := o.operator()
	if err != nil {
		return err
	}
	id, err := o.c.taskID(ctx, app, task)
	if err != nil {
		return err
	}
	_, err = o.c.admin.ChangeKeyOverrides(ctx, id, adminstore.KeyOverrideChange{Key: key, Limit: update.Limit, Rate: rate, Op: op})
	return err
}

// ClearKeyOverrides removes the operator's overrides of key's settings, recording it: the key
// returns to its declared limit and rate (or KeyLimit and KeyRate). Clearing a key with none
// does nothing.
func (o *Operations) ClearKeyOverrides(ctx context.Context, app, task, key string) (err error) {
	defer wrapErr(&err, "clear overrides of key %q of %s/%s", key, app, task)
	if err := validateKey("key", key); err != nil {
		return err
	}
	id, op, err := o.task(ctx, app, task, false)
	if err != nil || id == 0 {
		return err
	}
	_, err = o.c.admin.ChangeKeyOverrides(ctx, id, adminstore.KeyOverrideChange{Key: key, ClearLimit: true, ClearRate: true, Op: op})
	return err
}

// ClearOverrides removes every operator override of a task, recording each one removed in its
// audit trail: it returns to the settings its requesters declare. A retired task stays retired
// (and disabled) and returns to its declared settings when unretired. Clearing the overrides of
// a task that never ran does nothing.
func (o *Operations) ClearOverrides(ctx context.Context, app, task string) (err error) {
	defer wrapErr(&err, "clear overrides of %s/%s", app, task)
	id, op, err := o.task(ctx, app, task, false)
	if err != nil || id == 0 {
		return err
	}
	if _, err := o.c.admin.ChangeOverrides(ctx, id, adminstore.OverridesChange{Clear: true, Op: op}); err != nil {
		return fmt.Errorf("taskling: clear overrides of %s/%s: %w", app, task, err)
	}
	return nil
}

// RetireTask retires app/task, an operator's way to take a task out of service without losing
// its history:
//
//   - every host refuses its starts from the next one on, with ErrTaskRetired (nothing is
//     written); executions running keep their slots and complete as usual, and waiters for a
//     slot get ErrTaskRetired at once;
//   - its schedule, if it has one, claims no instant (see RetireSchedule);
//   - it leaves the task lists (Tasks, the HTTP API, the dashboard, `taskling tasks list`)
//     unless they ask for TaskRetired; Task, its executions and its audit trail stay readable;
//   - cleanup deletes its history by its keep settings, the latest execution included.
//
// The change is recorded in the task's audit trail, and the operator's Name as who retired it
// (Retirement.By). Retiring a retired task changes nothing. The error wraps ErrNotFound when the
// task does not exist.
func (o *Operations) RetireTask(ctx context.Context, app, task string) (err error) {
	defer wrapErr(&err, "retire %s/%s", app, task)
	id, op, err := o.task(ctx, app, task, true)
	if err != nil {
		return err
	}
	if _, err := o.c.admin.RetireTask(ctx, id, op); err != nil {
		return fmt.Errorf("taskling: retire %s/%s: %w", app, task, err)
	}
	return nil
}

// RetireSchedule retires app/task's schedule only: no host claims its instants (a claim planned
// before commits nothing), while the task itself can still be started, by hand or by Backfill.
// A host that registers it again with Schedule does not bring it back: Schedule returns nil and
// its RunScheduler keeps it dormant until an operator unretires it. Recorded like RetireTask;
// the error wraps ErrNotFound when the task has no schedule.
func (o *Operations) RetireSchedule(ctx context.Context, app, task string) (err error) {
	defer wrapErr(&err, "retire the schedule of %s/%s", app, task)
	id, op, err := o.task(ctx, app, task, true)
	if err != nil {
		return err
	}
	_, found, err := o.c.admin.RetireSchedule(ctx, id, op)
	if err != nil {
		return fmt.Errorf("taskling: retire the schedule of %s/%s: %w", app, task, err)
	}
	if !found {
		return notFound("schedule of task " + app + "/" + task)
	}
	return nil
}

// UnretireTask ends app/task's retirement: its starts are served again, with the enabled
// override it had before, and it is listed again. If it has a schedule, the instants that came
// due while it was retired are recorded as ScheduleEventRetired and not run (its cursor moves to
// now; Backfill can still run them). Recorded like RetireTask; unretiring a task that is not
// retired changes nothing.
func (o *Operations) UnretireTask(ctx context.Context, app, task string) (err error) {
	defer wrapErr(&err, "unretire %s/%s", app, task)
	return o.unretire(ctx, app, task, false)
}

// UnretireSchedule ends the retirement of app/task's schedule: its instants are claimed again
// from now on (those that came due meanwhile are recorded as ScheduleEventRetired, not run).
func (o *Operations) UnretireSchedule(ctx context.Context, app, task string) (err error) {
	defer wrapErr(&err, "unretire the schedule of %s/%s", app, task)
	return o.unretire(ctx, app, task, true)
}

// CancelSubmission cancels submission id. A waiting one is cancelled at once and never runs. A
// running one's Execution.Context() is cancelled with a cause wrapping ErrSubmissionCancelled
// (within a moment, by notification; at the latest at its next heartbeat); it becomes cancelled
// when its attempt ends, or completed if the attempt completes anyway. The cancel is recorded in
// the task's audit trail ("submission #ID"). The error wraps ErrNotFound for an unknown id and
// ErrSubmissionFinished for one already completed, dead or cancelled.
func (o *Operations) CancelSubmission(ctx context.Context, id int64, reason string) (_ Submission, err error) {
	defer wrapErr(&err, "cancel submission %d", id)
	c := o.c
	if err := validateText("reason", reason, MaxCancelReasonLength); err != nil {
		return Submission{}, err
	}
	op, err := o.operator()
	if err != nil {
		return Submission{}, err
	}
	_, found, err := c.subs.CancelSubmission(ctx, id, reason, op)
	if err != nil {
		return Submission{}, err
	}
	sub, err := c.Submission(ctx, id)
	if err != nil {
		return sub, err
	}
	if !found {
		return sub, fmt.Errorf("%w: submission %d is %s", ErrSubmissionFinished, id, sub.Status)
	}
	return sub, nil
}

// ForceBlock asks that block id run again: the next execution of its task that asks for blocks
// of its kind takes it first, whatever its status (a live one once it is no longer live), as a
// new attempt. It is recorded in the task's audit trail ("block #ID"), and the operator's Name
// as who forced it. Forcing a block already queued is a no-op. Until it is taken, the cleanup
// keeps the block, whatever its age. An unknown id (or one the cleanup is deleting at that
// moment) is an error wrapping ErrNotFound.
func (o *Operations) ForceBlock(ctx context.Context, id int64) (err error) {
	defer wrapErr(&err, "force block %d", id)
	op, err := o.operator()
	if err != nil {
		return err
	}
	_, err = o.c.blocks.ForceBlock(ctx, id, op)
	if errors.Is(err, blockstore.ErrBlockNotFound) {
		return notFound(fmt.Sprintf("block %d", id))
	}
	return err
}

// task validates an operator's change of an existing task and returns its id (0 when it does not
// exist and mustExist is false) and the operator.
func (o *Operations) task(ctx context.Context, app, task string, mustExist bool) (int64, execution.Operator, error) {
	if err := validateOwnTask(app, task); err != nil {
		return 0, execution.Operator{}, err
	}
	op, err := o.operator()
	if err != nil {
		return 0, op, err
	}
	id, ok, err := o.c.store.FindTask(ctx, app, task)
	if err != nil {
		return 0, op, err
	}
	if !ok && mustExist {
		return 0, op, notFound("task " + app + "/" + task)
	}
	return id, op, nil
}
