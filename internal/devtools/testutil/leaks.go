// Package testutil holds what every test package of the module shares: the goroutine-leak check
// its TestMain runs.
package testutil

import (
	"testing"

	"go.uber.org/goleak"
)

// VerifyNoLeaks runs the package's tests, then fails if any goroutine outlives them, except
// pgxpool's health checker (it ends shortly after Close) and the idle-connection readers of
// net/http's client and server in tests that use httptest (extra may add more).
func VerifyNoLeaks(m *testing.M, extra ...goleak.Option) {
	opts := append([]goleak.Option{
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
	}, extra...)
	goleak.VerifyTestMain(m, opts...)
}
