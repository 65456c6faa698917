// Package taskling runs batch jobs across many hosts under strict, runtime-tunable concurrency
// limits, coordinated through PostgreSQL: flock for a whole fleet, with execution history,
// progress and operator overrides.
//
// A task is identified by (application, task). Each has a number of slots, its concurrency limit
// (1 by default: a singleton). StartExecution takes a slot or is denied; the Execution returned
// holds it until Complete. A holder that dies (kill -9, a lost host) is judged dead on the
// database clock after its death threshold, and its slot goes to the next requester.
//
// Guarantees:
//   - At most N executions whose contexts are not cancelled hold a task's slots at any instant,
//     N being the limit in force. A lowered limit never evicts a live holder; it grants nothing
//     until fewer than N hold slots.
//   - Execution.Context is cancelled (cause ErrLeaseLost) before any other host may judge the
//     execution dead, provided the host's monotonic clock runs at the database clock's rate
//     within the safety margin (25% of the threshold by default).
//   - FencingToken is strictly increasing per task, for downstream stores to reject stale writers.
//   - Every start, granted or denied, is recorded with its host, reference value, header, events
//     and progress.
//
// Schedule registers a cron task and RunScheduler (on every host, no leader) runs each scheduled
// instant exactly once across the fleet, with a documented catch-up policy after an outage
// (CatchUpRunLatest, CatchUpRunAll, CatchUpSkip) decided on the database clock.
//
// Operators and tools read the same state through the client: Tasks, Task (slots and holders),
// Executions (a page of history) and Execution (one run with its events). Hooks (AddHooks) report
// grants, denials, reclaims, lease losses and heartbeat failures as they happen; package
// taskling/tasklingprom turns them into Prometheus metrics.
//
// Example:
//
//	if err := migrations.Up(ctx, pool); err != nil { … }
//	client, err := taskling.NewClient(pool, nil)
//	…
//	err = client.Run(ctx, "billing", "export", func(ctx context.Context, exec *taskling.Execution) error {
//		return export(ctx, exec.FencingToken())
//	}, nil)
//	if errors.Is(err, taskling.ErrLimitReached) {
//		// another host is exporting
//	}
package taskling
