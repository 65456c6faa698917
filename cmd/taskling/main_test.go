package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskling-go/taskling/internal/testutil"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/internal/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// cli runs one command line in-process against url and returns its exit code and output.
func cli(t *testing.T, url string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	getenv := func(k string) string {
		switch k {
		case "TASKLING_DATABASE_URL":
			return url
		case "TASKLING_HOST_NAME":
			return "cli-host"
		}
		return ""
	}
	code = run(context.Background(), args, &out, &errOut, getenv)
	return code, out.String(), errOut.String()
}

// ok runs a command that must succeed and returns its stdout.
func ok(t *testing.T, url string, args ...string) string {
	t.Helper()
	code, out, errOut := cli(t, url, args...)
	require.Equal(t, exitOK, code, "%v: %s", args, errOut)
	return out
}

var (
	timestamps = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	ages       = regexp.MustCompile(`\b\d\.\ds\b`)
	slotIDs    = regexp.MustCompile(`(?m)^[0-9a-f]{8}  `)
	// Execution ids: a start retried after a serialization failure burns one, so they vary.
	// (Submission ids are masked alike.)
	execIDs = regexp.MustCompile(`#\d+ *|(?m)^\d+ {2,}|Execution: \d+|Submission: \d+`)
	digits  = regexp.MustCompile(`\d`)
)

// golden compares output, with its times, heartbeat ages, slot and execution ids masked (same
// widths, so the columns stay aligned), to testdata/name.golden; -update rewrites the file.
func golden(t *testing.T, name, got string) {
	t.Helper()
	got = timestamps.ReplaceAllString(got, "YYYY-MM-DDThh:mm:ssZ")
	got = ages.ReplaceAllString(got, "N.Ns")
	got = slotIDs.ReplaceAllString(got, "SLOT-ID   ")
	got = execIDs.ReplaceAllStringFunc(got, func(id string) string {
		if strings.HasPrefix(id, "#") {
			// Ids of one or two digits (a retried start burns one) print alike: in a padded
			// cell, "#N" and its padding keep the cell's width.
			pad := len(id) - len(strings.TrimRight(id, " "))
			if pad >= 2 { // a padded table cell: keep its width
				pad = len(id) - 2
			}
			return "#N" + strings.Repeat(" ", pad)
		}
		if strings.HasSuffix(id, "  ") { // an id cell at the start of a line: keep its width
			return "N" + strings.Repeat(" ", len(id)-1)
		}
		return digits.ReplaceAllString(id, "N")
	})
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./cmd/taskling -update to create it")
	require.Equal(t, string(want), got, "output differs from %s (go test ./cmd/taskling -update rewrites it)", path)
}

type fixture struct {
	url     string
	client  *taskling.Client
	running *taskling.Execution
	done    *taskling.Execution
}

// setup makes billing/export (limit 2: one running execution at 40/100, one completed, one
// denied) and billing/import (unlimited, one completed execution).
func setup(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	pool, url := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "worker-1", Settings: taskling.StaticSettings{
		"billing/export": {ConcurrencyLimit: 2},
		"billing/import": {ConcurrencyLimit: -1},
	}})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	f := &fixture{url: url, client: client}

	f.done, err = client.StartExecution(ctx, "billing", "export", &taskling.StartOptions{ReferenceValue: "2026-11-20.csv", Header: map[string]string{"bucket": "exports"}})
	require.NoError(t, err)
	require.NoError(t, f.done.Checkpoint(ctx, "uploaded"))
	require.NoError(t, f.done.SetProgress(ctx, 100, 100))
	require.NoError(t, f.done.Complete(ctx))
	f.running, err = client.StartExecution(ctx, "billing", "export", &taskling.StartOptions{ReferenceValue: "2026-11-21.csv"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.running.Complete(context.Background()) })
	require.NoError(t, f.running.SetProgress(ctx, 40, 100))
	other, err := client.StartExecution(ctx, "billing", "export", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Complete(context.Background()) })
	_, err = client.StartExecution(ctx, "billing", "export", nil)
	require.ErrorIs(t, err, taskling.ErrLimitReached)
	require.NoError(t, client.Run(ctx, "billing", "import", func(context.Context, *taskling.Execution) error { return nil }, nil))
	return f
}

