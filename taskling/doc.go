// Package taskling runs batch jobs across many hosts under strict concurrency limits that can be
// changed while the fleet runs, coordinated through PostgreSQL: flock for a whole fleet, with the
// execution history, progress, cron scheduling, durable work units and operator controls that
// batch jobs need. The schema is created by package migrations; a [Client] built on a
// *pgxpool.Pool does the rest.
//
// # Concepts
//
// A task is named by an application and a task name ("billing", "export"). It has a number of
// slots, its concurrency limit ([TaskSettings].ConcurrencyLimit: 1 by default, a singleton; -1
// unlimited). Its settings come in layers: the library's defaults, [Config].Defaults, a
// [SettingsSource] asked on every start (package taskling/settingsfile reads a watched TOML
// file), and operator overrides stored in the task's row, which win on every host.
//
// An execution is one run of a task. [Client.StartExecution] takes a slot or is denied
// ([ErrLimitReached]; the denial is recorded as a blocked execution), and the [Execution] returned
// holds the slot until [Execution.Complete]. [Client.Run] does both around a function, and marks
// the execution failed if the function returns an error or panics. Every granted start, and every
// start denied by a limit, a rate or a duplicate reference (without WaitForSlot; a wait that gives
// up is recorded once), is recorded with its host, reference value, header, events and progress;
// a disabled or retired task's refusals record nothing.
//
// Each grant carries a fencing token ([Execution.FencingToken]) that strictly increases per task:
// pass it to the stores the job writes to, so they can refuse a write from a holder that lost its
// slot.
//
// Each Client is one session in the database, renewed by one heartbeat per interval for all the
// executions it holds ([TaskSettings].KeepAliveInterval, 5 s by default). A holder is dead once the
// database clock passes its last heartbeat plus the death threshold (KeepAliveDeathThreshold, 20 s
// by default; in [DeathModeOverride], its start plus OverrideThreshold), and its slot goes to the
// next requester. A holder measures its own lease and cancels [Execution.Context] (cause
// [ErrLeaseLost]) a safety margin before anyone may judge it dead: check ctx.Err() before each
// write that needs the slot.
//
// A start with [StartOptions].WaitForSlot waits instead of being denied. Waiters queue in the
// database: slots go to the oldest waiter across every host, higher [StartOptions].Priority
// first, and while anyone waits no start barges past them.
//
// A submission is a job handed to the fleet: [Client.Submit] (or [Client.SubmitTx], inside the
// caller's own transaction) stores it, and any host's [Client.Work] runs it in a slot of its task.
// A submission is never lost and a completed one never runs again; a run whose process dies runs
// again, up to its [SubmitOptions].MaxAttempts. [Client.Shutdown] drains Work and RunScheduler.
//
// Blocks split an execution's work into durable units that a later execution takes again when
// they failed or their execution died: [Execution.NumericBlocks], [Execution.DateBlocks],
// [Execution.ObjectBlocks] and [Execution.ListBlocks]. Taking a block is a compare-and-set, so a
// block is held by one live execution at a time. [Execution.CriticalSection] is the task's mutex
// across every host, served oldest first.
//
// A schedule is a cron task: [Client.Schedule] registers it and [Client.RunScheduler], on every
// host and with no leader, runs each scheduled instant exactly once across the fleet. After an
// outage what runs is decided by its [CatchUpPolicy] ([CatchUpRunLatest] by default,
// [CatchUpRunAll], [CatchUpSkip]) on the database clock; [Client.Backfill] runs missed instants
// on purpose.
//
// Operators read the same state through the client ([Client.Tasks], [Client.Task],
// [Client.Executions], [Client.Execution]) and change it as a named [Operator] through
// [Client.As]: overrides, retiring a task, cancelling a submission, forcing a block, each change
// recorded with who made it. [Client.AddHooks] reports grants, denials, reclaims, lease losses
// and heartbeat failures as they happen; package taskling/tasklingprom turns them into
// Prometheus metrics.
//
// # Guarantees
//
//   - At most N executions whose contexts are not cancelled hold a task's slots at any instant,
//     N being the limit in force, through crashes, pauses, lost connections and database
//     restarts. Lowering the limit never evicts a live holder; raising it admits waiters at once.
//   - A dead holder's slot is reclaimed once the database clock passes its last heartbeat plus
//     its death threshold; a reclaimed holder can neither renew its lease nor return a slot that
//     is no longer its own ([Execution.Complete] returns [ErrLeaseLost]).
//   - Fencing tokens strictly increase per task, across database restarts and failovers.
//   - With [StartOptions].Idempotent, one success per reference value.
//   - Operator overrides are read inside every grant: the next start on every host obeys them.
//   - Nothing silent: bad names, settings and arguments are errors that wrap [ErrInvalidArgument]
//     or [ErrInvalidSettings] and name the field.
//
// These rest on one assumption: over one death threshold, a host's monotonic clock does not run
// slower than the database server's by more than the safety margin (25% of the threshold by
// default).
//
// # Example
//
//	if err := migrations.Up(ctx, pool); err != nil { // idempotent; safe when many hosts start at once
//		return err
//	}
//	client, err := taskling.NewClient(pool, &taskling.Config{
//		Defaults: taskling.TaskSettings{ConcurrencyLimit: 2},
//	})
//	if err != nil {
//		return err
//	}
//	defer client.Close()
//	err = client.Run(ctx, "billing", "export", func(ctx context.Context, exec *taskling.Execution) error {
//		return export(ctx, exec.FencingToken()) // ctx ends if the slot may have been lost
//	}, &taskling.StartOptions{ReferenceValue: "2026-11-21.csv"})
//	if errors.Is(err, taskling.ErrLimitReached) {
//		// every slot is held, or others wait for one
//	}
//
// # Read more
//
// The repository's README.md has the quick start; its docs/ directory has the rest:
// docs/guarantees.md (each guarantee in full, and how it is tested), docs/how-it-works.md,
// docs/settings.md, docs/scheduling.md, docs/submissions.md, docs/blocks.md, docs/operating.md
// (the CLI, the HTTP API and dashboard, retention, PgBouncer, failover), docs/metrics.md,
// docs/benchmarks.md and docs/upgrading.md.
package taskling
