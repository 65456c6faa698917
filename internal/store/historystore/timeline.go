package historystore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype/zeronull"

	"github.com/taskling-go/taskling/tasklingtype"
)

// The task page's slot timeline and per-minute chart (the dashboard). Both read one window of a
// task's executions, [now - window, now] on the database clock, through
// task_execution_task_started_idx (task_id, started_at DESC, id DESC): the executions started in
// the window; the holders still in the task row (started earlier, maybe still running); and a
// bounded number of the executions started just before the window (those that ended or were
// reclaimed in it).

// Both look at the 2000 granted executions started last before the window: those of them that
// ended (or were reclaimed) inside it are drawn and counted. Denied starts (blocked) never held a
// slot and are skipped, so a flood of denials does not hide a long run.

// timelineBarsSQL reads the executions of task $1 that held a slot in the window from $2 to $4,
// the newest $3 first: among the newest $3 started in the window, the 2000 started before it
// (those that ended or were reclaimed in it), and the holders still in the task
// row.
const timelineBarsSQL = `
WITH c AS (
    (SELECT e.id FROM taskling.task_execution e
     WHERE e.task_id = $1 AND e.started_at >= $2 AND NOT e.blocked
     ORDER BY e.started_at DESC, e.id DESC LIMIT $3)
    UNION
    (SELECT e.id FROM taskling.task_execution e
     WHERE e.task_id = $1 AND e.started_at < $2 AND NOT e.blocked
     ORDER BY e.started_at DESC, e.id DESC LIMIT 2000)
    UNION
    SELECT substring(h FROM '^E:([0-9]+),')::bigint
    FROM taskling.task_definition d, unnest(string_to_array(d.holders, '|')) AS h
    WHERE d.id = $1 AND h <> ''
)
SELECT e.id, e.host_name, e.started_at, taskling.execution_slot_end(e, x, s.last_heartbeat) AS ended_at,
    taskling.execution_status(e, x, s.last_heartbeat) AS status, taskling.execution_reclaimed_at(e, x) AS reclaimed_at, e.fence,
    e.key, e.cost
FROM c
JOIN taskling.task_execution e ON e.id = c.id
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
LEFT JOIN taskling.session s ON s.id = e.session_id
WHERE e.task_id = $1 AND NOT e.blocked AND e.started_at <= $4
  AND coalesce(taskling.execution_slot_end(e, x, s.last_heartbeat), 'infinity') >= $2
ORDER BY e.started_at DESC, e.id DESC
LIMIT $3`

// timelineMinutesSQL counts, per minute since the Unix epoch (UTC), the grants (executions not
// blocked started in it), the denials (blocked executions started in it) and the reclaims
// (executions reclaimed in it) of task $1 since $2 (among the 2000 started before $2 too).
const timelineMinutesSQL = `
WITH c AS (
    (SELECT e.id FROM taskling.task_execution e
     WHERE e.task_id = $1 AND e.started_at < $2 AND NOT e.blocked
     ORDER BY e.started_at DESC, e.id DESC LIMIT 2000)
), starts AS (
    SELECT floor(extract(epoch FROM e.started_at) / 60)::bigint AS minute,
           count(*) FILTER (WHERE NOT e.blocked) AS grants, count(*) FILTER (WHERE e.blocked) AS denials,
           0::bigint AS reclaims
    FROM taskling.task_execution e
    WHERE e.task_id = $1 AND e.started_at >= $2
    GROUP BY 1
), reclaims AS (
    SELECT floor(extract(epoch FROM r.at) / 60)::bigint AS minute, 0::bigint, 0::bigint, count(*)
    FROM (
        SELECT taskling.execution_reclaimed_at(e, x) AS at
        FROM taskling.task_execution e LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
        WHERE e.task_id = $1 AND (e.started_at >= $2 OR e.id IN (SELECT id FROM c))
    ) r
    WHERE r.at >= $2
    GROUP BY 1
)
SELECT * FROM starts UNION ALL SELECT * FROM reclaims`

// Timeline returns the slot use of task taskID over the last window, with at most maxBars bars.
func (s *Store) Timeline(ctx context.Context, taskID int64, window time.Duration, maxBars int) (tasklingtype.TaskTimeline, error) {
	var out tasklingtype.TaskTimeline
	err := pgx.BeginTxFunc(ctx, s.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT now(), now() - $1::interval`, window).Scan(&out.Now, &out.From); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, timelineBarsSQL, taskID, out.From, maxBars+1, out.Now)
		if err != nil {
			return err
		}
		out.Bars, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (tasklingtype.TimelineBar, error) {
			var b tasklingtype.TimelineBar // NULL reads as zero: still running, never reclaimed, denied
			err := row.Scan(&b.ExecutionID, &b.Host, &b.StartedAt, (*zeronull.Timestamptz)(&b.EndedAt), &b.Status,
				(*zeronull.Timestamptz)(&b.ReclaimedAt), (*zeronull.Int8)(&b.FencingToken), &b.Key, &b.Cost)
			return b, err
		})
		if err != nil {
			return err
		}
		if len(out.Bars) > maxBars {
			out.Bars, out.Truncated = out.Bars[:maxBars], true
		}
		rows, err = tx.Query(ctx, timelineMinutesSQL, taskID, out.From)
		if err != nil {
			return err
		}
		out.Minutes, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (tasklingtype.TimelineMinute, error) {
			var m tasklingtype.TimelineMinute
			var minute int64
			err := row.Scan(&minute, &m.Grants, &m.Denials, &m.Reclaims)
			m.Minute = time.Unix(minute*60, 0).UTC()
			return m, err
		})
		return err
	})
	if err != nil {
		return tasklingtype.TaskTimeline{}, fmt.Errorf("timeline of task %d: %w", taskID, err)
	}
	return out, nil
}
