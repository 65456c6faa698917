-- Idempotent references of failed executions (issue 22). Until this release, an execution marked
-- failed with RecordError(…, true) and then completed was released as a success: its end was
-- recorded as completed and its reference claim marked succeeded, so the reference was refused
-- for good although the execution failed (its status read failed). A release now ends such an
-- execution failed. This frees the claims marked succeeded that way whose execution row still
-- says so; no grant rule changes.
UPDATE taskling.reference_claim c SET succeeded = false
FROM taskling.task_execution e
WHERE e.id = c.execution_id AND c.succeeded AND e.failed;
