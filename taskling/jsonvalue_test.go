package taskling_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf16"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/storedjson"
	"github.com/taskling-go/taskling/taskling"
)

// TestSubmissionHeadersWithJSONEscapesReadBack: a header holding escapes (\" \n \\) reads back
// equal from Submission, Submissions and the claimed run's Execution.Header, and does not stop
// the queue (issue 22: they were read through bytea, which treats \ as its own escape).
func TestSubmissionHeadersWithJSONEscapesReadBack(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	headers := []string{`{"note":"say \"hi\""}`, `{"lines":"a\nb\tc"}`, `{"path":"C:\\dir\\"}`, `"\\000\\x41"`, `["\u00e9\ud83d\ude00"]`}
	ids := make([]int64, len(headers))
	for i, h := range headers {
		id, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: json.RawMessage(h)})
		require.NoError(t, err)
		ids[i] = id
		sub, err := b.client.Submission(b.ctx, id)
		require.NoError(t, err)
		require.JSONEq(t, h, string(sub.Header))
	}
	list, err := b.client.Submissions(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	require.Len(t, list, len(headers))

	var mu sync.Mutex
	got := map[int64]string{}
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		var raw json.RawMessage
		if err := e.Header(&raw); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		got[e.SubmissionID()] = string(raw)
		return nil
	}, nil)
	for i, id := range ids {
		b.waitStatus(t, id, taskling.SubmissionCompleted)
		mu.Lock()
		require.JSONEq(t, headers[i], got[id])
		mu.Unlock()
	}
}

// TestSubmissionHeaderLongerAsStoredStillRuns: a header near the size limit comes back from jsonb
// longer (1e+21 as 22 digits), and its attempt still starts with it (issue 22: the claimed header
// was checked against MaxHeaderLength again, and the Work loop retried it forever).
func TestSubmissionHeaderLongerAsStoredStillRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	ones := make([]float64, (taskling.MaxHeaderLength-2)/len("1e+21,"))
	for i := range ones {
		ones[i] = 1e21
	}
	big, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: ones, MaxAttempts: 1})
	require.NoError(t, err)
	behind, err := b.client.Submit(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	sub, err := b.client.Submission(b.ctx, big)
	require.NoError(t, err)
	require.Greater(t, len(sub.Header), taskling.MaxHeaderLength, "jsonb's text is longer than the header submitted")

	got := make(chan []float64, 2)
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		var h []float64
		if err := e.Header(&h); err != nil {
			return err
		}
		got <- h
		return nil
	}, nil)
	b.waitStatus(t, big, taskling.SubmissionCompleted)
	b.waitStatus(t, behind, taskling.SubmissionCompleted)
	require.Equal(t, ones, <-got)
}

// jsonValue draws the text of a JSON value that jsonb stores, reaching the escapes, characters
// and numbers that have gone wrong: every short escape, every control character but U+0000 as
// \u00XX, non-ASCII raw and escaped, surrogate pairs, text that reads as a bytea escape, numbers
// with big exponents and many digits, duplicate keys, nesting.
func jsonValue(t *rapid.T, depth int) string {
	var sb strings.Builder
	writeJSONValue(t, &sb, depth)
	return sb.String()
}

func writeJSONValue(t *rapid.T, sb *strings.Builder, depth int) {
	kinds := 5
	if depth > 0 {
		kinds = 9 // arrays and objects as often as the rest
	}
	switch rapid.IntRange(0, kinds-1).Draw(t, "kind") {
	case 0:
		sb.WriteString(rapid.SampledFrom([]string{"null", "true", "false"}).Draw(t, "literal"))
	case 1, 2:
		sb.WriteString(jsonNumber(t))
	case 3, 4:
		sb.WriteString(jsonString(t))
	case 5, 6:
		sb.WriteByte('[')
		for i := range rapid.IntRange(0, 4).Draw(t, "elements") {
			if i > 0 {
				sb.WriteByte(',')
			}
			writeJSONValue(t, sb, depth-1)
		}
		sb.WriteByte(']')
	case 7, 8:
		sb.WriteString("{ ")
		keys := []string{}
		for i := range rapid.IntRange(0, 4).Draw(t, "members") {
			if i > 0 {
				sb.WriteString(" ,\n")
			}
			key := jsonString(t)
			if len(keys) > 0 && rapid.IntRange(0, 4).Draw(t, "duplicate") == 0 {
				key = rapid.SampledFrom(keys).Draw(t, "again") // jsonb keeps the last, as Go does
			}
			keys = append(keys, key)
			sb.WriteString(key + ":")
			writeJSONValue(t, sb, depth-1)
		}
		sb.WriteString("}")
	}
}

