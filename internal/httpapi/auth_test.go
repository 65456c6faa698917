package httpapi_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// mounted serves the handler under /taskling/ of a larger server, as the README shows.
func mounted(t *testing.T) (*httptest.Server, *taskling.Client) {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "test-host", Defaults: fast})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	h, err := httpapi.New(client, &httpapi.Options{Token: token, BasePath: "/taskling/"})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/taskling/", http.StripPrefix("/taskling", h))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "the host application") })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, client
}

// TestBrowserSessionIsAServerSetHttpOnlyCookieScopedToTheMountPath is issue 15 item 7: the token
// lived in localStorage and a script-set cookie with path=/, and a base64 token with "+", "/" or
// "=" could never sign in (the cookie was compared without decoding).
func TestBrowserSessionIsAServerSetHttpOnlyCookieScopedToTheMountPath(t *testing.T) {
	t.Parallel()
	srv, client := mounted(t)
	_, err := client.StartExecution(t.Context(), "app", "export", nil)
	require.NoError(t, err)

	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	resp, err := browser.Get(srv.URL + "/taskling/tasks/app/export")
	require.NoError(t, err)
	page := readBody(t, resp)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, page, `name="next" value="tasks/app/export"`)

	resp, err = browser.PostForm(srv.URL+"/taskling/login", url.Values{"token": {"wrong"}, "next": {"tasks/app/export"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, readBody(t, resp), "That is not the token of any principal")

	resp, err = browser.PostForm(srv.URL+"/taskling/login", url.Values{"token": {token}, "next": {"tasks/app/export"}})
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/taskling/tasks/app/export", resp.Header.Get("Location"), "back where the browser was, under the mount path")
	set := resp.Header.Get("Set-Cookie")
	require.Contains(t, set, "HttpOnly")
	require.Contains(t, set, "SameSite=Strict")
	require.Contains(t, set, "Path=/taskling/")
	require.NotContains(t, set, "Secure", "plain HTTP")
	require.NotContains(t, set, url.QueryEscape(token))
	require.NotContains(t, set, token, "the cookie never holds the token")

	resp, err = browser.Get(srv.URL + "/taskling/tasks/app/export")
	require.NoError(t, err)
	page = readBody(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, "signed in")
	require.Contains(t, page, `id="limit-form"`)
	require.NotContains(t, page, token)

	// The session reads the API too; a change needs the dashboard's header besides the cookie.
	patch := func(extra map[string]string) int {
		req, err := http.NewRequestWithContext(t.Context(), "PATCH", srv.URL+"/taskling/api/v1/tasks/app/export/overrides", strings.NewReader(`{"concurrency_limit": 3}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		for k, v := range extra {
			req.Header.Set(k, v)
		}
		resp, err := browser.Do(req)
		require.NoError(t, err)
		readBody(t, resp)
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, patch(nil), "a cross-site form can send the cookie's request but not the header")
	require.Equal(t, http.StatusOK, patch(map[string]string{"X-Taskling-Request": "1"}))
	changes, err := client.TaskChanges(t.Context(), "app", "export", nil)
	require.NoError(t, err)
	require.Len(t, changes.Changes, 1)
	require.Equal(t, "token", changes.Changes[0].Principal, "a change through the session is its principal's")

	// Behind TLS the cookie is Secure.
	req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/taskling/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-Proto", "https")
	resp, err = browser.Do(req)
	require.NoError(t, err)
	readBody(t, resp)
	require.Contains(t, resp.Header.Get("Set-Cookie"), "Secure")

	// Signing out ends the session.
	resp, err = browser.PostForm(srv.URL+"/taskling/logout", nil)
	require.NoError(t, err)
	readBody(t, resp)
	resp, err = browser.Get(srv.URL + "/taskling/")
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestSignInRedirectsStayInsideTheHandler(t *testing.T) {
	t.Parallel()
	srv, _ := mounted(t)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, next := range []string{"//evil.example", "https://evil.example/", "/etc", "../admin", `\\evil`, "\t//evil.example", "\n//evil.example"} {
		resp, err := noFollow.PostForm(srv.URL+"/taskling/login", url.Values{"token": {token}, "next": {next}})
		require.NoError(t, err)
		readBody(t, resp)
		require.Equal(t, "/taskling/", resp.Header.Get("Location"), next)
	}
}

// TestServeHardening is issue 15 item 9: trailing data after the JSON body was accepted, the
// Content-Type of changes was not checked, any token length was accepted, and a request's
// database work had no deadline.
func TestServeHardening(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	b.start(t, "export")
	const path = "/api/v1/tasks/app/export/overrides"
	status, body := b.do(t, "PATCH", path, token, `{"enabled":false} junk`)
	require.Equal(t, http.StatusBadRequest, status, body)
	require.Contains(t, body, "trailing data")
	status, body = b.do(t, "PATCH", path, token, `{"enabled":false}}`)
	require.Equal(t, http.StatusBadRequest, status, body)
	var task httpapi.Task
	b.getJSON(t, "/api/v1/tasks/app/export", &task)
	require.Nil(t, task.Enabled, "nothing was changed")

	req, err := http.NewRequestWithContext(b.ctx, "PATCH", b.server.URL+path, strings.NewReader(`{"enabled":false}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "text/plain")
	resp, err := b.server.Client().Do(req)
	require.NoError(t, err)
	body = readBody(t, resp)
	require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, body)
	field, _ := apiErr(t, body)
	require.Equal(t, "Content-Type", field)

	_, err = httpapi.New(b.client, &httpapi.Options{Token: "short-token"})
	require.ErrorContains(t, err, "Options.Token is 11 bytes; want at least 32")
	_, err = httpapi.New(b.client, &httpapi.Options{BasePath: "taskling"})
	require.ErrorContains(t, err, "Options.BasePath")

	slow := setup(t, 1, &httpapi.Options{RequestTimeout: time.Nanosecond})
	status, body = slow.do(t, "GET", "/api/v1/tasks", "", "")
	require.Equal(t, http.StatusServiceUnavailable, status, body)
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// TestPagesOfAnotherSiteCannotSignInSignOutOrChange is issue 40 item 6: a page on another origin
// auto-posting a token to /login signed the victim's browser in as the attacker, and one posting
// to /logout signed it out. /login, /logout and every change made with the session cookie are
// refused (403) when the browser says they come from another site — Sec-Fetch-Site other than
// same-origin or none, or an Origin that is not a served host — while scripts with a bearer
// token, which send neither header, are not.
func TestPagesOfAnotherSiteCannotSignInSignOutOrChange(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, &httpapi.Options{Token: token})
	b.start(t, "export")
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path, session string, headers map[string]string) *http.Response {
		req, err := http.NewRequest("POST", b.server.URL+path, strings.NewReader(url.Values{"token": {token}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if session != "" {
			req.AddCookie(&http.Cookie{Name: "taskling_session", Value: session})
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := noFollow.Do(req)
		require.NoError(t, err)
		return resp
	}
	foreign := []map[string]string{
		{"Origin": "http://evil.example"},
		{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "same-site"}, // another origin of the same site
		{"Origin": b.server.URL + "0"},  // the same host, another port
		{"Origin": "null"},              // a sandboxed page
	}
	for _, hs := range foreign {
		resp := post("/login", "", hs)
		page := readBody(t, resp)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%v", hs)
		require.Empty(t, resp.Cookies(), "%v: no session", hs)
		require.Contains(t, page, "sent by a page of another site", "%v", hs)
	}
	own := map[string]string{"Origin": b.server.URL, "Sec-Fetch-Site": "same-origin"}
	resp := post("/login", "", own)
	readBody(t, resp)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "the dashboard's own form")
	session := resp.Cookies()[0].Value
	resp = post("/login", "", nil)
	readBody(t, resp)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "a client that sends neither header")

	for _, hs := range foreign {
		resp := post("/logout", session, hs)
		page := readBody(t, resp)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%v", hs)
		require.Empty(t, resp.Cookies(), "%v: the cookie is not cleared", hs)
		require.Contains(t, page, "you are still signed in")
		require.Equal(t, http.StatusOK, withCookie(t, b.server, "/", session), "%v: still signed in", hs)
	}

	patch := func(session, bearer string, headers map[string]string) (int, string) {
		req, err := http.NewRequest("PATCH", b.server.URL+"/api/v1/tasks/app/export/overrides", strings.NewReader(`{"concurrency_limit": 2}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if session != "" {
			req.AddCookie(&http.Cookie{Name: "taskling_session", Value: session})
			req.Header.Set("X-Taskling-Request", "1")
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := b.server.Client().Do(req)
		require.NoError(t, err)
		return resp.StatusCode, readBody(t, resp)
	}
	for _, hs := range foreign {
		status, body := patch(session, "", hs)
		require.Equal(t, http.StatusForbidden, status, "%v: %s", hs, body)
		field, msg := apiErr(t, body)
		require.Contains(t, []string{"Origin", "Sec-Fetch-Site"}, field)
		require.Contains(t, msg, "another site")
	}
	changes, err := b.client.TaskChanges(b.ctx, "app", "export", nil)
	require.NoError(t, err)
	require.Empty(t, changes.Changes, "nothing was changed")
	status, body := patch(session, "", own)
	require.Equal(t, http.StatusOK, status, body)
	status, body = patch("", token, nil)
	require.Equal(t, http.StatusOK, status, "a script with a bearer token: %s", body)

	resp = post("/logout", session, own)
	readBody(t, resp)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, http.StatusUnauthorized, withCookie(t, b.server, "/", session), "signed out by the dashboard's own button")
}

// TestOriginsOfTheAllowedHosts: with AllowedHosts, an Origin naming one of them is the server's
// own, ports ignored as in the Host check — a TLS-terminating proxy's public name among them —
// and any other is refused.
func TestOriginsOfTheAllowedHosts(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, &httpapi.Options{Token: token, AllowedHosts: []string{"127.0.0.1", "taskling.example.com"}})
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := func(origin string) int {
		req, err := http.NewRequest("POST", b.server.URL+"/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		resp, err := noFollow.Do(req)
		require.NoError(t, err)
		readBody(t, resp)
		return resp.StatusCode
	}
	require.Equal(t, http.StatusSeeOther, login("https://taskling.example.com"), "the proxy's public name")
	require.Equal(t, http.StatusSeeOther, login(b.server.URL))
	require.Equal(t, http.StatusForbidden, login("https://evil.example"))
	require.Equal(t, http.StatusForbidden, login("https://taskling.example.com.evil.example"))
}
