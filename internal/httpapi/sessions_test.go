package httpapi_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/internal/principals"
	"github.com/taskling-go/taskling/taskling"
)

// signIn posts token to the sign-in form of srv and returns the session cookie's value.
func signIn(t *testing.T, srv *httptest.Server, token string) string {
	t.Helper()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.PostForm(srv.URL+"/login", url.Values{"token": {token}})
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	for _, c := range resp.Cookies() {
		if c.Name == "taskling_session" {
			return c.Value
		}
	}
	t.Fatal("no session cookie")
	return ""
}

// withCookie sends a GET of path to srv with the session cookie value and returns the status.
func withCookie(t *testing.T, srv *httptest.Server, path, session string) int {
	t.Helper()
	req, err := http.NewRequest("GET", srv.URL+path, nil)
	require.NoError(t, err)
	req.AddCookie(&http.Cookie{Name: "taskling_session", Value: session})
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	readBody(t, resp)
	return resp.StatusCode
}

// TestSessionsAreRandomSharedAndRevocable is issue 23 item 3: the session cookie was a fixed
// HMAC of the token — the same for every browser, still valid after signing out. Now each
// sign-in gets a random id, stored hashed in a table that every replica reads: signing out on
// one replica ends it on all, and expiry, the removal of the principal and a new token for it
// end it too.
func TestSessionsAreRandomSharedAndRevocable(t *testing.T) {
	t.Parallel()
	path, tokens := principalsFile(t, "alice", "operate", "bob", "operate")
	a := setup(t, 1, &httpapi.Options{Token: token, PrincipalsFile: path})
	// A second replica: another handler on the same database.
	hb, err := httpapi.New(a.client, &httpapi.Options{Token: token, PrincipalsFile: path})
	require.NoError(t, err)
	b := httptest.NewServer(hb)
	t.Cleanup(b.Close)

	first, second := signIn(t, a.server, token), signIn(t, a.server, token)
	require.NotEqual(t, first, second, "each sign-in its own session")
	require.Len(t, first, 43, "32 random bytes")
	sum := sha256.Sum256([]byte(first))
	require.Equal(t, 1, count(t, a, `SELECT count(*) FROM taskling.api_session WHERE id_sha256 = '\x`+hex.EncodeToString(sum[:])+`'
        AND principal = 'token' AND expires_at BETWEEN now() + interval '11 hours 59 minutes' AND now() + interval '12 hours'`),
		"stored as its SHA-256 (the id itself nowhere), for 12 hours")

	require.Equal(t, http.StatusOK, withCookie(t, b, "/", first), "the other replica knows it")
	// Signing out on the other replica: a copy of the cookie (kept by whoever stole it) is dead
	// on both; the other browser's session lives on.
	req, err := http.NewRequest("POST", b.URL+"/logout", nil)
	require.NoError(t, err)
	req.AddCookie(&http.Cookie{Name: "taskling_session", Value: first})
	resp, err := b.Client().Do(req)
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusUnauthorized, withCookie(t, a.server, "/", first), "signed out, on every replica")
	require.Equal(t, http.StatusUnauthorized, withCookie(t, b, "/", first))
	require.Equal(t, http.StatusOK, withCookie(t, a.server, "/", second))

	// Expiry.
	_, err = a.pool.Exec(a.ctx, `UPDATE taskling.api_session SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, withCookie(t, a.server, "/", second), "expired")
	signIn(t, a.server, token)
	require.Equal(t, 1, count(t, a, `SELECT count(*) FROM taskling.api_session`), "a sign-in deletes the expired sessions")

	// The principal's removal, and a new token for a name, end their sessions.
	alice, bob := signIn(t, a.server, tokens["alice"]), signIn(t, a.server, tokens["bob"])
	require.Equal(t, http.StatusOK, withCookie(t, b, "/", alice))
	require.NoError(t, principals.Remove(path, "alice"))
	require.NoError(t, principals.Remove(path, "bob"))
	_, err = principals.Add(path, "bob", principals.RoleOperate)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return withCookie(t, b, "/", alice) == http.StatusUnauthorized && withCookie(t, a.server, "/", bob) == http.StatusUnauthorized
	}, 5*time.Second, 50*time.Millisecond, "removed, or given a new token: signed out")
	require.Equal(t, 0, count(t, a, `SELECT count(*) FROM taskling.api_session WHERE principal IN ('alice', 'bob')`), "their rows are gone")
	require.Equal(t, 1, count(t, a, `SELECT count(*) FROM taskling.api_session`), "the token's session lives on")
}

// TestASignInPastTheCapEndsTheOldestSession is issue 40 item 9: every sign-in added a session
// row, without bound. A principal keeps at most taskling.MaxAPISessionsPerPrincipal (20): the
// 21st sign-in ends the oldest, and another principal's sessions are untouched.
func TestASignInPastTheCapEndsTheOldestSession(t *testing.T) {
	t.Parallel()
	path, tokens := principalsFile(t, "alice", "operate")
	b := setup(t, 1, &httpapi.Options{Token: token, PrincipalsFile: path})
	alice := signIn(t, b.server, tokens["alice"])
	sessions := make([]string, taskling.MaxAPISessionsPerPrincipal+1)
	for i := range sessions {
		sessions[i] = signIn(t, b.server, token)
	}
	require.Equal(t, http.StatusUnauthorized, withCookie(t, b.server, "/", sessions[0]), "the oldest ended")
	for _, s := range sessions[1:] {
		require.Equal(t, http.StatusOK, withCookie(t, b.server, "/", s))
	}
	require.Equal(t, http.StatusOK, withCookie(t, b.server, "/", alice), "another principal's session")
	require.Equal(t, taskling.MaxAPISessionsPerPrincipal, count(t, b, `SELECT count(*) FROM taskling.api_session WHERE principal = 'token'`))
}