func jsonNumber(t *rapid.T) string {
	digits := func(label string, min, max int) string {
		return rapid.StringOfN(rapid.RuneFrom([]rune("0123456789")), min, max, -1).Draw(t, label)
	}
	n := rapid.SampledFrom([]string{"", "-"}).Draw(t, "sign")
	if rapid.Bool().Draw(t, "zero") {
		n += "0"
	} else {
		n += rapid.SampledFrom([]string{"1", "5", "9"}).Draw(t, "lead") + digits("int", 0, 40)
	}
	if rapid.Bool().Draw(t, "fraction") {
		n += "." + digits("frac", 1, 40)
	}
	if rapid.Bool().Draw(t, "exponent") {
		e := rapid.IntRange(-400, 3000).Draw(t, "exp")
		sign := ""
		if e >= 0 {
			sign = rapid.SampledFrom([]string{"", "+"}).Draw(t, "expsign")
		}
		n += rapid.SampledFrom([]string{"e", "E"}).Draw(t, "e") + sign + strconv.Itoa(e)
	}
	return n
}

var nonASCII = []rune("é中😀\u2028\u2029\ufeff\ufffd\U0010ffff\u007f\u0080ÿ")

func jsonString(t *rapid.T) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for range rapid.IntRange(0, 8).Draw(t, "pieces") {
		switch rapid.IntRange(0, 6).Draw(t, "piece") {
		case 0:
			sb.WriteRune(rapid.RuneFrom(nil, &unicode.RangeTable{R16: []unicode.Range16{{Lo: 0x20, Hi: 0x21, Stride: 1}, {Lo: 0x23, Hi: 0x5b, Stride: 1}, {Lo: 0x5d, Hi: 0x7e, Stride: 1}}}).Draw(t, "ascii"))
		case 1:
			sb.WriteString(rapid.SampledFrom([]string{`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`}).Draw(t, "escape"))
		case 2:
			f := rapid.SampledFrom([]string{`\u%04x`, `\u%04X`}).Draw(t, "hex")
			sb.WriteString(fmt.Sprintf(f, rapid.IntRange(1, 0x1f).Draw(t, "control")))
		case 3:
			sb.WriteRune(rapid.SampledFrom(nonASCII).Draw(t, "rune"))
		case 4:
			r := rapid.IntRange(0x20, 0xfffd).Filter(func(r int) bool { return r < 0xd800 || r > 0xdfff }).Draw(t, "bmp")
			sb.WriteString(fmt.Sprintf(`\u%04x`, r))
		case 5:
			hi, lo := utf16.EncodeRune(rune(rapid.IntRange(0x10000, 0x10ffff).Draw(t, "astral")))
			sb.WriteString(fmt.Sprintf(`\u%04x\u%04X`, hi, lo))
		case 6:
			sb.WriteString(rapid.SampledFrom([]string{`\\000`, `\\x41`, `\\\\`, `\\'`, `C:\\dir\\`}).Draw(t, "bytea"))
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

// edgeJSON are values at the limits: every control character, numeric's range, deep nesting
// (depth levels: the library stores up to MaxJSONDepth; encoding/json reads up to 10 000).
func edgeJSON(depth int) []string {
	var controls strings.Builder
	controls.WriteByte('"')
	for r := 1; r < 0x20; r++ {
		fmt.Fprintf(&controls, `\u%04x`, r)
	}
	controls.WriteString(`\b\f\n\r\t"`)
	return []string{
		controls.String(),
		`[1e131071, -1E+131071, 1e-16383, 0.` + strings.Repeat("0", 16382) + `1, -0, 0e-16383, 1.000]`,
		`123456789012345678901234567890123456789012345678901234567890.12345678901234567890`,
		strings.Repeat("[", depth) + strings.Repeat("]", depth),
		strings.Repeat(`{"a":`, depth) + `"\u00e9\ud83d\ude00"` + strings.Repeat("}", depth),
	}
}

// canonicalJSON decodes b with UseNumber and writes each number one way: jsonb may write an
// equal number differently (1e2 as 100) and reorder keys.
func canonicalJSON(t require.TestingT, b []byte) any {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	require.NoError(t, d.Decode(&v), "%.200s", b)
	var canon func(any) any
	canon = func(v any) any {
		switch x := v.(type) {
		case json.Number:
			return canonicalNumber(string(x))
		case []any:
			for i := range x {
				x[i] = canon(x[i])
			}
		case map[string]any:
			for k := range x {
				x[k] = canon(x[k])
			}
		}
		return v
	}
	return canon(v)
}

type jsonNum string

// canonicalNumber writes a JSON number as its significant digits and exponent (-0 as 0).
func canonicalNumber(s string) jsonNum {
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	mantissa, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mantissa = s[:i]
		exp, _ = strconv.Atoi(s[i+1:])
	}
	digits := strings.Replace(mantissa, ".", "", 1)
	if i := strings.IndexByte(mantissa, '.'); i >= 0 {
		exp -= len(mantissa) - i - 1
	}
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return "0"
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	return jsonNum(sign + trimmed + "e" + strconv.Itoa(exp))
}

// sentJSON is a value sent, and its canonical form (decoded once: deep values cost).
type sentJSON struct {
	text  string
	canon any
}

func requireSameJSON(t require.TestingT, want sentJSON, got []byte, what string) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	require.Equal(t, want.canon, canonicalJSON(t, got), "%s: sent %.300s, read %.300s", what, want.text, got)
}

