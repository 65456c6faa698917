-- Hosts may declare different limits for one task for a while (each reads its own settings, and
-- files are not reloaded at once): the limit in force at a grant is the requester's. A host that
-- replaces another host's different declaration records it here (at most every few seconds per
-- task), so that operators see the disagreement: the tasks list, the dashboard, a metric. It is a
-- table of its own, written outside the token transactions: acquisitions never wait for it.
CREATE TABLE taskling.declaration_dispute (
    task_id        bigint      PRIMARY KEY REFERENCES taskling.task_definition (id) ON DELETE CASCADE,
    other_limit    integer     NOT NULL,
    other_host     text        NOT NULL,
    declared_limit integer     NOT NULL,
    declared_by    text        NOT NULL,
    at             timestamptz NOT NULL DEFAULT clock_timestamp()
);
