// Package dashboard serves taskling's operator surface over HTTP, for mounting in your own
// server: the web dashboard at "/", the JSON API under "/api/v1/" and Prometheus metrics at
// "/metrics". `taskling serve` serves the same handler.
//
// It is a separate package, not a function of package taskling, so that programs that only run
// tasks never link the templates and static files; the implementation lives in an internal
// package, so that its routes and templates can change without breaking this small surface.
//
//	h, err := dashboard.NewHandler(client, &dashboard.Options{Token: os.Getenv("TASKLING_API_TOKEN"), BasePath: "/taskling/"})
//	if err != nil { … }
//	mux.Handle("/taskling/", http.StripPrefix("/taskling", h)) // the dashboard links are relative
//
// Routes:
//
//	GET    /api/v1/tasks                                 the tasks: limit in force and its source, slot usage, last execution
//	GET    /api/v1/tasks/{app}/{task}                    one task with its slots and their holders
//	GET    /api/v1/tasks/{app}/{task}/executions         its executions, newest first (?status=&limit=&before=)
//	GET    /api/v1/executions/{id}                       one execution with its events and progress
//	PATCH  /api/v1/tasks/{app}/{task}/overrides          set operator overrides (token required)
//	DELETE /api/v1/tasks/{app}/{task}/overrides          clear them (token required)
//	POST   /api/v1/tasks/{app}/{task}/retire             retire the task, or its schedule only (token required)
//	POST   /api/v1/tasks/{app}/{task}/unretire           unretire it (token required)
//	GET    /api/v1/tasks/{app}/{task}/changes            its operator changes, newest first (?limit=&before=)
//	POST   /api/v1/tasks/{app}/{task}/submissions        submit a run: 201 {"id"} (token required)
//	GET    /api/v1/tasks/{app}/{task}/submissions        its submissions (?status=&limit=&before=)
//	GET    /api/v1/submissions/{id}                      one submission: status, position, attempts, progress
//	POST   /api/v1/submissions/{id}/cancel               cancel it: 409 once finished (token required)
//	GET    /api/v1/executions/{id}/blocks                the blocks an execution attempted
//	GET    /api/v1/tasks/{app}/{task}/blocks             its blocks (?at_retry_limit=true&limit=)
//	GET    /api/v1/blocks/{id}                           one block with its attempts
//	POST   /api/v1/blocks/{id}/force                     force it to run again (token required)
//	GET    /metrics                                      the client's Prometheus metrics
//	GET    /, /tasks/{app}/{task}, /submissions/{id},    the dashboard
//	       /executions/{id}, /blocks/{id}
//	GET    /login, POST /login, POST /logout             the dashboard's sign-in
//
// Access. Without Options.Token the handler is read-only: every read is public and every change
// gets 403. With a token (at least 32 bytes):
//   - reads — the API, the pages and /metrics — need it, unless Options.PublicReads (or, for
//     /metrics alone, Options.PublicMetrics) opens them;
//   - scripts and Prometheus send "Authorization: Bearer <token>";
//   - a browser signs in once (the dashboard shows the form) and keeps a session cookie that is
//     HttpOnly, SameSite=Strict, scoped to Options.BasePath and Secure behind TLS; its value is
//     derived from the token, never the token itself. A change made with that cookie must also
//     carry the X-Taskling-Request header, which the dashboard's own script sends and a
//     cross-site form cannot.
//
// A change with a body needs Content-Type: application/json; a body with anything after its
// JSON object is refused. A submission's body, {"header", "reference_value", "priority",
// "max_attempts"}, is optional, as is a cancel's {"reason"}; a duplicate reference_value answers
// 201 with the first submission's id. Errors are JSON objects {"error": {"status", "field", "message"}} naming the field at
// fault; a 500 shows no details (they go to Options.Logger). Each request's database work is
// bounded by Options.RequestTimeout.
//
// Every change is recorded in its task's changes as made by "api@ADDRESS" (the bearer token) or
// "dashboard@ADDRESS" (a browser's session), ADDRESS being the client's; a body's optional "by"
// (a retire's, an override's) or "forced_by" names someone before it: "alice (api@10.0.0.5)".
package dashboard

import (
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// Options configure the handler. A nil *Options, or the zero value, serves everything read-only
// and without auth.
type Options struct {
	// Token enables changes and protects reads (see the package doc). "" means read-only. It must
	// be at least 32 bytes. `taskling serve` reads it from TASKLING_API_TOKEN.
	Token string
	// PublicReads serves reads (the API, the pages, /metrics) without the token; changes still
	// need it.
	PublicReads bool
	// PublicMetrics serves /metrics without the token while other reads stay protected.
	PublicMetrics bool
	// BasePath is the path the handler is mounted at, like "/taskling/" (default "/"): the
	// session cookie is scoped to it, and sign-in redirects stay under it.
	BasePath string
	// Logger receives the errors behind 500 responses. nil: no logging.
	Logger *zap.Logger
	// RefreshInterval of the dashboard's auto-refresh. Default 2s.
	RefreshInterval time.Duration
	// RequestTimeout bounds the database work of each request (503 when it passes). Default 10s.
	RequestTimeout time.Duration
	// ProtectReads is ignored.
	//
	// Deprecated: reads are protected whenever Token is set; PublicReads opens them.
	ProtectReads bool
}

// MinTokenLength is the shortest Options.Token accepted.
const MinTokenLength = httpapi.MinTokenLength

// NewHandler returns the handler serving client's tasks. It fails only on invalid Options (a
// token shorter than MinTokenLength, a malformed BasePath) or a nil client.
func NewHandler(client *taskling.Client, opts *Options) (http.Handler, error) {
	if opts == nil {
		opts = &Options{}
	}
	return httpapi.New(client, &httpapi.Options{
		Token: opts.Token, PublicReads: opts.PublicReads, PublicMetrics: opts.PublicMetrics, BasePath: opts.BasePath,
		Logger: opts.Logger, RefreshInterval: opts.RefreshInterval, RequestTimeout: opts.RequestTimeout,
	})
}
