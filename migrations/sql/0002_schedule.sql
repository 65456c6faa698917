-- Cron schedules (DESIGN §9): one row per scheduled task, holding its spec, zone, policies and
-- cursor, and a log of the instants the scheduler decided not to run.

CREATE TABLE taskling.schedule (
    task_id             bigint      PRIMARY KEY REFERENCES taskling.task_definition (id) ON DELETE CASCADE,
    spec                text        NOT NULL,
    -- IANA zone name; the spec's wall-clock times are in this zone.
    time_zone           text        NOT NULL,
    -- 1 RunLatest, 2 RunAll, 3 Skip.
    catch_up            smallint    NOT NULL,
    -- Instants older than this (on the DB clock) are never run: recorded as expired. NULL: no window.
    catch_up_window     interval,
    max_catch_up        integer     NOT NULL,
    -- 1 Skip, 2 Wait.
    overlap             smallint    NOT NULL,
    -- An instant claimed within this long after it is on time; later, it was missed.
    misfire_threshold   interval    NOT NULL,
    -- The last scheduled instant already decided (run, skipped or expired), or the registration
    -- time. Advanced only by a compare-and-set on its previous value, in the transaction that
    -- claims the next instant or records the skipped ones.
    cursor_at           timestamptz NOT NULL,
    registered_by       text        NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    changed_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT schedule_catch_up_check CHECK (catch_up IN (1, 2, 3)),
    CONSTRAINT schedule_overlap_check CHECK (overlap IN (1, 2)),
    CONSTRAINT schedule_max_catch_up_check CHECK (max_catch_up >= 1)
);

-- Instants not run (skipped by the catch-up policy, expired, skipped while the task was
-- disabled), as ranges, and registrations and spec changes. Instants skipped because the previous
-- run was still going are Blocked executions with scheduled_for set.
CREATE TABLE taskling.schedule_event (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id         bigint      NOT NULL REFERENCES taskling.task_definition (id) ON DELETE CASCADE,
    -- 1 skipped (catch-up policy), 2 expired (older than the window), 3 skipped (task disabled),
    -- 4 registered, 5 spec or zone changed.
    kind            smallint    NOT NULL,
    first_instant   timestamptz,
    last_instant    timestamptz,
    instants        bigint      NOT NULL DEFAULT 0,
    detail          text,
    host_name       text        NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- "Last N schedule events of a task".
CREATE INDEX schedule_event_task_idx ON taskling.schedule_event (task_id, id DESC);

-- Raised inside a claim transaction whose compare-and-set on the cursor failed: another host
-- decided first. Not a serialization failure: retrying the same claim cannot succeed.
CREATE FUNCTION taskling.schedule_cursor_moved(task bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'TLC01', MESSAGE = 'taskling: schedule cursor of task ' || task || ' moved';
END
$$;
