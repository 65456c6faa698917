package httpapi

import (
	"net/http/httptest"
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

// TestFailuresLockAnAddressOutAfterTenInAMinute: the tenth refused credential within a minute
// locks the address out for 60 s, renewed while it keeps failing; failures older than a minute do
// not count; other addresses are not affected.
func TestFailuresLockAnAddressOutAfterTenInAMinute(t *testing.T) {
	t.Parallel()
	var f failures
	t0 := time.Now()
	for i := 0; i < 9; i++ {
		v := f.fail("10.0.0.1", t0.Add(time.Duration(i)*time.Second))
		require.Equal(t, verdict{recent: i + 1}, v)
	}
	// A minute after the first, it no longer counts.
	require.Equal(t, verdict{recent: 9}, f.fail("10.0.0.1", t0.Add(time.Minute)))
	at := t0.Add(time.Minute + time.Second/2)
	require.Equal(t, verdict{recent: 10, lockedNow: true}, f.fail("10.0.0.1", at), "the tenth is answered 401 and locks")
	require.Equal(t, verdict{recent: 10, throttled: true}, f.fail("10.0.0.1", at.Add(time.Second)), "then 429")
	require.Equal(t, verdict{recent: 1}, f.fail("10.0.0.2", at), "another address")
	// The last failure renewed the lockout: 60 s from it.
	require.True(t, f.fail("10.0.0.1", at.Add(60*time.Second)).throttled)
	require.False(t, f.fail("10.0.0.1", at.Add(3*time.Minute)).throttled, "quiet for longer than the lockout")
}

// TestTheFailureTableIsBoundedAndFloodingItBypassesNothing is issue 40 item 3: once 10 000
// addresses had failures, a new address was not counted at all — an attacker with many
// addresses could guess without end. 100 000 addresses fill the table: it stays at maxTracked
// entries, evicting the least recently failed; a flood within a minute spends the server-wide
// budget, so the next wrong token, from anywhere, is answered 429 (an address locked before the
// flood, evicted, stays throttled); a slow fill spends nothing, and a new address is still
// locked out after ten.
func TestTheFailureTableIsBoundedAndFloodingItBypassesNothing(t *testing.T) {
	t.Parallel()
	const addresses = 100_000
	t0 := time.Unix(1_800_000_000, 0)

	var flood failures
	for range maxFailures {
		flood.fail("192.0.2.1", t0)
	}
	for i := range addresses {
		flood.fail("a"+strconv.Itoa(i), t0.Add(time.Duration(i)*(50*time.Second/addresses)))
	}
	require.Len(t, flood.addrs, maxTracked)
	require.Equal(t, maxTracked, flood.lru.Len())
	require.NotContains(t, flood.addrs, "a0", "the least recently failed are forgotten")
	require.Contains(t, flood.addrs, "a"+strconv.Itoa(addresses-1))
	late := t0.Add(55 * time.Second)
	require.True(t, flood.fail("new", late).throttled, "the budget is spent: a new address's first wrong token gets 429")
	require.True(t, flood.fail("192.0.2.1", late).throttled, "evicted, yet throttled")
	require.False(t, flood.fail("new", late.Add(2*time.Minute)).throttled, "a minute after the flood, the budget is back")

	var slow failures
	for i := range addresses {
		if v := slow.fail("a"+strconv.Itoa(i), t0.Add(time.Duration(i)*100*time.Millisecond)); v.throttled || v.spentNow { // 600 a minute
			t.Fatalf("address %d: %+v; the budget is not spent", i, v)
		}
	}
	require.Len(t, slow.addrs, maxTracked)
	late = t0.Add(addresses * 100 * time.Millisecond)
	for i := 1; i < maxFailures; i++ {
		require.False(t, slow.fail("new", late).throttled)
	}
	require.True(t, slow.fail("new", late).lockedNow, "counted, though the table is full")
	require.True(t, slow.fail("new", late).throttled)
}

// TestTheServerWideBudget: the 1000th refusal within a minute, from any addresses, spends the
// budget; every wrong token after it gets 429 until the refusals of the last minute fall below it.
func TestTheServerWideBudget(t *testing.T) {
	t.Parallel()
	var f failures
	t0 := time.Unix(1_800_000_000, 0)
	for i := 1; i < failureBudget; i++ {
		v := f.fail("a"+strconv.Itoa(i), t0.Add(time.Duration(i)*time.Millisecond))
		require.False(t, v.throttled || v.spentNow, "%d", i)
	}
	v := f.fail("last", t0.Add(time.Second))
	require.True(t, v.spentNow)
	require.False(t, v.throttled)
	require.True(t, f.fail("b", t0.Add(59*time.Second)).throttled)
	require.False(t, f.fail("c", t0.Add(61*time.Second)).throttled, "the first second's refusals left the window")
}

// TestTheClientAddress: the connection's peer, unless it is a trusted proxy: then X-Forwarded-For
// from the right, the first address not trusted; IPv6 counted by its /64.
func TestTheClientAddress(t *testing.T) {
	t.Parallel()
	proxies, err := trustedProxies([]string{"10.0.0.0/8", " 192.0.2.10", "fd00::/8", "::ffff:172.16.0.0/108"})
	require.NoError(t, err)
	h := &Handler{proxies: proxies}
	for _, c := range []struct {
		peer     string
		xff      []string
		addr     string
		countsAs string
	}{
		{peer: "198.51.100.7:40000", addr: "198.51.100.7", countsAs: "198.51.100.7"},
		{peer: "198.51.100.7:40000", xff: []string{"203.0.113.5"}, addr: "198.51.100.7", countsAs: "198.51.100.7"}, // not a proxy of ours: its header is ignored
		{peer: "10.1.2.3:40000", addr: "10.1.2.3", countsAs: "10.1.2.3"},                                           // a proxy without the header
		{peer: "10.1.2.3:40000", xff: []string{"203.0.113.5"}, addr: "203.0.113.5", countsAs: "203.0.113.5"},
		{peer: "10.1.2.3:40000", xff: []string{"1.1.1.1, 203.0.113.5"}, addr: "203.0.113.5", countsAs: "203.0.113.5"}, // never the leftmost
		{peer: "10.1.2.3:40000", xff: []string{"1.1.1.1, 203.0.113.5, 10.9.9.9,192.0.2.10"}, addr: "203.0.113.5", countsAs: "203.0.113.5"},
		{peer: "10.1.2.3:40000", xff: []string{"1.1.1.1", "203.0.113.5", "10.9.9.9"}, addr: "203.0.113.5", countsAs: "203.0.113.5"}, // every line
		{peer: "10.1.2.3:40000", xff: []string{"1.1.1.1, 203.0.113.5:61000"}, addr: "203.0.113.5", countsAs: "203.0.113.5"},
		{peer: "10.1.2.3:40000", xff: []string{"1.1.1.1, not-an-address, 10.9.9.9"}, addr: "10.9.9.9", countsAs: "10.9.9.9"}, // stops at the last trusted hop
		{peer: "10.1.2.3:40000", xff: []string{"10.8.8.8, 10.9.9.9"}, addr: "10.8.8.8", countsAs: "10.8.8.8"},                // all trusted: the leftmost
		{peer: "10.1.2.3:40000", xff: []string{"1.1.1.1, , 203.0.113.5 "}, addr: "203.0.113.5", countsAs: "203.0.113.5"},
		{peer: "[::ffff:172.16.0.9]:40000", xff: []string{"203.0.113.5"}, addr: "203.0.113.5", countsAs: "203.0.113.5"},
		{peer: "[fd00::1]:40000", xff: []string{"2001:db8:1:2:aaaa::7"}, addr: "2001:db8:1:2:aaaa::7", countsAs: "2001:db8:1:2::/64"},
		{peer: "[fd00::1]:40000", xff: []string{"[2001:db8:1:2::8]:61000"}, addr: "2001:db8:1:2::8", countsAs: "2001:db8:1:2::/64"},
		{peer: "[2001:db8:1:2:bbbb::9]:40000", addr: "2001:db8:1:2:bbbb::9", countsAs: "2001:db8:1:2::/64"},
		{peer: "[::ffff:198.51.100.7]:40000", addr: "198.51.100.7", countsAs: "198.51.100.7"},
		{peer: "pipe", addr: "pipe", countsAs: "pipe"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		got := h.remote(r)
		require.Equal(t, remote{addr: c.addr, key: c.countsAs}, got, "%s %q", c.peer, c.xff)
	}
	for _, bad := range []string{"", "10.0.0.0/33", "proxy.internal", "fe80::1%eth0"} {
		_, err := trustedProxies([]string{bad})
		require.ErrorContains(t, err, "Options.TrustedProxies", "%q", bad)
	}
}

// TestOriginServed: without an allowed hosts list, an Origin is the server's when it names the
// request's Host, port included (a port left out is the default of the Origin's scheme).
func TestOriginServed(t *testing.T) {
	t.Parallel()
	h := &Handler{}
	for _, c := range []struct {
		origin, host string
		served       bool
	}{
		{"http://taskling.internal", "taskling.internal", true},
		{"http://taskling.internal", "taskling.internal:80", true},
		{"http://taskling.internal:80", "taskling.internal", true},
		{"https://Taskling.Internal", "taskling.internal:443", true},
		{"http://127.0.0.1:8080", "127.0.0.1:8080", true},
		{"http://[::1]:8080", "[::1]:8080", true},
		{"http://127.0.0.1:8081", "127.0.0.1:8080", false},
		{"https://taskling.internal", "taskling.internal:80", false},
		{"http://taskling.internal", "taskling.internal:8080", false},
		{"http://evil.example", "taskling.internal", false},
		{"null", "taskling.internal", false},
		{"file://", "taskling.internal", false},
		{"http://taskling.internal/x", "taskling.internal", false},
		{"http://user@taskling.internal", "taskling.internal", false},
	} {
		require.Equal(t, c.served, h.originServed(c.origin, c.host), "%s for %s", c.origin, c.host)
	}
}