// execModes are the query exec modes NewClient accepts (without a transaction pooler, all).
var execModes = []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}

// TestEveryStoredJSONValueReadsBackEqual: under each exec mode, every JSON value the API accepts
// reads back equal wherever it is stored: an execution's header (its history), a submission's
// (Submission, and the claimed attempt's Execution.Header), object block values, list blocks'
// headers and items, and, as text, a checkpoint's message.
func TestEveryStoredJSONValueReadsBackEqual(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDB(t)
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			cfg, err := pgxpool.ParseConfig(url)
			require.NoError(t, err)
			cfg.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			// A death threshold a loaded machine's late heartbeat never reaches: not under test.
			settings := taskling.TaskSettings{ConcurrencyLimit: 10, KeepAliveInterval: 200 * time.Millisecond, KeepAliveDeathThreshold: 20 * time.Second}
			r := newRoundTrip(t, newClient(t, pool, noAutoCleanup(&taskling.Config{Defaults: settings})), "json-"+mode.String())
			for _, v := range edgeJSON(taskling.MaxJSONDepth) {
				r.check(t, []string{v})
			}
			// A bounded number of draws: each is a few round trips per place it is stored.
			batch := rapid.Custom(func(t *rapid.T) []string {
				return rapid.SliceOfN(rapid.Custom(func(t *rapid.T) string { return jsonValue(t, 3) }), 1, 5).Draw(t, "values")
			})
			seed := time.Now().UnixNano()
			t.Logf("draws from seed %d", seed) // shown with a failure
			for i := range 12 {
				vals := batch.Example(int(seed) + i)
				r.check(t, vals)
			}
		})
	}
}

type roundTrip struct {
	b    *testBundle
	mu   sync.Mutex
	runs map[int64][]byte // submission id → its attempt's Execution.Header
}

