package execution

import (
	"context"
	"fmt"
)

// setOverridesSQL sets the given overrides (a NULL parameter leaves a column as it is) and wakes
// waiters, since a raised limit or an enabled task may let them in.
const setOverridesSQL = `
WITH u AS (
    UPDATE taskling.task_definition SET
        concurrency_limit          = coalesce($2, concurrency_limit),
        enabled                    = coalesce($3, enabled),
        death_mode                 = coalesce($4, death_mode),
        keep_alive_interval        = coalesce($5, keep_alive_interval),
        keep_alive_death_threshold = coalesce($6, keep_alive_death_threshold),
        override_threshold         = coalesce($7, override_threshold),
        overrides_updated_at       = clock_timestamp()
    WHERE id = $1
    RETURNING id
)
SELECT pg_notify('` + notifyChannel + `', id::text) FROM u`

const clearOverridesSQL = `
WITH u AS (
    UPDATE taskling.task_definition SET
        concurrency_limit = NULL, enabled = NULL, death_mode = NULL, keep_alive_interval = NULL,
        keep_alive_death_threshold = NULL, override_threshold = NULL,
        overrides_updated_at = clock_timestamp()
    WHERE id = $1
    RETURNING id
)
SELECT pg_notify('` + notifyChannel + `', id::text) FROM u`

// SetOverrides stores an operator's overrides in the task row; nil fields are left as they are.
// The next acquisition on every host obeys them.
func (s *Store) SetOverrides(ctx context.Context, taskID int64, o Overrides) error {
	if err := o.ValidateFields(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, setOverridesSQL, taskID, o.ConcurrencyLimit, o.Enabled, o.DeathMode,
		o.KeepAliveInterval, o.KeepAliveDeathThreshold, o.OverrideThreshold)
	if err != nil {
		return fmt.Errorf("execution: set overrides of task %d: %w", taskID, err)
	}
	return nil
}

// ClearOverrides removes every operator override of the task.
func (s *Store) ClearOverrides(ctx context.Context, taskID int64) error {
	if _, err := s.pool.Exec(ctx, clearOverridesSQL, taskID); err != nil {
		return fmt.Errorf("execution: clear overrides of task %d: %w", taskID, err)
	}
	return nil
}
