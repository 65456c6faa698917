// Package execution holds all of taskling's database work: the acquire and release transactions
// that grant and return a task's slots, heartbeats, events and progress, history queries,
// operator overrides and the LISTEN/NOTIFY wake-ups of waiting requesters.
//
// Every token transaction on a task is keyed by the task row's primary key and starts by writing
// that row (write-read-write), so that all of them are strictly serialized by its row lock and
// two requesters never deadlock upgrading shared locks. Liveness is always judged on the database
// clock (clock_timestamp(), read while the row lock is held). An acquire or release costs two
// round trips: the statements are batched, with BEGIN in the first batch and COMMIT in the second.
//
// Most users want package taskling, which wraps this package in a small API. This package takes
// pgx types and returns plain structs; it knows nothing of configuration sources or logging.
package execution
