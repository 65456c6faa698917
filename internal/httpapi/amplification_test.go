package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/storedrows"
	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// TestNoRouteOrPageServesAStoredValueLargerThanTwiceItsSize is issue 40 item 1: a header nested
// 9 000 deep (18 kB) came back from GET /api/v1/submissions/{id} as 162 MB, the API re-indenting
// it; HTML-safe JSON wrote < as \u003c and pages wrote it &lt;. Every API route and dashboard
// page that shows a stored value (headers, block values, reference values, messages, errors)
// answers, for the worst values stored with SQL (nested 9 000 deep, full of what escaping
// lengthens, 64 deep and wide, control characters but in JSON, which escapes them as the docs
// say), at most twice the values' stored size plus 1 KiB each more than for small values.
func TestNoRouteOrPageServesAStoredValueLargerThanTwiceItsSize(t *testing.T) {
	t.Parallel()
	b := setup(t, -1, nil)
	small := storedrows.Make(t, b.client, b.pool, "app", storedrows.Small)
	var base []string // what each route answers for small values
	for _, r := range storedRoutes(small) {
		status, body := b.do(t, r.method, r.path, token, r.body)
		require.Equal(t, http.StatusOK, status, "%s %s: %.300s", r.method, r.path, body)
		base = append(base, body)
	}
	for _, c := range storedrows.Worst() {
		worst := storedrows.Make(t, b.client, b.pool, "app", c)
		t.Run(c.Name, func(t *testing.T) {
			for i, r := range storedRoutes(worst) {
				if c.JSONEscapes && strings.HasPrefix(r.path, "/api/") {
					continue // JSON escapes control characters (\u001b): the docs say so
				}
				status, got := b.do(t, r.method, r.path, token, r.body)
				require.Equal(t, http.StatusOK, status, "%s %s: %.300s", r.method, r.path, got)
				want := base[i]
				limit := len(want) + 2*worst.Sum(r.shows...) + 1024*len(r.shows)
				assert.LessOrEqual(t, len(got), limit, "%s %s (%s) answers %d bytes for %d stored (%v); %d for small values",
					r.method, r.path, r.name, len(got), worst.Sum(r.shows...), r.shows, len(want))
				if strings.HasPrefix(r.path, "/api/") {
					require.True(t, json.Valid([]byte(got)), r.path)
				}
			}
		})
	}
}

type storedRoute struct {
	name, method, path, body string
	shows                    []string // the places whose values it shows (twice: twice)
}

// storedRoutes are the routes and pages that show rows' values; the changes (cancel, force) come
// last, and show the same as the reads.
func storedRoutes(r storedrows.Rows) []storedRoute {
	task := "app/" + r.Task
	sub, exec, blocks := storedrows.SubmissionPlaces, storedrows.ExecutionPlaces, storedrows.BlockPlaces
	object, list := storedrows.ObjectBlockPlaces, storedrows.ListBlockPlaces
	// A table of blocks on a page shows their messages, and the first 60 characters of values.
	blockTable := []string{storedrows.ObjectMessage, storedrows.ListMessage}
	cancel := fmt.Sprintf(`{"reason": %q}`, strings.Repeat("x", 1000))
	return []storedRoute{
		{"submission", "GET", fmt.Sprintf("/api/v1/submissions/%d", r.Submission), "", sub},
		{"submissions", "GET", "/api/v1/tasks/" + task + "/submissions", "", sub},
		{"execution", "GET", fmt.Sprintf("/api/v1/executions/%d", r.Execution), "", exec},
		{"executions", "GET", "/api/v1/tasks/" + task + "/executions", "", exec[:2]},
		{"execution blocks", "GET", fmt.Sprintf("/api/v1/executions/%d/blocks", r.Execution), "", blocks},
		{"task blocks", "GET", "/api/v1/tasks/" + task + "/blocks", "", blocks},
		{"object block", "GET", fmt.Sprintf("/api/v1/blocks/%d", r.Object), "", object},
		{"list block", "GET", fmt.Sprintf("/api/v1/blocks/%d", r.List), "", list},
		{"submission page", "GET", fmt.Sprintf("/submissions/%d", r.Submission), "", sub},
		{"execution page", "GET", fmt.Sprintf("/executions/%d", r.Execution), "", slices.Concat(exec, blockTable)},
		{"object block page", "GET", fmt.Sprintf("/blocks/%d", r.Object), "", object},
		{"list block page", "GET", fmt.Sprintf("/blocks/%d", r.List), "", list},
		{"task page", "GET", "/tasks/" + task, "", slices.Concat([]string{storedrows.ExecutionReference}, sub[1:], blockTable)},
		{"force", "POST", fmt.Sprintf("/api/v1/blocks/%d/force", r.Object), "", object},
		{"cancel", "POST", fmt.Sprintf("/api/v1/submissions/%d/cancel", r.Submission), cancel, sub},
	}
}

