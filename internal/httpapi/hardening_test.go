package httpapi_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/taskling-go/taskling/internal/httpapi"
)

// TestRefusedSignInsAreLoggedAndLimited is issue 23 item 4: refused sign-ins were not logged and
// not limited. Each is logged with the client's address (never the token); the tenth within a
// minute from one address locks it out — its wrong tokens get 429 with Retry-After, on the form
// and as bearer tokens — while other addresses are answered 401.
func TestRefusedSignInsAreLoggedAndLimited(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	b := setup(t, 1, nil)
	h, err := httpapi.New(b.client, &httpapi.Options{Token: token, Logger: zap.New(core)})
	require.NoError(t, err)
	from := sender(h)
	wrong := url.Values{"token": {"guess-number-one-of-many-thousand"}}.Encode()
	for i := 0; i < 5; i++ {
		require.Equal(t, http.StatusUnauthorized, from("203.0.113.9", "POST", "/login", wrong, "").Code)
		require.Equal(t, http.StatusUnauthorized, from("203.0.113.9", "GET", "/api/v1/tasks", "", "another-wrong-guess-of-32-bytes!").Code)
	}
	refused := logs.FilterMessage("taskling http: sign-in refused").All()
	require.Len(t, refused, 10)
	require.Equal(t, "203.0.113.9", refused[0].ContextMap()["remote"])
	for _, e := range logs.All() {
		for _, v := range e.ContextMap() {
			require.NotContains(t, fmt.Sprint(v), "guess", "the token is never logged")
		}
	}
	require.Equal(t, 1, logs.FilterMessage("taskling http: too many failed sign-ins; the address gets 429 for wrong tokens for a while").Len())

	w := from("203.0.113.9", "POST", "/login", wrong, "")
	require.Equal(t, http.StatusTooManyRequests, w.Code, "locked out")
	require.Equal(t, "60", w.Header().Get("Retry-After"))
	require.Contains(t, w.Body.String(), "Too many failed sign-ins")
	w = from("203.0.113.9", "GET", "/api/v1/tasks", "", "another-wrong-guess-of-32-bytes!")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Len(t, logs.FilterMessage("taskling http: sign-in refused").All(), 10, "while locked out, refusals are not logged one by one")
	require.Equal(t, http.StatusUnauthorized, from("198.51.100.7", "POST", "/login", wrong, "").Code, "another address is not locked out")
}

// TestARightCredentialPassesAnAddressLockedOut is issue 40 item 3: after 10 wrong bearer tokens
// from an address, every request from it got 429 — a valid operator's token, the sign-in form,
// Prometheus's scrape of /metrics — for as long as one client behind the same proxy or NAT kept
// failing. Only wrong credentials are throttled now; the sign-in form stays reachable.
func TestARightCredentialPassesAnAddressLockedOut(t *testing.T) {
	t.Parallel()
	h := protected(t)
	from := sender(h)
	for range 12 {
		from("203.0.113.9", "GET", "/api/v1/tasks", "", "a-script-with-an-old-token-of-32-bytes")
	}
	require.Equal(t, http.StatusTooManyRequests, from("203.0.113.9", "GET", "/api/v1/tasks", "", "a-script-with-an-old-token-of-32-bytes").Code)
	require.Equal(t, http.StatusOK, from("203.0.113.9", "GET", "/api/v1/tasks", "", token).Code, "the operator's token")
	require.Equal(t, http.StatusOK, from("203.0.113.9", "GET", "/metrics", "", token).Code, "Prometheus")
	require.Equal(t, http.StatusOK, from("203.0.113.9", "GET", "/login", "", "").Code, "the sign-in form")
	require.Equal(t, http.StatusUnauthorized, from("203.0.113.9", "GET", "/metrics", "", "").Code, "no credential: 401, not 429")
	w := from("203.0.113.9", "POST", "/login", url.Values{"token": {token}}.Encode(), "")
	require.Equal(t, http.StatusSeeOther, w.Code, "signing in with the right token")
	session := w.Result().Cookies()[0]
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "203.0.113.9:40000"
	req.AddCookie(session)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, "the session")
}

// TestFloodingTheFailureTableLetsNoAddressGuessFreely is issue 40 item 3: once 10 000 addresses
// had a failure, a new address's wrong tokens were not counted, so an attacker with many
// addresses could guess without limit. After a flood from 12 000 addresses (more than the table
// holds), a new address's wrong tokens get 429 (the server-wide budget is spent); its right
// token still passes.
func TestFloodingTheFailureTableLetsNoAddressGuessFreely(t *testing.T) {
	t.Parallel()
	h := protected(t)
	from := sender(h)
	const wrong = "a-guess-that-is-not-the-token-of-32-bytes"
	for i := range 12_000 {
		from(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String(), "GET", "/api/v1/tasks", "", wrong)
	}
	tries := 0
	for ; tries < 100 && from("198.51.100.7", "GET", "/api/v1/tasks", "", wrong).Code == http.StatusUnauthorized; tries++ {
	}
	require.Less(t, tries, maxFailures, "a new address's wrong tokens are throttled")
	require.Equal(t, http.StatusOK, from("198.51.100.7", "GET", "/api/v1/tasks", "", token).Code)
}

// maxFailures is the handler's number of wrong tokens from one address that lock it out.
const maxFailures = 10