func TestTablesMatchGoldenFiles(t *testing.T) {
	t.Parallel()
	f := setup(t)
	golden(t, "tasks_list", ok(t, f.url, "tasks", "list"))
	golden(t, "tasks_show", ok(t, f.url, "tasks", "show", "billing/export"))
	golden(t, "executions_list", ok(t, f.url, "executions", "list", "billing/export"))
	golden(t, "executions_list_completed", ok(t, f.url, "executions", "list", "billing/export", "--status", "completed", "--last", "5"))
	golden(t, "executions_show", ok(t, f.url, "executions", "show", itoa(f.done.ID())))
	golden(t, "tasks_set", ok(t, f.url, "tasks", "set", "billing/export", "--limit", "3", "--keep-alive-threshold", "45s"))
	golden(t, "tasks_clear", ok(t, f.url, "tasks", "clear", "billing/export"))
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestJSONOutputIsTheAPIShape(t *testing.T) {
	t.Parallel()
	f := setup(t)

	var list struct{ Tasks []httpapi.Task }
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "tasks", "list", "-o", "json")), &list))
	require.Len(t, list.Tasks, 2)
	export := list.Tasks[0]
	require.Equal(t, "export", export.Task)
	require.Equal(t, 2, export.Limit)
	require.Equal(t, "declared", export.LimitSource)
	require.Equal(t, 2, export.SlotsUsed)
	require.Equal(t, "blocked", export.LastExecution.Status)
	require.Equal(t, -1, list.Tasks[1].SlotsTotal)

	var detail httpapi.TaskDetail
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "--output", "json", "tasks", "show", "billing/export")), &detail))
	require.Len(t, detail.Slots, 2)
	for _, s := range detail.Slots {
		require.True(t, s.Holder.Alive)
		require.Equal(t, "worker-1", s.Holder.Host)
	}

	var page httpapi.ExecutionPage
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "executions", "list", "billing/export", "--last", "2", "-o", "json")), &page))
	require.Len(t, page.Executions, 2)
	require.NotNil(t, page.NextBefore)

	var x httpapi.Execution
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "executions", "show", itoa(f.running.ID()), "-o", "json")), &x))
	require.Equal(t, "in_progress", x.Status)
	require.Equal(t, int64(40), *x.ItemsDone)

	var task httpapi.TaskDetail
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "tasks", "set", "billing/export", "--disable", "-o", "json")), &task))
	require.False(t, *task.Enabled)
	_, err := f.client.StartExecution(context.Background(), "billing", "export", nil)
	require.ErrorIs(t, err, taskling.ErrTaskDisabled, "the CLI's override is obeyed by the next start")
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "tasks", "clear", "billing/export", "-o", "json")), &task))
	require.Nil(t, task.Enabled)
}

func TestMigrateUpAndStatus(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewEmptyDB(t)
	all, err := migrations.All()
	require.NoError(t, err)
	type status struct {
		Migrations []struct {
			Version int
			Applied bool
		}
	}
	code, out, errOut := cli(t, url, "migrate", "status", "-o", "json")
	require.Equal(t, exitPending, code, errOut)
	require.Contains(t, errOut, "migrations pending")
	var before status
	require.NoError(t, json.Unmarshal([]byte(out), &before))
	require.Len(t, before.Migrations, len(all))
	require.False(t, before.Migrations[0].Applied)

	ok(t, url, "migrate", "up")
	var after status
	require.NoError(t, json.Unmarshal([]byte(ok(t, url, "migrate", "status", "-o", "json")), &after))
	for _, m := range after.Migrations {
		require.True(t, m.Applied, "migration %d", m.Version)
	}
	require.Regexp(t, `(?m)^0001\s+core\s+\d{4}-`, ok(t, url, "migrate", "up"), "up is idempotent and prints the status table")
}

func TestBadArgumentsExitWithDocumentedCodes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"tasks"}, exitUsage, "needs a subcommand"},
		{[]string{"tasks", "list", "--bogus"}, exitUsage, "unknown flag: --bogus"},
		{[]string{"--output", "yaml", "tasks", "list"}, exitUsage, "--output is \"yaml\""},
		{[]string{"tasks", "show"}, exitUsage, "takes one argument, APP/TASK"},
		{[]string{"tasks", "show", "export"}, exitUsage, "want APP/TASK"},
		{[]string{"tasks", "show", "billing/"}, exitUsage, "task name is empty"},
		{[]string{"tasks", "show", "billing/nope"}, exitNotFound, "task billing/nope: not found"},
		{[]string{"tasks", "clear", "billing/nope"}, exitNotFound, "not found"},
		{[]string{"tasks", "set", "billing/export"}, exitUsage, "needs at least one of --limit"},
		{[]string{"tasks", "set", "billing/export", "--limit", "0"}, exitUsage, "--limit is 0"},
		{[]string{"tasks", "set", "billing/export", "--limit", "many"}, exitUsage, "--limit"},
		{[]string{"tasks", "set", "billing/export", "--disable", "--enable"}, exitUsage, "exclude each other"},
		{[]string{"tasks", "set", "billing/export", "--keep-alive-threshold", "soon"}, exitUsage, "keep-alive-threshold"},
		{[]string{"tasks", "set", "billing/export", "--keep-alive-threshold", "-5s"}, exitUsage, "want at least 250ms"},
		{[]string{"tasks", "set", "billing/export", "--keep-alive-threshold", "100ms"}, exitUsage, "want at least 250ms"},
		{[]string{"tasks", "set", "billing/export", "--limit", "10001"}, exitUsage, "--limit is 10001; want -1 (unlimited) or 1 to 10000"},
		{[]string{"executions", "list", "billing/export", "--status", "running"}, exitUsage, "--status is \"running\""},
		{[]string{"executions", "list", "billing/export", "--last", "0"}, exitUsage, "--last is 0"},
		{[]string{"executions", "list", "billing/nope"}, exitNotFound, "not found"},
		{[]string{"executions", "show", "abc"}, exitUsage, "not a positive integer"},
		{[]string{"executions", "show", "999999"}, exitNotFound, "execution 999999: not found"},
		{[]string{"migrate", "sideways"}, exitUsage, "unknown command"},
	} {
		code, out, errOut := cli(t, f.url, tc.args...)
		require.Equal(t, tc.code, code, "%v: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.stderr, "%v", tc.args)
		require.Empty(t, out, "%v", tc.args)
		require.Regexp(t, `^taskling: [^\n]*\n(Run 'taskling --help' for usage.\n)?$`, errOut, "one line, then the hint on usage errors")
	}

	code, _, errOut := cli(t, "", "tasks", "list")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "set --database-url or TASKLING_DATABASE_URL")
	code, _, errOut = cli(t, "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", "tasks", "list")
	require.Equal(t, exitUnreachable, code, errOut)
	require.Contains(t, errOut, "connect to the database")
}

