// Package dashboard serves taskling's operator surface over HTTP, for mounting in your own
// server: the web dashboard at "/", the JSON API under "/api/v1/" and Prometheus metrics at
// "/metrics". `taskling serve` serves the same handler.
//
// It is a separate package, not a function of package taskling, so that programs that only run
// tasks never link the templates and static files; the implementation lives in an internal
// package, so that its routes and templates can change without breaking this small surface.
//
//	h, err := dashboard.NewHandler(client, &dashboard.Options{Token: os.Getenv("TASKLING_API_TOKEN")})
//	if err != nil { … }
//	mux.Handle("/taskling/", http.StripPrefix("/taskling", h)) // the dashboard links are relative
//
// Routes:
//
//	GET    /api/v1/tasks                                 every task: limit in force and its source, slot usage, last execution
//	GET    /api/v1/tasks/{app}/{task}                    one task with its slots and their holders
//	GET    /api/v1/tasks/{app}/{task}/executions         its executions, newest first (?status=&limit=&before=)
//	GET    /api/v1/executions/{id}                       one execution with its events and progress
//	PATCH  /api/v1/tasks/{app}/{task}/overrides          set operator overrides (token required)
//	DELETE /api/v1/tasks/{app}/{task}/overrides          clear them (token required)
//	GET    /metrics                                      the client's Prometheus metrics
//	GET    /, /tasks/{app}/{task}                        the dashboard
//
// Mutations need "Authorization: Bearer <Options.Token>"; without a token the handler is
// read-only (403 on mutations). Options.ProtectReads puts reads behind the token too. Errors are
// JSON objects {"error": {"status", "field", "message"}} naming the field at fault; a 500 shows no
// details (they go to Options.Logger).
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
	// Token enables the mutations, which then need "Authorization: Bearer <Token>". "" means
	// read-only: every mutation gets 403. `taskling serve` reads it from TASKLING_API_TOKEN.
	Token string
	// ProtectReads requires the token on reads too (API, dashboard, /metrics). The dashboard's
	// pages then also accept it from the taskling_token cookie its token field sets; mutations
	// accept only the header, so a cross-site form cannot forge them.
	ProtectReads bool
	// Logger receives the errors behind 500 responses. nil: no logging.
	Logger *zap.Logger
	// RefreshInterval of the dashboard's auto-refresh. Default 2s.
	RefreshInterval time.Duration
}

// NewHandler returns the handler serving client's tasks. It fails only on invalid Options
// (ProtectReads without a Token) or a nil client.
func NewHandler(client *taskling.Client, opts *Options) (http.Handler, error) {
	if opts == nil {
		opts = &Options{}
	}
	return httpapi.New(client, &httpapi.Options{
		Token: opts.Token, ProtectReads: opts.ProtectReads, Logger: opts.Logger, RefreshInterval: opts.RefreshInterval,
	})
}
