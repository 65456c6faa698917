package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/taskling-go/taskling/internal/devtools/testutil"
)

// TestWorkersGetTheDatabaseInTheirEnvironment is issue 40: the worker processes got the database
// URL, password and all, on their command lines, which anyone on the machine can read (ps). It
// goes in their environment.
func TestWorkersGetTheDatabaseInTheirEnvironment(t *testing.T) {
	t.Parallel()
	const dbURL = "postgres://postgres:s3cret@127.0.0.1:5432/taskling_demo_1?sslmode=disable"
	cmd := workerCommand(context.Background(), "/bin/worker", dbURL, "w1")
	testutil.RequireNoDatabaseURL(t, dbURL, []string{strings.Join(cmd.Args, " ")})
	if got := cmd.Env[len(cmd.Env)-1]; got != "TASKLING_DATABASE_URL="+dbURL { // the last value of a name wins
		t.Errorf("the worker's environment ends with %q; want its database", got)
	}
}

// TestChartFitsTheRunAndMarksTheRaiseApart is issue 40: the chart was 12 s wide whatever the
// run's length (a 6 s run left its right half empty), and '|' marked both its borders and the
// raise of the limit.
func TestChartFitsTheRunAndMarksTheRaiseApart(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	spans := []span{ // out of order: the chart sorts them by start
		{id: 3, fence: 3, host: "w3", start: at(3.6), end: at(6)},
		{id: 1, fence: 1, host: "w1", start: at(0), end: at(1.5)},
		{id: 2, fence: 2, host: "w2", start: at(0.1), end: at(3.2)},
	}
	lines := chart(spans, at(3.5), 60)
	want := []string{
		"Who held a slot when (seconds on the database clock; a column is 0.10s, '#' holding):",
		"  w1  exec 1   fence 1    0.00– 1.50 |################                   :                        |",
		"  w2  exec 2   fence 2    0.10– 3.20 | ################################  :                        |",
		"  w3  exec 3   fence 3    3.60– 6.00 |                                   :########################|",
		"  (':' marks the raise of the limit, at 3.50s)",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("chart:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}

	// A run of 24 s fits the same 60 columns, and a raise outside the run is not drawn.
	long := chart([]span{{id: 1, host: "w1", start: at(0), end: at(24)}}, at(30), 60)
	if len(long) != 2 || !strings.HasSuffix(long[1], "|"+strings.Repeat("#", 60)+"|") || !strings.Contains(long[0], "0.40s") {
		t.Fatalf("a 24 s run:\n%s", strings.Join(long, "\n"))
	}
}