func newRoundTrip(t *testing.T, c *taskling.Client, task string) *roundTrip {
	r := &roundTrip{b: &testBundle{ctx: context.Background(), client: c, app: "app", task: task}, runs: map[int64][]byte{}}
	r.b.work(t, c, func(ctx context.Context, e *taskling.Execution) error {
		var raw json.RawMessage
		if err := e.Header(&raw); err != nil {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.runs[e.SubmissionID()] = raw
		return nil
	}, &taskling.WorkOptions{Workers: 3})
	return r
}

func (r *roundTrip) check(t *testing.T, vals []string) {
	t.Helper()
	b, ctx := r.b, r.b.ctx
	raws, sent := make([]any, len(vals)), make([]sentJSON, len(vals))
	for i, v := range vals {
		raws[i], sent[i] = json.RawMessage(v), sentJSON{text: v, canon: canonicalJSON(t, []byte(v))}
	}
	subs := make([]int64, len(vals))
	for i := range vals {
		id, err := b.client.Submit(ctx, b.app, b.task, &taskling.SubmitOptions{Header: raws[i], MaxAttempts: 1})
		require.NoError(t, err, "%.300s", vals[i])
		subs[i] = id
	}

	e, err := b.client.StartExecution(ctx, b.app, b.task, &taskling.StartOptions{Header: raws[0], WaitForSlot: true})
	require.NoError(t, err, "%.300s", vals[0])
	objects, err := e.ObjectBlocks(ctx, raws, nil)
	require.NoError(t, err)
	lists, err := e.ListBlocks(ctx, taskling.ListBlocksRequest{Items: raws, Header: raws[len(raws)-1], MaxBlockSize: len(raws)}, nil)
	require.NoError(t, err)
	require.Len(t, lists, 1)
	requireSameJSON(t, sent[len(sent)-1], lists[0].Header, "ListBlock.Header")
	items, err := lists[0].Items(ctx)
	require.NoError(t, err)
	require.Len(t, items, len(vals))
	for i, v := range sent {
		requireSameJSON(t, v, objects[i].Value, "Block.Value")
		requireSameJSON(t, v, items[i].Value, "ListItem.Value")
	}
	require.NoError(t, e.Checkpoint(ctx, vals[0]))
	require.NoError(t, e.Complete(ctx))

	d, err := b.client.Execution(ctx, e.ID())
	require.NoError(t, err)
	requireSameJSON(t, sent[0], d.Header, "ExecutionDetail.Header")
	checkpoint := ""
	for _, ev := range d.Events {
		if ev.Type == taskling.EventCheckpoint {
			checkpoint = ev.Message
		}
	}
	if len(vals[0]) <= taskling.MaxMessageLength {
		require.Equal(t, vals[0], checkpoint, "a checkpoint's message is text, read back as sent")
	}
	blocks, err := b.client.ExecutionBlocks(ctx, e.ID())
	require.NoError(t, err)
	for _, bl := range blocks {
		want := sent[len(sent)-1] // a list block's value is its header
		for i, o := range objects {
			if o.ID == bl.ID {
				want = sent[i]
			}
		}
		requireSameJSON(t, want, bl.Value, "BlockInfo.Value")
	}

	for i, id := range subs {
		sub, err := b.client.Submission(ctx, id)
		require.NoError(t, err)
		requireSameJSON(t, sent[i], sub.Header, "Submission.Header")
	}
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, id := range subs {
			if r.runs[id] == nil {
				return false
			}
		}
		return true
	}, 15*time.Second, 2*time.Millisecond, "the submissions to run")
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, id := range subs {
		requireSameJSON(t, sent[i], r.runs[id], "Execution.Header of a submission's attempt")
	}
}

// refusedJSON are values encoding/json accepts and jsonb refuses.
var refusedJSON = []string{`"\u0000"`, `["a\u0000b"]`, `{"\u0000":1}`, `"\ud800"`, `"\udc00"`, `"\ud800\ud800"`,
	`"\ud800x"`, `"\udfff\ud800"`, `1e999999`, `[1e131072]`, `1e-16384`, `0.` + strings.Repeat("0", 16384), `-1e-99999`,
	`1e99999999999999999999`, "\"\xff\""}

