package httpapi

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

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

// TestFailuresLockAnAddressOutAfterTenInAMinute: the tenth refused sign-in within a minute locks
// the address out for 60 s; failures older than a minute do not count; other addresses are not
// affected.
func TestFailuresLockAnAddressOutAfterTenInAMinute(t *testing.T) {
	t.Parallel()
	var f failures
	t0 := time.Now()
	for i := 0; i < 9; i++ {
		n, locked := f.fail("10.0.0.1", t0.Add(time.Duration(i)*time.Second))
		require.Equal(t, i+1, n)
		require.False(t, locked)
	}
	// A minute after the first, it no longer counts.
	n, locked := f.fail("10.0.0.1", t0.Add(time.Minute))
	require.Equal(t, 9, n)
	require.False(t, locked)
	at := t0.Add(time.Minute + time.Second/2)
	n, locked = f.fail("10.0.0.1", at)
	require.Equal(t, 10, n)
	require.True(t, locked)
	require.True(t, f.locked("10.0.0.1", at.Add(59*time.Second)))
	require.False(t, f.locked("10.0.0.1", at.Add(60*time.Second)), "for 60 s")
	require.False(t, f.locked("10.0.0.2", at))

	// Memory is bounded: past maxTracked addresses, the quiet ones are forgotten.
	for i := range maxTracked {
		f.fail("a"+strconv.Itoa(i), at)
	}
	require.Len(t, f.addrs, maxTracked, "full: a new address is not counted while every one has a recent failure")
	f.fail("late", at.Add(2*time.Minute))
	require.Len(t, f.addrs, 1, "past their window and lock, the others are forgotten")
}
