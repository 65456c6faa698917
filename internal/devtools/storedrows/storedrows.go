// Package storedrows makes, for the tests that no read amplifies a stored value (the HTTP API's,
// the dashboard's and the CLI's), one task's rows holding a value in every place that stores
// one: a submission's header, reference value and last error; an execution's header, reference
// value, checkpoint and error messages; an object block's value and a list block's header, and
// their messages. The worst values are written with SQL, as rows stored before the library
// bounded them would hold.
package storedrows

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// The places a value is stored in.
const (
	SubmissionHeader    = "submission.header"
	SubmissionReference = "submission.reference_value"
	SubmissionError     = "submission.last_error"
	ExecutionHeader     = "execution.header"
	ExecutionReference  = "execution.reference_value"
	Checkpoint          = "execution.checkpoint"
	ErrorEvent          = "execution.error"
	ObjectValue         = "object_block.value"
	ObjectMessage       = "object_block.message"
	ListHeader          = "list_block.header"
	ListMessage         = "list_block.message"
)

// What each read shows, by the places of its values (a place shown twice named twice): a
// submission; an execution; blocks listed; a block with its attempt, whose message it shows
// twice (the block's, its attempt's).
var (
	SubmissionPlaces  = []string{SubmissionHeader, SubmissionReference, SubmissionError}
	ExecutionPlaces   = []string{ExecutionHeader, ExecutionReference, Checkpoint, ErrorEvent}
	BlockPlaces       = []string{ObjectValue, ObjectMessage, ListHeader, ListMessage}
	ObjectBlockPlaces = []string{ObjectValue, ObjectMessage, ObjectMessage}
	ListBlockPlaces   = []string{ListHeader, ListMessage, ListMessage}
)

// Rows are one task's rows, and the size in bytes of the value each place stores (jsonb's text
// for JSON).
type Rows struct {
	App, Task                           string
	Submission, Execution, Object, List int64
	Sizes                               map[string]int
}

// Sum is the size of the values stored in places, a place named twice counted twice.
func (r Rows) Sum(places ...string) int {
	n := 0
	for _, p := range places {
		n += r.Sizes[p]
	}
	return n
}

// Values are what rows hold: every JSON place Value, stored through the library, unless SQLJSON
// is set, which is then written over it with SQL; every text place Text, written with SQL.
type Values struct {
	Name    string
	Value   any
	SQLJSON string
	Text    string
	// JSONEscapes: Text is control and invisible characters, which JSON (and the CLI) writes as
	// \uXXXX escapes of up to six bytes each (the docs say so): only pages, tables and text are
	// held to twice its size.
	JSONEscapes bool
}

// Small are small values, to compare with.
var Small = Values{Name: "small", Value: 1, Text: "x"}

// Worst are the values that reads wrote largest: a header nested 9 000 deep (its indentation
// grows as the square of the depth), text full of what escaping lengthens, a value 64 deep and
// wide, text of control and invisible characters.
func Worst() []Values {
	html, err := json.Marshal([]string{Escaped(60 << 10)})
	if err != nil {
		panic(err) // a []string always encodes
	}
	return []Values{
		{Name: "deep", Value: 1, SQLJSON: Deep(9000), Text: strings.Repeat("x", 2000)},
		{Name: "html", Value: 1, SQLJSON: string(html), Text: Escaped(2000)},
		{Name: "wide", Value: json.RawMessage(Wide(taskling.MaxJSONDepth, 20000)), Text: Escaped(2000)},
		{Name: "ctrl", Value: 1, Text: strings.Repeat("\x1b\u00ad", 666), JSONEscapes: true}, // four times as long escaped
	}
}