// TestTrustedProxiesNameTheClient is issue 40 item 3: behind a proxy every client had the proxy's
// address, so one client's wrong tokens locked out everyone behind it. With TrustedProxies, the
// client is read from X-Forwarded-For, right to left — never the leftmost entry a client may
// have written itself — and an IPv6 client is counted by its /64.
func TestTrustedProxiesNameTheClient(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	b := setup(t, 1, nil)
	h, err := httpapi.New(b.client, &httpapi.Options{Token: token, TrustedProxies: []string{"10.0.0.0/8"}, Logger: zap.New(core)})
	require.NoError(t, err)
	const wrong = "a-guess-that-is-not-the-token-of-32-bytes"
	via := func(peer, xff, bearer string) int {
		req := httptest.NewRequest("GET", "/api/v1/tasks", nil)
		req.RemoteAddr = peer
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		req.Header.Set("Authorization", "Bearer "+bearer)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	// A guesser behind the proxy writes a new leftmost address each time.
	for i := range maxFailures {
		require.Equal(t, http.StatusUnauthorized, via("10.0.0.5:40000", fmt.Sprintf("192.0.2.%d, 198.51.100.7", i), wrong))
	}
	require.Equal(t, http.StatusTooManyRequests, via("10.0.0.5:40000", "192.0.2.200, 198.51.100.7", wrong), "counted by the address the proxy saw")
	require.Equal(t, "198.51.100.7", logs.FilterMessage("taskling http: sign-in refused").All()[0].ContextMap()["remote"])
	require.Equal(t, http.StatusUnauthorized, via("10.0.0.5:40000", "203.0.113.5", wrong), "another client of the same proxy is not locked out")
	require.Equal(t, http.StatusUnauthorized, via("10.0.0.5:40000", "198.51.100.7, 203.0.113.5", wrong), "nor one that names the guesser leftmost")
	// A client that is no proxy of ours cannot name another address.
	for range maxFailures {
		via("192.0.2.50:40000", "203.0.113.77", wrong)
	}
	require.Equal(t, http.StatusUnauthorized, via("10.0.0.5:40000", "203.0.113.77", wrong))
	require.Equal(t, http.StatusTooManyRequests, via("192.0.2.50:40000", "203.0.113.78", wrong))
	// IPv6: one /64, whatever the address in it.
	for i := range maxFailures {
		via(fmt.Sprintf("[2001:db8:1:2::%x]:40000", i+1), "", wrong)
	}
	require.Equal(t, http.StatusTooManyRequests, via("[2001:db8:1:2:ffff::1]:40000", "", wrong))
	require.Equal(t, http.StatusUnauthorized, via("[2001:db8:1:3::1]:40000", "", wrong))

	_, err = httpapi.New(b.client, &httpapi.Options{TrustedProxies: []string{"proxy.internal"}})
	require.ErrorContains(t, err, `Options.TrustedProxies: "proxy.internal" is not a CIDR range`)
}

// protected returns a handler whose every request needs the token, on a database of its own.
func protected(t *testing.T) http.Handler {
	t.Helper()
	b := setup(t, 1, nil)
	h, err := httpapi.New(b.client, &httpapi.Options{Token: token})
	require.NoError(t, err)
	return h
}

// sender sends requests to h as from an address: a form body, a bearer token, or neither.
func sender(h http.Handler) func(addr, method, path, body, bearer string) *httptest.ResponseRecorder {
	return func(addr, method, path, body, bearer string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.RemoteAddr = net.JoinHostPort(addr, "40000")
		if body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
}

// TestTheHostCheckAppliesToEveryRequest: a request naming a host not allowed gets 421, with a
// token or without, on a read-only server too (where every read is public: DNS rebinding).
func TestTheHostCheckAppliesToEveryRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, &httpapi.Options{AllowedHosts: []string{"taskling.internal", "127.0.0.1", "::1"}})
	b.start(t, "export")
	get := func(host, path string) int {
		req, err := http.NewRequest("GET", b.server.URL+path, nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := b.server.Client().Do(req)
		require.NoError(t, err)
		body := readBody(t, resp)
		if resp.StatusCode == http.StatusMisdirectedRequest {
			field, _ := apiErr(t, body)
			require.Equal(t, "Host", field)
		}
		return resp.StatusCode
	}
	for _, host := range []string{"taskling.internal", "TASKLING.internal.:8080", "127.0.0.1:1", "[::1]:8080"} {
		require.Equal(t, http.StatusOK, get(host, "/api/v1/tasks"), host)
	}
	for _, host := range []string{"rebind.evil.example", "rebind.evil.example:8080", "localhost", "taskling.internal.evil.example"} {
		for _, path := range []string{"/api/v1/tasks", "/", "/metrics", "/static/dashboard.css", "/login"} {
			require.Equal(t, http.StatusMisdirectedRequest, get(host, path), "%s %s", host, path)
		}
	}
	_, err := httpapi.New(b.client, &httpapi.Options{AllowedHosts: []string{"a/b"}})
	require.ErrorContains(t, err, "AllowedHosts")
	open, err := httpapi.New(b.client, &httpapi.Options{AllowedHosts: []string{"*"}})
	require.NoError(t, err)
	w := httptest.NewRecorder()
	open.ServeHTTP(w, httptest.NewRequest("GET", "http://whatever.example/api/v1/tasks", nil))
	require.Equal(t, http.StatusOK, w.Code)
}
