// Package execution is taskling's grant protocol: the token transactions that grant and return
// a task's slots, the sessions and heartbeats that keep holders alive, direct handoffs, epochs,
// and the LISTEN/NOTIFY wake-ups of waiting requesters. Each feature's other storage (blocks,
// submissions, schedules, history, operator changes) is in internal/store, on this package's
// pool.
//
// It is not a stable API: it exists for package taskling, which wraps it in a small public
// surface, and its names change whenever taskling's needs do. Programs use taskling.
//
// Every token transaction on a task is keyed by the task row's primary key and begins by locking
// that row (FOR NO KEY UPDATE, after the task's stripe lock), so that all of them are strictly
// serialized and two requesters never deadlock upgrading shared locks. It has three parts: round
// trip 1 reads the task's state under the lock (liveness judged on the database clock,
// clock_timestamp(), read while the lock is held); a pure function decides every grant, denial,
// reclaim and completion from that state; round trip 2 writes the plan and commits. BEGIN
// travels in the first batch and COMMIT in the second, and each statement is queued together
// with the code that reads its result. A process that knows a task's row may instead decide on it
// and write it in one round trip, conditioned on the row being unchanged (the fast path).
package execution
