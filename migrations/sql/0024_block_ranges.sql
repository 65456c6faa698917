-- Numeric and date blocks cut by the database (issue 25, part B; docs/blocks.md, docs/upgrading.md).
--
-- A request that continues from the task's last block (ContinueFromLast) reads where that block
-- ends under the task's block lock, so that two executions never create overlapping ranges. The
-- client used to read it in one round trip and insert the new blocks in the next, holding the lock
-- in between: the task's other executions waited for a round trip and the client's own scheduling
-- on every take. Now one statement reads the end and inserts the ranges these functions cut (the
-- same cut the client made before), sent with the lock and the COMMIT in one round trip, so the
-- lock is held only while the server inserts and commits. And no index held the end: the read
-- scanned every block the task kept (about 5 ms at 20 000 blocks, under the lock); the partial
-- indexes below answer it in one descent. Grant protocol unchanged.
--
-- The indexes are built without CONCURRENTLY (a migration runs in a transaction): writes to
-- taskling.block wait while they are built, about a second per million blocks.

CREATE INDEX block_numeric_end_idx ON taskling.block (task_id, to_number) WHERE kind = 1;
CREATE INDEX block_date_end_idx ON taskling.block (task_id, to_date) WHERE kind = 2;

-- The numeric blocks of [from_n, to_n] after last (NULL: none; a last before from_n does not move
-- the start), of at most max_size numbers each, at most room of them (negative: no cap), in order.
-- Computed in numeric, so that no end overflows bigint.
CREATE FUNCTION taskling.numeric_block_ranges(last bigint, from_n bigint, to_n bigint, max_size bigint, room integer)
RETURNS TABLE (from_number bigint, to_number bigint)
LANGUAGE sql IMMUTABLE AS $$
    SELECT (s.start + i * max_size)::bigint, least(to_n::numeric, s.start + (i + 1) * max_size - 1)::bigint
    FROM (SELECT CASE WHEN last >= from_n THEN last::numeric + 1 ELSE from_n::numeric END AS start) s,
        generate_series(0::numeric, CASE WHEN s.start > to_n THEN -1
            ELSE least(CASE WHEN room < 0 THEN 2147483647 ELSE room END - 1, floor((to_n - s.start) / max_size)) END) AS i
    ORDER BY i
$$;

-- The date blocks of [from_d, to_d) after last (NULL: none; a last before from_d does not move the
-- start), of at most span each, at most room of them (negative: no cap), in order. Each end is the
-- previous one plus span (a timestamp plus microseconds: exact), the last one cut at to_d.
CREATE FUNCTION taskling.date_block_ranges(last timestamptz, from_d timestamptz, to_d timestamptz, span interval, room integer)
RETURNS TABLE (from_date timestamptz, to_date timestamptz)
LANGUAGE sql STABLE AS $$
    WITH RECURSIVE r (i, f, t) AS (
        SELECT 1, s.start, CASE WHEN to_d - s.start <= span THEN to_d ELSE s.start + span END
        FROM (SELECT CASE WHEN last > from_d THEN last ELSE from_d END AS start) s
        WHERE s.start < to_d AND room <> 0
        UNION ALL
        SELECT r.i + 1, r.t, CASE WHEN to_d - r.t <= span THEN to_d ELSE r.t + span END
        FROM r WHERE r.t < to_d AND (room < 0 OR r.i < room)
    )
    SELECT f, t FROM r ORDER BY i
$$;
