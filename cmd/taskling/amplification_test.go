package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/storedrows"
	"github.com/taskling-go/taskling/taskling"
)

// TestNoCommandPrintsAStoredValueLargerThanTwiceItsSize is issue 40 item 1: `taskling
// submissions show 3 -o json` printed a header nested 9 000 deep (18 kB) as 162 MB, re-indented.
// Every command that prints a stored value (headers, block values, reference values, messages,
// errors), as a table or text and as JSON, prints, for the worst values stored with SQL (nested
// 9 000 deep, full of what escaping lengthens, 64 deep and wide, control characters but in JSON,
// which escapes them as the docs say), at most twice the values' stored size plus 1 KiB each more
// than for small values.
func TestNoCommandPrintsAStoredValueLargerThanTwiceItsSize(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "worker-1"})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	small := storedrows.Make(t, client, pool, "app", storedrows.Small)
	var base []string // what each command prints for small values
	for _, c := range storedCommands(small) {
		base = append(base, ok(t, url, c.args...))
	}
	for _, c := range storedrows.Worst() {
		worst := storedrows.Make(t, client, pool, "app", c)
		t.Run(c.Name, func(t *testing.T) {
			for i, cmd := range storedCommands(worst) {
				if c.JSONEscapes && cmd.json {
					continue // JSON escapes control characters (\u001b): the docs say so
				}
				got := ok(t, url, cmd.args...)
				limit := len(base[i]) + 2*worst.Sum(cmd.shows...) + 1024*len(cmd.shows)
				assert.LessOrEqual(t, len(got), limit, "taskling %s prints %d bytes for %d stored (%v); %d for small values",
					strings.Join(cmd.args, " "), len(got), worst.Sum(cmd.shows...), cmd.shows, len(base[i]))
				t.Logf("taskling %.60s: %d bytes for %d stored; %d for small values", strings.Join(cmd.args, " "), len(got), worst.Sum(cmd.shows...), len(base[i]))
			}
		})
	}
}

type storedCommand struct {
	args  []string
	json  bool
	shows []string // the places whose values it prints (twice: twice)
}

// storedCommands are the commands that print rows' values, each as text and as JSON; the changes
// (cancel, force) come last, and print the same as the reads.
func storedCommands(r storedrows.Rows) []storedCommand {
	task := "app/" + r.Task
	sub, exec, blocks := storedrows.SubmissionPlaces, storedrows.ExecutionPlaces, storedrows.BlockPlaces
	object, list := storedrows.ObjectBlockPlaces, storedrows.ListBlockPlaces
	var out []storedCommand
	for _, c := range []storedCommand{
		{args: []string{"submissions", "show", itoa(r.Submission)}, shows: sub},
		{args: []string{"submissions", "list", task}, shows: sub},
		{args: []string{"executions", "show", itoa(r.Execution)}, shows: exec},
		{args: []string{"executions", "list", task}, shows: exec[:2]},
		{args: []string{"blocks", "list", task}, shows: blocks},
		{args: []string{"blocks", "list", "--execution", itoa(r.Execution)}, shows: blocks},
		{args: []string{"blocks", "show", itoa(r.Object)}, shows: object},
		{args: []string{"blocks", "show", itoa(r.List)}, shows: list},
	} {
		out = append(out, c, storedCommand{args: append(c.args, "-o", "json"), json: true, shows: c.shows})
	}
	return append(out,
		storedCommand{args: []string{"blocks", "force", itoa(r.Object), "-o", "json"}, json: true, shows: object},
		storedCommand{args: []string{"blocks", "force", itoa(r.List)}, shows: list},
		storedCommand{args: []string{"submissions", "cancel", itoa(r.Submission), "--reason", strings.Repeat("x", 1000), "-o", "json"}, json: true, shows: sub},
	)
}

// TestSubmitRefusesAHeaderNestedDeeperThanMaxJSONDepth: `taskling submit --header` refuses a
// header nested deeper than MaxJSONDepth (or 9 000 deep) as a usage error naming the flag,
// before it opens the database; one at the bound is submitted.
func TestSubmitRefusesAHeaderNestedDeeperThanMaxJSONDepth(t *testing.T) {
	t.Parallel()
	for _, depth := range []int{taskling.MaxJSONDepth + 1, 9000} {
		code, _, errOut := cli(t, "postgres://nobody@127.0.0.1:1/none", "submit", "billing/report", "--header", storedrows.Deep(depth))
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, fmt.Sprintf("--header nests %d levels deep; at most %d allowed", depth, taskling.MaxJSONDepth))
	}
	f := setup(t)
	id := submitID(t, f.url, "--header", storedrows.Deep(taskling.MaxJSONDepth))
	require.Contains(t, ok(t, f.url, "submissions", "show", itoa(id), "-o", "json"), `"header": `+storedrows.Deep(taskling.MaxJSONDepth)+",\n")
}
