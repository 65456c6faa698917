package pgbouncer

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// ForTest starts a transaction-pooling pgbouncer in front of the server of serverURL and stops
// it when the test ends. Without a pgbouncer binary the test is skipped, except under CI (CI set,
// as .ci/run installs it), where it fails.
func ForTest(tb testing.TB, serverURL string) *Bouncer {
	tb.Helper()
	if _, err := Find(); errors.Is(err, ErrNotInstalled) {
		if os.Getenv("CI") != "" {
			tb.Fatalf("%v (CI is set: .ci/run installs it)", err)
		}
		tb.Skipf("%v; skipped outside CI", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := Start(ctx, serverURL, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("pgbouncer log:\n%s", b.Log())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return b
}

// MustURL is b.URL(dbURL), failing the test on an error.
func (b *Bouncer) MustURL(tb testing.TB, dbURL string) string {
	tb.Helper()
	u, err := b.URL(dbURL)
	if err != nil {
		tb.Fatal(err)
	}
	return u
}
