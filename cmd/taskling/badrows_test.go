package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
)

// TestOneBadRowNeverFailsTheCommands: a header holding JSON escapes, and a submission, an
// execution and a block whose stored JSON encoding/json cannot read (nested deeper than 10 000,
// written with SQL), are listed and shown, in tables and as JSON, the bad rows with their error
// (issue 22: submissions list failed for the whole task).
func TestOneBadRowNeverFailsTheCommands(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	escaped := submitID(t, f.url, "--header", `{"note": "say \"hi\"", "path": "C:\\dir"}`)
	deep := submitID(t, f.url, "--header", `1`)
	blocks, err := f.running.ObjectBlocks(ctx, []any{1}, nil)
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, f.url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	const deepJSON = `(repeat('[', 10001) || repeat(']', 10001))::jsonb`
	for q, id := range map[string]int64{
		`UPDATE taskling.submission SET header = ` + deepJSON + ` WHERE id = $1`:     deep,
		`UPDATE taskling.task_execution SET header = ` + deepJSON + ` WHERE id = $1`: f.running.ID(),
		`UPDATE taskling.block SET value = ` + deepJSON + ` WHERE id = $1`:           blocks[0].ID,
	} {
		_, err := conn.Exec(ctx, q, id)
		require.NoError(t, err)
	}

	var page httpapi.SubmissionPage
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "submissions", "list", "billing/report", "-o", "json")), &page))
	subs := page.Submissions
	require.Len(t, subs, 2)
	require.Contains(t, subs[0].HeaderError, "exceeded max depth")
	require.JSONEq(t, `{"note": "say \"hi\"", "path": "C:\\dir"}`, string(subs[1].Header))
	ok(t, f.url, "submissions", "list", "billing/report")
	require.Contains(t, ok(t, f.url, "submissions", "show", itoa(escaped)), `"say \"hi\""`)
	for _, args := range [][]string{
		{"submissions", "show", itoa(deep)}, {"submissions", "show", itoa(deep), "-o", "json"},
		{"executions", "show", itoa(f.running.ID())}, {"executions", "show", itoa(f.running.ID()), "-o", "json"},
		{"blocks", "show", itoa(blocks[0].ID)}, {"blocks", "show", itoa(blocks[0].ID), "-o", "json"},
		{"blocks", "list", "billing/export"}, {"blocks", "list", "billing/export", "-o", "json"},
	} {
		require.Contains(t, ok(t, f.url, args...), "exceeded max depth", args)
	}
	ok(t, f.url, "executions", "list", "billing/export", "-o", "json")
	ok(t, f.url, "submissions", "cancel", itoa(deep))

	// What jsonb cannot store is a usage error naming the flag.
	for _, h := range []string{`{"a": "\u0000"}`, `"\ud800"`, `1e999999`} {
		code, _, errOut := cli(t, f.url, "submit", "billing/report", "--header", h)
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, "--header", h)
		require.Contains(t, errOut, "jsonb", h)
	}
}
