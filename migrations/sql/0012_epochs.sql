-- Grant protocol 3: slots stay within their limit through a database failover, even one that
-- loses commits (asynchronous replication, or a point-in-time restore).
--
-- A promoted standby or a restored backup runs on a new timeline. It may not know grants the old
-- primary made (their holders may still run) and may hand out fences the old primary already
-- handed out. So the first token transaction that sees a timeline it has no row for here records
-- it (since = that moment); then, on that timeline, each task grants nothing until one death
-- threshold after `since` — by then every holder of a lost grant has cancelled itself, its
-- heartbeats having failed since the old primary died — and its fences jump to fence_base
-- (timeline << 40) before counting on, above anything an older timeline handed out.
--
-- The timeline this migration runs on is the one the data was written on: no hold, no jump.

CREATE FUNCTION taskling.timeline() RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer
$$;

CREATE TABLE taskling.epoch (
    timeline    integer     PRIMARY KEY,
    since       timestamptz NOT NULL,
    fence_base  bigint      NOT NULL
);

INSERT INTO taskling.epoch (timeline, since, fence_base) VALUES (taskling.timeline(), '-infinity', 0);

UPDATE taskling.protocol SET version = 3, changed_at = clock_timestamp();