// Make makes app/task's rows (task named for v: the same length for every Values above): a
// waiting submission; a completed execution with a checkpoint and an error event, whose object
// block and list block failed (each then at its retry limit).
func Make(t testing.TB, c *taskling.Client, pool *pgxpool.Pool, app string, v Values) Rows {
	t.Helper()
	task := v.Name + strings.Repeat("_", max(0, 5-len(v.Name)))
	value, sqlJSON, text := v.Value, v.SQLJSON, v.Text
	ctx := context.Background()
	r := Rows{App: app, Task: task, Sizes: map[string]int{}}
	var err error
	r.Submission, err = c.Submit(ctx, app, task, &taskling.SubmitOptions{Header: value, ReferenceValue: "r"})
	require.NoError(t, err)
	e, err := c.StartExecution(ctx, app, task, &taskling.StartOptions{Header: value, ReferenceValue: "r"})
	require.NoError(t, err)
	r.Execution = e.ID()
	require.NoError(t, e.Checkpoint(ctx, "c"))
	require.NoError(t, e.RecordError(ctx, "e", false))
	objects, err := e.ObjectBlocks(ctx, []any{value}, nil)
	require.NoError(t, err)
	require.NoError(t, objects[0].Start(ctx))
	require.NoError(t, objects[0].Fail(ctx, "m"))
	lists, err := e.ListBlocks(ctx, taskling.ListBlocksRequest{Items: []any{1}, Header: value, MaxBlockSize: 10}, nil)
	require.NoError(t, err)
	require.NoError(t, lists[0].Start(ctx))
	require.NoError(t, lists[0].Fail(ctx, "m"))
	require.NoError(t, e.Complete(ctx))
	r.Object, r.List = objects[0].ID, lists[0].ID

	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err, sql)
	}
	if sqlJSON != "" {
		exec(`UPDATE taskling.submission SET header = $1::text::jsonb WHERE id = $2`, sqlJSON, r.Submission)
		exec(`UPDATE taskling.task_execution SET header = $1::text::jsonb WHERE id = $2`, sqlJSON, r.Execution)
		exec(`UPDATE taskling.block SET value = $1::text::jsonb WHERE id IN ($2, $3)`, sqlJSON, r.Object, r.List)
	}
	exec(`UPDATE taskling.submission SET reference_value = $1, last_error = $1 WHERE id = $2`, text, r.Submission)
	exec(`UPDATE taskling.task_execution SET reference_value = $1 WHERE id = $2`, text, r.Execution)
	exec(`UPDATE taskling.task_execution_event SET message = $1 WHERE execution_id = $2 AND message IS NOT NULL`, text, r.Execution)
	exec(`UPDATE taskling.block_attempt SET message = $1 WHERE block_id IN ($2, $3)`, text, r.Object, r.List)

	size := func(place, sql string, id int64) {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, sql, id).Scan(&n), sql)
		r.Sizes[place] = n
	}
	size(SubmissionHeader, `SELECT octet_length(header::text) FROM taskling.submission WHERE id = $1`, r.Submission)
	size(ExecutionHeader, `SELECT octet_length(header::text) FROM taskling.task_execution WHERE id = $1`, r.Execution)
	size(ObjectValue, `SELECT octet_length(value::text) FROM taskling.block WHERE id = $1`, r.Object)
	size(ListHeader, `SELECT octet_length(value::text) FROM taskling.block WHERE id = $1`, r.List)
	for _, p := range []string{SubmissionReference, SubmissionError, ExecutionReference, Checkpoint, ErrorEvent, ObjectMessage, ListMessage} {
		r.Sizes[p] = len(text)
	}
	return r
}

// Deep is a JSON array nested n deep.
func Deep(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// Wide is a JSON value nesting depth levels whose innermost array holds n numbers: re-indented,
// each number gets a line of its own, 2×depth spaces in.
func Wide(depth, n int) string {
	return strings.Repeat("[", depth-1) + "[" + strings.Repeat("1,", n-1) + "1]" + strings.Repeat("]", depth-1)
}

// Escaped is text of n bytes that HTML escaping and HTML-safe JSON escaping make longest: < > &
// " ' + and invisible characters (a zero-width space, U+2028) that pages and terminals write as
// \uXXXX.
func Escaped(n int) string {
	const unit = `<>&"'+` + "\u200b\u2028"
	s := strings.Repeat(unit, n/len(unit)+1)
	return s[:n-n%len(unit)]
}