func TestServeAnswersUntilStopped(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errOut := &testutil.SyncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0"}, &bytes.Buffer{}, errOut, func(k string) string {
			if k == "TASKLING_DATABASE_URL" {
				return f.url
			}
			return ""
		})
	}()
	serving := regexp.MustCompile(`serving on (http://\S+) \(read-only`)
	var base string
	require.Eventually(t, func() bool {
		m := serving.FindStringSubmatch(errOut.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, 10*time.Second, 20*time.Millisecond)
	resp, err := http.Get(base + "/api/v1/tasks/billing/export")
	require.NoError(t, err)
	var task httpapi.Task
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&task))
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 2, task.SlotsUsed)

	cancel()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, errOut.String())
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop on cancellation")
	}
}

func TestServeRefusesAShortTokenAndKeepsProtectReadsAsANoOp(t *testing.T) {
	t.Parallel()
	var errOut bytes.Buffer
	code := run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0"}, &bytes.Buffer{}, &errOut, func(k string) string {
		switch k {
		case "TASKLING_DATABASE_URL":
			return "postgres://unused"
		case "TASKLING_API_TOKEN":
			return "s3cret"
		}
		return ""
	})
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut.String(), "TASKLING_API_TOKEN is 6 bytes; want at least 32")

	f := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testutil.SyncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--protect-reads"}, &bytes.Buffer{}, out, func(k string) string {
			switch k {
			case "TASKLING_DATABASE_URL":
				return f.url
			case "TASKLING_API_TOKEN":
				return strings.Repeat("k", 32)
			}
			return ""
		})
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "every request needs a token") }, 10*time.Second, 20*time.Millisecond)
	require.Contains(t, out.String(), "--protect-reads is deprecated and does nothing")
	cancel()
	require.Equal(t, exitOK, <-done, out.String())
}

// TestStoredTextIsEscapedForTheTerminal is issue 15 item 6: reference values and messages reached
// the terminal raw, so an escape sequence recolored it and a newline broke the table.
func TestStoredTextIsEscapedForTheTerminal(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	hostile := "evil\x1b[2J\x1b[31mred\nfake row\t\u202egnp.exe"
	e, err := f.client.StartExecution(ctx, "billing", "import", &taskling.StartOptions{ReferenceValue: hostile})
	require.NoError(t, err)
	require.NoError(t, e.Checkpoint(ctx, "step\x1b]0;pwned\x07 done\r\n"))
	require.NoError(t, e.Complete(ctx))

	list := ok(t, f.url, "executions", "list", "billing/import")
	show := ok(t, f.url, "executions", "show", strconv.FormatInt(e.ID(), 10))
	for _, out := range []string{list, show} {
		require.NotContains(t, out, "\x1b")
		require.NotContains(t, out, "\u202e")
		require.NotContains(t, out, "\r")
		require.Contains(t, out, `evil\u001b[2J\u001b[31mred\nfake row\t\u202egnp.exe`)
	}
	require.Contains(t, show, `step\u001b]0;pwned\u0007 done\r\n`)
	require.Len(t, strings.Split(strings.TrimSpace(list), "\n"), 3, "a header and two rows: no fake row")
	// JSON output escapes by itself and keeps the value exact.
	var page struct {
		Executions []struct {
			Reference string `json:"reference_value"`
		} `json:"executions"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "-o", "json", "executions", "list", "billing/import")), &page))
	require.Equal(t, hostile, page.Executions[0].Reference)
}
