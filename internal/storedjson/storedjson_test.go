package storedjson

import (
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
