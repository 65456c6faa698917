package httpapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
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
// minute from one address locks it out — 429 with Retry-After, for the form and for bearer
// tokens, the right token included — while other addresses sign in.
func TestRefusedSignInsAreLoggedAndLimited(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	b := setup(t, 1, nil)
	h, err := httpapi.New(b.client, &httpapi.Options{Token: token, Logger: zap.New(core)})
	require.NoError(t, err)
	from := func(addr, method, path, body, bearer string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.RemoteAddr = addr + ":40000"
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
	require.Equal(t, 1, logs.FilterMessage("taskling http: too many failed sign-ins; the address gets 429 for a while").Len())

	right := url.Values{"token": {token}}.Encode()
	w := from("203.0.113.9", "POST", "/login", right, "")
	require.Equal(t, http.StatusTooManyRequests, w.Code, "locked out, even with the right token")
	require.Equal(t, "60", w.Header().Get("Retry-After"))
	require.Contains(t, w.Body.String(), "Too many failed sign-ins")
	w = from("203.0.113.9", "GET", "/api/v1/tasks", "", token)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, http.StatusSeeOther, from("198.51.100.7", "POST", "/login", right, "").Code, "another address signs in")
	require.Equal(t, http.StatusOK, from("198.51.100.7", "GET", "/api/v1/tasks", "", token).Code)
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
