// Package tasklingotel traces a taskling Client's runs with OpenTelemetry and exports its metrics
// as OpenTelemetry instruments. It lives apart from package taskling, which links nothing of
// OpenTelemetry: it is built on the client's hooks (taskling.Hooks).
//
//	client, err := taskling.NewClient(pool, nil)
//	…
//	if _, err := tasklingotel.New(client, nil); err != nil { // the global TracerProvider and MeterProvider
//		return err
//	}
//
// # Spans
//
// Every start — StartExecution, Run, an attempt of Work, a scheduler's or Backfill's run of a cron
// instant — is a span named taskling.start, from the request to the end of the run (Complete, or
// the end of the function), a child of the span in the start's context. Its children:
//
//	taskling.wait                      queued in the task's queue → granted (absent when granted at once)
//	taskling.run                       granted → end; the parent of the spans the function makes
//	  taskling.block                   one per block attempt: Start → Complete or Fail
//	  taskling.critical_section.wait   Execution.CriticalSection's wait for the section
//
// A start refused a slot (without WaitForSlot), or whose wait ended with its context, has no run.
// A scheduler's claim that another host won, or that it skipped, has no span.
//
// Attributes (AttrApplication, …): taskling.application, taskling.task, taskling.start.kind
// (start, attempt, scheduled, backfill), taskling.execution.id, taskling.fencing_token,
// taskling.attempt and taskling.submission.id (attempts), taskling.scheduled_for (cron runs, RFC
// 3339), taskling.queue.position (on taskling.wait), taskling.outcome (completed, failed,
// panicked, lease_lost, denied, error), taskling.deny_reason (limit, key_limit, rate, key_rate,
// disabled, duplicate, retired), and taskling.key and taskling.cost on keyed and weighted starts
// (a start with a key, or a cost above 1). The status is
// Error for failed, panicked, lease_lost and error, with the error recorded as an event (a
// panic's stack as exception.stacktrace).
//
// # Across the queue
//
// Submit and SubmitTx store the W3C trace context of their context (traceparent, tracestate)
// with the submission, unless SubmitOptions.TraceContext gives one. Each attempt's taskling.start
// span, on whichever host runs it, is the root of a trace of its own with a link to the span that
// submitted it; with Options.AttemptsAsChildren it is that span's child instead, in the
// submitter's trace.
//
// # Metrics
//
// The instruments are listed in docs/metrics.md: the counters and histograms of what this
// process did (grants, denials by reason, reclaims, lease losses, heartbeat failures, cleanup
// rows, acquire time, wait time — ticket queued → grant and submission created → attempt start,
// both on the database clock — and run time by outcome), and gauges read from the database
// at each collection (slots in use and limit, waiting, oldest wait, submissions by status).
// Options.MessagingConventions adds messaging.process.duration and
// messaging.client.consumed.messages (OpenTelemetry's messaging conventions) and messaging.*
// attributes on attempts' spans; the taskling.* names stay.
package tasklingotel
