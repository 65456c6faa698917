-- Migration 0020: trace context and submission counts. No grant rule changes.
--
-- The caller's trace context (W3C Trace Context: the traceparent and tracestate headers), stored
-- with a submission by Submit and SubmitTx when one is given (package tasklingotel reads it from
-- the caller's context), so that each attempt's span, on whichever host runs it, links to the span
-- that submitted it. NULL: none. Nullable columns without a default: adding them rewrites
-- nothing, and binaries of an older release, which name the columns they insert, keep working.
ALTER TABLE taskling.submission ADD COLUMN traceparent text, ADD COLUMN tracestate text;

-- The metrics' count of submissions by task and status reads this index alone (an index-only
-- scan) instead of the table. Building it blocks writes to the table while it runs: about a
-- second per million submissions.
CREATE INDEX submission_status_idx ON taskling.submission (task_id, status);
