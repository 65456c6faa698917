-- What a task's hosts last declared beyond its limit (which the task row keeps): whether it is
-- enabled, and its liveness settings (execution/declaration.go). A host records its declaration
-- outside the token transactions when it changes, like its keep settings (taskling.retention),
-- so acquisitions never write it. Operators' tools read it: an override of the liveness settings
-- is checked against it, and a task shows where its enabled state comes from and whether its
-- overrides over it are valid.
CREATE TABLE taskling.task_declaration (
    task_id                     bigint      PRIMARY KEY REFERENCES taskling.task_definition (id) ON DELETE CASCADE,
    enabled                     boolean     NOT NULL,
    death_mode                  smallint    NOT NULL CHECK (death_mode IN (1, 2)),
    keep_alive_interval         interval    NOT NULL,
    keep_alive_death_threshold  interval    NOT NULL,
    -- interval '0' when none is declared (KeepAlive mode).
    override_threshold          interval    NOT NULL,
    declared_by                 text        NOT NULL,
    declared_at                 timestamptz NOT NULL DEFAULT clock_timestamp()
);
