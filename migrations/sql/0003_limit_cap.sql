-- A concurrency limit is at most 10000: every acquire rewrites the task's token list (about 50
-- bytes a slot) under the task row's lock. Limits above the cap, set before it existed, are
-- clamped to it first; -1 means unlimited.

UPDATE taskling.task_definition SET concurrency_limit = 10000 WHERE concurrency_limit > 10000;
UPDATE taskling.task_definition SET declared_limit = 10000 WHERE declared_limit > 10000;

ALTER TABLE taskling.task_definition
    ADD CONSTRAINT task_definition_concurrency_limit_check
        CHECK (concurrency_limit IS NULL OR concurrency_limit = -1 OR concurrency_limit BETWEEN 1 AND 10000),
    ADD CONSTRAINT task_definition_declared_limit_check
        CHECK (declared_limit IS NULL OR declared_limit = -1 OR declared_limit BETWEEN 1 AND 10000);
