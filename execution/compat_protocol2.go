package execution

// Compatibility with a schema older than epochs (grant protocol 2, before migration 0012): a
// binary of this release serves such a database during a rolling upgrade, until it is migrated.
// Delete this file, and the epoch feature check that picks it (epoch.go), once the oldest schema
// supported is 0012.

// legacyClockSQL is clockSQL on a schema older than epochs: a known epoch with no hold and no
// fence base.
const legacyClockSQL = `SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, 0, true, 0::bigint, 0::bigint`

// legacyCASTasksSQL is casTasksSQL on a schema older than epochs ($11 unused).
const legacyCASTasksSQL = `
UPDATE taskling.task_definition d SET
    tokens = u.tokens,
    queue = u.queue,
    holders = replace(u.holders, 'A:@', 'A:' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint),
    fence = u.fence,
    declared_at = CASE WHEN u.declared_limit IS NOT NULL
                        AND (d.declared_limit IS DISTINCT FROM u.declared_limit OR d.declared_by IS DISTINCT FROM u.declared_by)
                       THEN clock_timestamp() ELSE d.declared_at END,
    declared_limit = coalesce(u.declared_limit, d.declared_limit),
    declared_by = coalesce(u.declared_by, d.declared_by),
    waiters_until = CASE WHEN u.mark THEN greatest(d.waiters_until, clock_timestamp() + interval '60 seconds')
                         ELSE d.waiters_until END
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::integer[], $6::text[], $7::boolean[], $8::text[], $9::text[])
    AS u(id, tokens, holders, fence, declared_limit, declared_by, mark, queue, xmin)
WHERE d.id = ANY($1) AND d.id = u.id AND d.xmin = u.xmin::xid AND (SELECT version FROM taskling.protocol WHERE singleton) = $10
    AND d.id IN (SELECT l.id FROM taskling.task_definition l WHERE l.id = ANY($1) FOR UPDATE SKIP LOCKED) AND $11::integer IS NOT NULL
RETURNING d.id, d.tokens, d.holders, d.queue, d.fence,
    d.concurrency_limit, d.enabled, d.death_mode, d.keep_alive_interval, d.keep_alive_death_threshold,
    d.override_threshold, d.declared_limit, d.declared_by, coalesce(d.waiters_until > clock_timestamp(), false),
    (SELECT version FROM taskling.protocol WHERE singleton), (d.ctid::text::point)[0]::bigint, d.xmin::text`
