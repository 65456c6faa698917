package execution

// Compatibility with grant protocol 1 (releases 0.1.x): executions granted before migration 0005
// have no liveness terms in their task row and are judged by their own heartbeat column. Delete
// this file, and the legacy paths that use it (tokentx.go: legacy, legacyReclaims), once no
// supported database can hold such a holder: every release since 0.2 refuses to grant on a
// schema older than 0005, so a database migrated past it and idle for one death threshold has
// none left.

// legacySQL judges grantees that have no liveness terms (grants of protocol 1, or holders whose
// row was deleted: those are missing here, so dead); $2 is the KeepAlive death mode.
const legacySQL = `
SELECT e.id, (CASE e.death_mode
    WHEN $2::smallint THEN clock_timestamp() - e.last_keep_alive <= e.keep_alive_death_threshold
    ELSE clock_timestamp() - e.started_at <= e.override_threshold END), (extract(epoch FROM (CASE e.death_mode
    WHEN $2::smallint THEN e.last_keep_alive + e.keep_alive_death_threshold
    ELSE e.started_at + e.override_threshold END) - clock_timestamp()) * 1000000)::bigint
FROM taskling.task_execution e
WHERE e.id = ANY($1) AND e.completed_at IS NULL AND e.reclaimed_at IS NULL AND e.token_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM taskling.execution_end x WHERE x.execution_id = e.id)`

// legacyReclaimSQL reclaims holders of protocol 1, rechecked under their own row lock ($2: the
// KeepAlive death mode; $3: the reclaimed outcome).
const legacyReclaimSQL = `
WITH r AS (
    UPDATE taskling.task_execution e SET reclaimed_at = clock_timestamp()
    WHERE e.id = ANY($1) AND e.completed_at IS NULL AND e.reclaimed_at IS NULL
    RETURNING e.id, e.last_keep_alive, (CASE e.death_mode
    WHEN $2::smallint THEN clock_timestamp() - e.last_keep_alive <= e.keep_alive_death_threshold
    ELSE clock_timestamp() - e.started_at <= e.override_threshold END) AS alive
)
INSERT INTO taskling.execution_end (execution_id, outcome, last_heartbeat)
SELECT id, $3::smallint, last_keep_alive FROM r
WHERE NOT alive OR taskling.serialization_conflict('execution ' || id || ' renewed its lease while being reclaimed')
ON CONFLICT (execution_id) DO NOTHING`
