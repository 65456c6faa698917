package execution

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A host's declaration — the settings its code and configuration give a task, before the
// operator's overrides — is read by each of its token transactions, which store only the limit
// (in the task row, for disagreements). The rest is recorded outside them, when it changes
// (Declare), for the operators' tools: an override is checked against it, and a task shows where
// its enabled state comes from and whether its overrides fit it.

// DeclaredSettings are the settings a task's hosts last declared, beyond the limit, and by which
// host (migration 0015).
type DeclaredSettings struct {
	Enabled                 bool
	DeathMode               int16
	KeepAliveInterval       time.Duration
	KeepAliveDeathThreshold time.Duration
	OverrideThreshold       time.Duration
	By                      string
	At                      time.Time
}

// Settings are d as complete settings with the given limit (retention aside).
func (d DeclaredSettings) Settings(limit int) Settings {
	return Settings{ConcurrencyLimit: limit, Enabled: d.Enabled, DeathMode: d.DeathMode, KeepAliveInterval: d.KeepAliveInterval,
		KeepAliveDeathThreshold: d.KeepAliveDeathThreshold, OverrideThreshold: d.OverrideThreshold}
}

// Source names d in errors.
func (d DeclaredSettings) Source() string { return "declared by " + d.By }

const declareSQL = `
INSERT INTO taskling.task_declaration AS t (task_id, enabled, death_mode, keep_alive_interval, keep_alive_death_threshold,
    override_threshold, declared_by)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (task_id) DO UPDATE SET enabled = excluded.enabled, death_mode = excluded.death_mode,
    keep_alive_interval = excluded.keep_alive_interval, keep_alive_death_threshold = excluded.keep_alive_death_threshold,
    override_threshold = excluded.override_threshold, declared_by = excluded.declared_by, declared_at = clock_timestamp()
WHERE (t.enabled, t.death_mode, t.keep_alive_interval, t.keep_alive_death_threshold, t.override_threshold, t.declared_by)
      IS DISTINCT FROM (excluded.enabled, excluded.death_mode, excluded.keep_alive_interval,
                        excluded.keep_alive_death_threshold, excluded.override_threshold, excluded.declared_by)`

const declareRetentionSQL = `
INSERT INTO taskling.retention AS r (task_id, declared_completed, declared_failed, declared_blocked, declared_by, declared_at)
VALUES ($1, $2, $3, $4, $5, clock_timestamp())
ON CONFLICT (task_id) DO UPDATE SET declared_completed = excluded.declared_completed,
    declared_failed = excluded.declared_failed, declared_blocked = excluded.declared_blocked,
    declared_by = excluded.declared_by, declared_at = excluded.declared_at
WHERE (r.declared_completed, r.declared_failed, r.declared_blocked, r.declared_by)
      IS DISTINCT FROM (excluded.declared_completed, excluded.declared_failed, excluded.declared_blocked, excluded.declared_by)`

// Declare records the settings host declares for a task (the last declaration wins, like a
// declared limit), its keep settings included (when set), in one round trip; nothing is written
// where they are unchanged.
func (s *Store) Declare(ctx context.Context, taskID int64, d Settings, host string) error {
	b := &pgx.Batch{}
	b.Queue(declareSQL, taskID, d.Enabled, d.DeathMode, d.KeepAliveInterval, d.KeepAliveDeathThreshold, d.OverrideThreshold, host)
	if r := d.Retention; r != (Retention{}) {
		b.Queue(declareRetentionSQL, taskID, r.Completed, r.Failed, r.Blocked, host)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("execution: declare the settings of task %d: %w", taskID, err)
	}
	return nil
}

// declarationSQL reads a task's declaration and its declared limit (1 if none: any valid one).
const declarationSQL = `
SELECT coalesce(d.declared_limit, 1), t.enabled, t.death_mode, t.keep_alive_interval, t.keep_alive_death_threshold,
    t.override_threshold, t.declared_by, t.declared_at
FROM taskling.task_declaration t JOIN taskling.task_definition d ON d.id = t.task_id
WHERE t.task_id = $1`

// declaredOf reads declarationSQL's row: the declared settings, and their source.
func declaredOf(row pgx.Row) (Settings, string, bool, error) {
	var d DeclaredSettings
	var limit int
	err := row.Scan(&limit, &d.Enabled, &d.DeathMode, &d.KeepAliveInterval, &d.KeepAliveDeathThreshold, &d.OverrideThreshold, &d.By, &d.At)
	if errors.Is(err, pgx.ErrNoRows) {
		return Settings{}, "", false, nil
	}
	return d.Settings(limit), d.Source(), err == nil, err
}

// SettingsError reports why every start of the task fails on the host that declared last: its
// overrides over that declaration are invalid (nil when they are valid, or nothing was declared).
func (t TaskSummary) SettingsError() error {
	d := t.Declaration
	if d == nil {
		return nil
	}
	limit := 1
	if t.DeclaredLimit != nil {
		limit = *t.DeclaredLimit
	}
	return t.Overrides.Check(d.Settings(limit), d.Source())
}

// declaredColumns scan a declaration's columns from a LEFT JOIN (NULL: none).
type declaredColumns struct {
	enabled                                *bool
	mode                                   *int16
	interval, threshold, overrideThreshold *time.Duration
	by                                     *string
	at                                     *time.Time
}

func (c declaredColumns) settings() *DeclaredSettings {
	if c.enabled == nil || c.mode == nil || c.interval == nil || c.threshold == nil || c.overrideThreshold == nil || c.by == nil || c.at == nil {
		return nil
	}
	return &DeclaredSettings{Enabled: *c.enabled, DeathMode: *c.mode, KeepAliveInterval: *c.interval, KeepAliveDeathThreshold: *c.threshold,
		OverrideThreshold: *c.overrideThreshold, By: *c.by, At: *c.at}
}