// TestJSONThatJSONBRefusesIsRefusedUpFront: a header, block value, list item or list header that
// jsonb would refuse is refused before anything is stored, with an error wrapping
// ErrInvalidArgument that names the field (issue 22: a 500 from the database, or worse).
func TestJSONThatJSONBRefusesIsRefusedUpFront(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(1)))
	e := b.start(t, nil)
	for _, v := range refusedJSON {
		raw := json.RawMessage(v)
		refused := func(field string, err error) {
			t.Helper()
			require.ErrorIs(t, err, taskling.ErrInvalidArgument, "%s %q", field, v)
			require.ErrorContains(t, err, field, v)
			require.ErrorContains(t, err, "jsonb", v)
		}
		_, err := b.client.StartExecution(b.ctx, b.app, "other", &taskling.StartOptions{Header: raw})
		refused("StartOptions.Header", err)
		refused("header", taskling.ValidateHeader("header", raw))
		_, err = b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: raw})
		refused("SubmitOptions.Header", err)
		_, err = e.ObjectBlocks(b.ctx, []any{1, raw}, nil)
		refused("values[1]", err)
		_, err = e.ListBlocks(b.ctx, taskling.ListBlocksRequest{Items: []any{1, raw}, MaxBlockSize: 10}, nil)
		refused("ListBlocksRequest.Items[1]", err)
		_, err = e.ListBlocks(b.ctx, taskling.ListBlocksRequest{Items: []any{1}, Header: raw, MaxBlockSize: 10}, nil)
		refused("ListBlocksRequest.Header", err)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM taskling.submission`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM taskling.block`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.task_execution`))
	// Text that only looks like those escapes is stored.
	_, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: `\u0000 \ud800 1e999999`})
	require.NoError(t, err)
}

// nestedJSON is a JSON value nesting depth levels, objects and arrays in turn.
func nestedJSON(depth int) json.RawMessage {
	var open, end strings.Builder
	for i := range depth {
		if i%2 == 0 {
			open.WriteString(`{"k": `)
		} else {
			open.WriteString(`[0, `)
		}
	}
	for i := depth - 1; i >= 0; i-- {
		if i%2 == 0 {
			end.WriteString(`}`)
		} else {
			end.WriteString(`]`)
		}
	}
	return json.RawMessage(open.String() + `"<&>"` + end.String())
}

// TestJSONNestedDeeperThanMaxJSONDepthIsRefused is issue 40 item 1: a header nested 9 000 deep
// was stored, and each read of it wrote about 160 MB. Wherever the library stores JSON, a value
// nesting MaxJSONDepth levels is stored and one nesting a level more (or 9 000) is refused, with
// ErrInvalidArgument naming the field, before anything is stored; so is a Go value that deep.
func TestJSONNestedDeeperThanMaxJSONDepthIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(steady(1)))
	e := b.start(t, nil)
	var goValue any = "leaf"
	for range taskling.MaxJSONDepth + 1 {
		goValue = []any{goValue}
	}
	for _, v := range []any{nestedJSON(taskling.MaxJSONDepth + 1), nestedJSON(9000), goValue} {
		refused := func(field string, err error) {
			t.Helper()
			require.ErrorIs(t, err, taskling.ErrInvalidArgument, field)
			require.ErrorContains(t, err, field+" nests ")
			require.ErrorContains(t, err, fmt.Sprintf("levels deep; at most %d allowed", taskling.MaxJSONDepth))
		}
		_, err := b.client.StartExecution(b.ctx, b.app, "other", &taskling.StartOptions{Header: v})
		refused("StartOptions.Header", err)
		refused("header", taskling.ValidateHeader("header", v))
		_, err = b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: v})
		refused("SubmitOptions.Header", err)
		_, err = e.ObjectBlocks(b.ctx, []any{1, v}, nil)
		refused("values[1]", err)
		_, err = e.ListBlocks(b.ctx, taskling.ListBlocksRequest{Items: []any{1, v}, MaxBlockSize: 10}, nil)
		refused("ListBlocksRequest.Items[1]", err)
		_, err = e.ListBlocks(b.ctx, taskling.ListBlocksRequest{Items: []any{1}, Header: v, MaxBlockSize: 10}, nil)
		refused("ListBlocksRequest.Header", err)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM taskling.submission`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM taskling.block`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.task_execution`))

	deepest := nestedJSON(taskling.MaxJSONDepth)
	require.NoError(t, taskling.ValidateHeader("header", deepest))
	other, err := b.client.StartExecution(b.ctx, b.app, "other", &taskling.StartOptions{Header: deepest})
	require.NoError(t, err)
	require.NoError(t, other.Complete(b.ctx))
	_, err = b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: deepest})
	require.NoError(t, err)
	_, err = e.ObjectBlocks(b.ctx, []any{deepest}, nil)
	require.NoError(t, err)
	_, err = e.ListBlocks(b.ctx, taskling.ListBlocksRequest{Items: []any{deepest}, Header: deepest, MaxBlockSize: 10}, nil)
	require.NoError(t, err)
	for _, q := range []string{
		`SELECT header::text FROM taskling.task_execution WHERE header IS NOT NULL`, `SELECT header::text FROM taskling.submission`,
		`SELECT value::text FROM taskling.block`, `SELECT value::text FROM taskling.list_item`,
	} {
		rows, err := b.pool.Query(b.ctx, q)
		require.NoError(t, err)
		stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.NotEmpty(t, stored, q)
		for _, v := range stored {
			require.Equal(t, taskling.MaxJSONDepth, storedjson.Depth([]byte(v)), q)
		}
	}
}

