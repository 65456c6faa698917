-- Waiters for a slot queue in their task's row (execution/queue.go), so that slots go to the
-- oldest waiter across all hosts, and a token transaction still reads nothing unrelated tasks
-- write.
ALTER TABLE taskling.task_definition ADD COLUMN queue text NOT NULL DEFAULT '';
