// Package execution is taskling's storage layer: all of its SQL. It runs the token transactions
// that grant and return a task's slots, heartbeats, events and progress, history queries,
// operator overrides, schedules, and the LISTEN/NOTIFY wake-ups of waiting requesters.
//
// It is not a stable API: it exists for package taskling, which wraps it in a small public
// surface, and its names change whenever taskling's needs do. Programs use taskling.
//
// Every token transaction on a task is keyed by the task row's primary key and starts by writing
// that row (write-read-write), so that all of them are strictly serialized by its row lock and
// two requesters never deadlock upgrading shared locks. It has three parts: round trip 1 reads
// the task's state under the lock (liveness judged on the database clock, clock_timestamp(), read
// while the lock is held); a pure function decides every grant, denial, reclaim and completion
// from that state; round trip 2 writes the plan and commits. BEGIN travels in the first batch and
// COMMIT in the second, and each statement is queued together with the code that reads its
// result.
package execution
