-- Retention: history is deleted once older than its task's keep settings (execution/cleanup.go).
-- Everything cleanup needs lives outside the hot task row, so that acquisitions never queue
-- behind a cleaning host's writes, nor retry under SERIALIZABLE because of them.

-- One row per task: the keep settings its hosts declared (the last declaration wins) and an
-- operator's overrides of them, and the fleet-wide "who cleans this task now" claim, taken by a
-- compare-and-set so that each task is cleaned at most once per interval.
CREATE TABLE taskling.retention (
    task_id                 bigint      PRIMARY KEY REFERENCES taskling.task_definition (id) ON DELETE CASCADE,
    declared_completed      interval,
    declared_failed         interval,
    declared_blocked        interval,
    declared_by             text,
    declared_at             timestamptz,
    override_completed      interval,
    override_failed         interval,
    override_blocked        interval,
    -- When the last cleaning of the task started, and until when the host cleaning it now holds
    -- the claim (a cleaner that dies loses it then).
    last_cleaned_at         timestamptz,
    claimed_by              text,
    claimed_until           timestamptz,
    rows_deleted            bigint      NOT NULL DEFAULT 0,
    CHECK (declared_completed > interval '0' AND declared_failed > interval '0' AND declared_blocked > interval '0'),
    CHECK (override_completed > interval '0' AND override_failed > interval '0' AND override_blocked > interval '0')
);

-- Promises that outlive the rows they were made from: the cron instants of deleted executions
-- (run, failed or skipped because the previous run was still going), so that Backfill never runs
-- one again. One row per cleaning batch, its instants sorted.
CREATE TABLE taskling.forgotten_instants (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id         bigint      NOT NULL REFERENCES taskling.task_definition (id) ON DELETE CASCADE,
    first_instant   timestamptz NOT NULL,
    last_instant    timestamptz NOT NULL,
    instants        timestamptz[] NOT NULL,
    forgotten_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX forgotten_instants_task_idx ON taskling.forgotten_instants (task_id, last_instant);

-- Finished submissions by age. A submission with a reference value is never deleted (a duplicate
-- reference must still return it): past retention only its header is dropped.
CREATE INDEX submission_finished_idx ON taskling.submission (task_id, finished_at)
    WHERE status >= 3 AND (reference_value IS NULL OR header IS NOT NULL);

