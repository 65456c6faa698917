package httpapi

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// browserResolve is where a browser goes for a Location header of "/"+next from a page of the
// handler mounted at "/": it drops tabs and newlines and reads a backslash as a slash, as the
// URL standard says.
func browserResolve(t *testing.T, next string) *url.URL {
	t.Helper()
	loc := strings.NewReplacer("\t", "", "\n", "", "\r", "", `\`, "/").Replace("/" + next)
	base, err := url.Parse("http://dashboard.example/login")
	require.NoError(t, err)
	u, err := url.Parse(strings.TrimLeft(loc, " "))
	if err != nil {
		return base
	}
	return base.ResolveReference(u)
}

// TestSafeNextKeepsTheBrowserOnTheDashboard is issue 23 item 1: "\t//evil.example" passed, and
// the browser, which drops the tab, went to evil.example.
func TestSafeNextKeepsTheBrowserOnTheDashboard(t *testing.T) {
	t.Parallel()
	for _, next := range []string{
		"\t//evil.example", "\n//evil.example", "\r\n//evil.example", " //evil.example", "//evil.example",
		"/\\evil.example", "\\\\evil.example", "https://evil.example/", "javascript:alert(1)", "/etc", "../admin",
		"tasks/../../admin", "\u200e//evil.example", "\x00//evil.example", "\x7f//evil.example", "%09//evil.example/..", "%2F%2Fevil.example",
	} {
		require.Empty(t, safeNext(next), "%q", next)
	}
	for _, next := range []string{"tasks/app/export", "tasks/a%2Fb/c", "submissions/12", "?status=busy", "blocks/3#attempts"} {
		require.Equal(t, next, safeNext(next), "%q", next)
		require.Equal(t, "dashboard.example", browserResolve(t, safeNext(next)).Host, "%q", next)
	}
}

// FuzzSafeNext: whatever a sign-in form posts as next, the browser stays on the dashboard.
func FuzzSafeNext(f *testing.F) {
	for _, s := range []string{"\t//evil.example", "tasks/app/export", "//x", "/\\x", "a/../../b", "%2e%2e/x", "?q=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, next string) {
		got := safeNext(next)
		u := browserResolve(t, got)
		require.Equal(t, "dashboard.example", u.Host, "%q became %q", next, got)
		require.Equal(t, "http", u.Scheme)
	})
}