// TestHeaderNestedDeeperThanMaxJSONDepthIsA400NamingIt is issue 40 item 1's attack: POST a
// header nested 9 000 deep (201 before). It is refused with 400 naming header, as is one nested
// a level deeper than MaxJSONDepth; one at the bound is stored, and served compact as stored.
func TestHeaderNestedDeeperThanMaxJSONDepthIsA400NamingIt(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	for _, depth := range []int{taskling.MaxJSONDepth + 1, 9000} {
		status, body := b.do(t, "POST", "/api/v1/tasks/app/jobs/submissions", token, `{"header": `+storedrows.Deep(depth)+`}`)
		require.Equal(t, http.StatusBadRequest, status, body)
		field, msg := apiErr(t, body)
		require.Equal(t, "header", field)
		require.Contains(t, msg, fmt.Sprintf("header nests %d levels deep; at most %d allowed", depth, taskling.MaxJSONDepth))
	}
	wide := storedrows.Wide(taskling.MaxJSONDepth, 1000)
	id := b.submit(t, "jobs", `{"header": `+wide+`}`)
	status, body := b.do(t, "GET", "/api/v1/submissions/"+itoa(id), token, "")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"header": `+wide+",\n", "the header as stored, compact, in the indented answer")
	require.Less(t, len(body), len(wide)+1024)
}

// TestEveryStoredValueOfTheAPISitsUnderAKeyWrittenAsStored: storedjson.Encode writes the values
// of the keys "header" and "value" as they are, and re-indents the rest; so every stored JSON
// value (a json.RawMessage) of an answer's shape must sit under one of those keys, or it would be
// re-indented.
func TestEveryStoredValueOfTheAPISitsUnderAKeyWrittenAsStored(t *testing.T) {
	t.Parallel()
	raw := reflect.TypeFor[json.RawMessage]()
	seen := map[reflect.Type]bool{}
	found := 0
	var walk func(typ reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		switch typ.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			if typ != raw {
				walk(typ.Elem(), path+"[]")
			}
			return
		case reflect.Struct:
		default:
			return
		}
		if seen[typ] {
			return
		}
		seen[typ] = true
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-" || !f.IsExported():
				continue
			case f.Anonymous && name == "":
				walk(f.Type, path)
				continue
			case name == "":
				name = f.Name
			}
			if f.Type == raw {
				found++
				require.Contains(t, []string{"header", "value"}, name, "%s.%s holds stored JSON under a key storedjson.Encode re-indents", path, name)
			}
			walk(f.Type, path+"."+name)
		}
	}
	for _, v := range []any{httpapi.TaskList{}, httpapi.TaskDetail{}, httpapi.ExecutionPage{}, httpapi.Execution{}, httpapi.SubmissionPage{},
		httpapi.SubmissionDetail{}, httpapi.SubmitResponse{}, httpapi.BlockList{}, httpapi.BlockDetail{}, httpapi.ChangePage{}} {
		walk(reflect.TypeOf(v), reflect.TypeOf(v).Name())
	}
	require.Equal(t, 3, found, "an execution's and a submission's header, a block's value")
}
