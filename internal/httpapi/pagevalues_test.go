package httpapi_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
)

// TestClipKeepsWhatFitsTheBudget: Clip keeps text whose written size fits, else the longest
// beginning that fits with its "…", never splitting a character.
func TestClipKeepsWhatFitsTheBudget(t *testing.T) {
	t.Parallel()
	lt := func(r rune, size int) int {
		if r == '<' {
			return 4
		}
		return size
	}
	for _, c := range []struct {
		s      string
		budget int
		want   string
	}{
		{"", 0, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "…"},
		{"abcdefgh", 6, "abc…"},
		{"<<<", 12, "<<<"},
		{"<<<", 11, "<<…"},
		{"<<<", 10, "<…"},
		{"ab<<<", 12, "ab<…"},
		{"ééééé", 8, "éé…"},
		{"\xff\xfeabc", 5, "\xff\xfeabc"},
	} {
		got := httpapi.Clip(c.s, c.budget, lt)
		require.Equal(t, c.want, got, "%q in %d", c.s, c.budget)
	}
}
