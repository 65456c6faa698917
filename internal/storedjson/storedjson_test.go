package storedjson

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestDepthCountsNestingOutsideStrings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		json string
		want int
	}{
		{`1`, 0},
		{`"[[[{{{"`, 0},
		{`[]`, 1},
		{`{"a": 1}`, 1},
		{`[[1], [2, [3]]]`, 3},
		{`{"a": {"b": [{"c": "]]]}}}"}]}}`, 4},
		{`["\"[[", "\\", [["\\\"]"]]]`, 3},
		{`[1] [[2]]`, 2},
		{strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000), 100_000},
	} {
		require.Equal(t, c.want, Depth([]byte(c.json)), c.json)
	}
}

// TestDepthAgreesWithTheNesting: Depth of a value nested n deep, built of arrays and objects
// with strings full of brackets, quotes and backslashes, is n.
func TestDepthAgreesWithTheNesting(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 80).Draw(t, "n")
		var v any = rapid.StringMatching(`[\[\]{}"\\a]*`).Draw(t, "leaf")
		for i := range n {
			if rapid.Bool().Draw(t, "object") {
				v = map[string]any{rapid.StringMatching(`[\[{"\\]*`).Draw(t, "key"): v, "x": i}
			} else {
				v = []any{"[", v, "]"}
			}
		}
		b, err := json.Marshal(v)
		require.NoError(t, err)
		require.Equal(t, n, Depth(b), string(b))
	})
}

// TestEncodeIndentsTheEnvelopeAsMarshalIndentDoes: with no stored key, Encode writes what
// json.MarshalIndent writes (without HTML escaping).
func TestEncodeIndentsTheEnvelopeAsMarshalIndentDoes(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		v := envelope(t, 4)
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		require.NoError(t, enc.Encode(v))
		var got bytes.Buffer
		require.NoError(t, Encode(&got, v))
		require.Equal(t, want.String(), got.String())
	})
}

// envelope draws a JSON value with no key "header" or "value".
func envelope(t *rapid.T, depth int) any {
	kind := rapid.IntRange(0, 5).Draw(t, "kind")
	if depth == 0 {
		kind %= 3
	}
	switch kind {
	case 0:
		return rapid.StringMatching(`[a-z<>&"\\:,\[\]{} \n]*`).Draw(t, "string")
	case 1:
		return rapid.Int().Draw(t, "int")
	case 2:
		return rapid.SampledFrom([]any{nil, true, false}).Draw(t, "literal")
	case 3, 4:
		n := rapid.IntRange(0, 3).Draw(t, "len")
		a := make([]any, n)
		for i := range a {
			a[i] = envelope(t, depth-1)
		}
		return a
	}
	m := map[string]any{}
	for range rapid.IntRange(0, 3).Draw(t, "fields") {
		m[rapid.StringMatching(`[a-z":{]{0,4}`).Draw(t, "key")] = envelope(t, depth-1)
	}
	return m
}

// TestEncodeWritesStoredValuesAsStored: a stored value nested 9 000 deep, or full of <, > and
// &, is written compact and unescaped under the indented envelope, however deep it sits in it.
func TestEncodeWritesStoredValuesAsStored(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", 9000) + strings.Repeat("]", 9000)
	html := `{"a": "<script>&amp;</script>", "b": [1, 2, {"header": [3, 4]}]}`
	type block struct {
		ID    int             `json:"id"`
		Value json.RawMessage `json:"value"`
	}
	v := map[string]any{
		"executions": []any{map[string]any{"id": 1, "header": json.RawMessage(deep), "note": "<b>"}},
		"blocks":     []block{{1, json.RawMessage(html)}, {2, json.RawMessage(`7`)}, {3, nil}},
		"header":     json.RawMessage(`"top"`),
	}
	var got bytes.Buffer
	require.NoError(t, Encode(&got, v))
	want := `{
  "blocks": [
    {
      "id": 1,
      "value": {"a":"<script>&amp;</script>","b":[1,2,{"header":[3,4]}]}
    },
    {
      "id": 2,
      "value": 7
    },
    {
      "id": 3,
      "value": null
    }
  ],
  "executions": [
    {
      "header": ` + deep + `,
      "id": 1,
      "note": "<b>"
    }
  ],
  "header": "top"
}
`
	require.Equal(t, want, got.String())
	require.Less(t, got.Len(), len(deep)+len(html)+300)
}

func TestEncodeReturnsMarshalErrors(t *testing.T) {
	t.Parallel()
	require.Error(t, Encode(new(bytes.Buffer), map[string]any{"f": func() {}}))
	require.Error(t, Encode(new(bytes.Buffer), map[string]any{"header": json.RawMessage(`{`)}))
}