// TestJSONStoredDeeperThanTheBoundStillReadsAndRuns: a header stored before the bound (here
// written with SQL, 9 000 deep) still reads, and its submission's attempt runs with it.
func TestJSONStoredDeeperThanTheBoundStillReadsAndRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, steady(1))
	id, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: 1, MaxAttempts: 1})
	require.NoError(t, err)
	deep := nestedJSON(9000)
	b.exec(t, `UPDATE taskling.submission SET header = $1::text::jsonb WHERE id = $2`, string(deep), id)
	sub, err := b.client.Submission(b.ctx, id)
	require.NoError(t, err)
	require.Empty(t, sub.HeaderError)
	require.JSONEq(t, string(deep), string(sub.Header))

	got := make(chan json.RawMessage, 1)
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		var h json.RawMessage
		if err := e.Header(&h); err != nil {
			return err
		}
		got <- h
		return nil
	}, nil)
	b.waitStatus(t, id, taskling.SubmissionCompleted)
	require.JSONEq(t, string(deep), string(<-got))
}

// maybeRefusedJSON draws JSON texts near what jsonb refuses: \u escapes of any code unit
// (surrogates alone, paired, reversed; NUL), invalid UTF-8, numbers around numeric's limits.
func maybeRefusedJSON(t *rapid.T) string {
	parts := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) string {
		switch rapid.IntRange(0, 3).Draw(t, "part") {
		case 0:
			return jsonValue(t, 2)
		case 1:
			var sb strings.Builder
			sb.WriteByte('"')
			for range rapid.IntRange(1, 4).Draw(t, "units") {
				u := rapid.OneOf(rapid.IntRange(0, 0xffff), rapid.IntRange(0xd7ff, 0xe000), rapid.Just(0)).Draw(t, "unit")
				fmt.Fprintf(&sb, `\u%04x`, u)
				if rapid.IntRange(0, 3).Draw(t, "text") == 0 {
					sb.WriteString("x")
				}
			}
			if rapid.IntRange(0, 5).Draw(t, "invalid utf-8") == 0 {
				sb.WriteString(rapid.SampledFrom([]string{"\xff", "\xc3", "\xed\xa0\x80", "\xe2\x82"}).Draw(t, "bytes"))
			}
			sb.WriteByte('"')
			return sb.String()
		default:
			n := rapid.SampledFrom([]string{"", "-"}).Draw(t, "sign")
			n += rapid.SampledFrom([]string{"0", "1", "10", "123", "0.5", "1.5", "1.000", "0.001", "99.99"}).Draw(t, "mantissa")
			if rapid.IntRange(0, 3).Draw(t, "long fraction") == 0 {
				if !strings.Contains(n, ".") {
					n += "."
				}
				n += strings.Repeat(rapid.SampledFrom([]string{"0", "7"}).Draw(t, "digit"), rapid.IntRange(16370, 16390).Draw(t, "digits"))
			}
			near := rapid.SampledFrom([]int{0, 1000, 16383, -16383, 131071, -131071, 1 << 30, -(1 << 30)}).Draw(t, "near")
			e := near + rapid.IntRange(-4, 4).Draw(t, "off")
			return n + "e" + strconv.Itoa(e)
		}
	}), 1, 3).Draw(t, "parts")
	return "[" + strings.Join(parts, ",") + "]"
}

// TestJSONBRefusalsAreKnownUpFront: the check behind those refusals agrees with PostgreSQL on
// JSON near jsonb's limits: what it lets through, jsonb stores; what it refuses, jsonb refuses.
func TestJSONBRefusalsAreKnownUpFront(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	ctx := context.Background()
	stored := func(v string) error {
		var ok bool
		return pool.QueryRow(ctx, `SELECT $1::text::jsonb IS NOT NULL`, v).Scan(&ok)
	}
	for _, v := range append(refusedJSON, edgeJSON(10000)...) {
		require.Equal(t, stored(v) == nil, taskling.CheckJSONBForTest([]byte(v)) == nil, "%.100s", v)
	}
	rapid.Check(t, func(t *rapid.T) {
		v := maybeRefusedJSON(t)
		require.True(t, json.Valid([]byte(v)), v)
		dbErr, ourErr := stored(v), taskling.CheckJSONBForTest([]byte(v))
		if dbErr != nil {
			var pgErr *pgconn.PgError
			require.ErrorAs(t, dbErr, &pgErr)
		}
		require.Equal(t, dbErr == nil, ourErr == nil, "%.200s: jsonb says %v, the check %v", v, dbErr, ourErr)
	})
}
