package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/internal/principals"
	"github.com/taskling-go/taskling/taskling"
)

// principalsFile writes a principals file of the names and roles given ("alice", "operate", …)
// and returns its path and each principal's token.
func principalsFile(t *testing.T, namesAndRoles ...string) (string, map[string]string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "principals.toml")
	tokens := map[string]string{}
	for i := 0; i < len(namesAndRoles); i += 2 {
		tok, err := principals.Add(path, namesAndRoles[i], principals.Role(namesAndRoles[i+1]))
		require.NoError(t, err)
		tokens[namesAndRoles[i]] = tok
	}
	return path, tokens
}

// TestPrincipalsHaveRolesAndTheirNameIsRecorded is issue 23 item 2: one shared token could do
// everything, and the trail's "who" was the body's free text before the client's address
// ({"by": "bob (dashboard@10.0.0.7)"} was stored as if it came from there). Now a read principal
// gets 403 on every change, a change records the principal that signed it in its own column
// (the body's by beside it, as a note), and an edit of the file takes effect within seconds.
func TestPrincipalsHaveRolesAndTheirNameIsRecorded(t *testing.T) {
	t.Parallel()
	path, tokens := principalsFile(t, "alice", "operate", "rita", "read")
	b := setup(t, 1, &httpapi.Options{Token: token, PrincipalsFile: path})
	e := b.start(t, "export")
	blocks, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 10, MaxSize: 10}, nil)
	require.NoError(t, err)
	sub, err := b.client.Submit(b.ctx, "app", "export", nil)
	require.NoError(t, err)
	const base = "/api/v1/tasks/app/export"
	changes := []struct{ method, path, body string }{
		{"PATCH", base + "/overrides", `{"concurrency_limit": 2}`},
		{"DELETE", base + "/overrides", ""},
		{"POST", base + "/retire", ""},
		{"POST", base + "/unretire", ""},
		{"POST", base + "/submissions", ""},
		{"POST", "/api/v1/submissions/" + itoa(sub) + "/cancel", ""},
		{"POST", "/api/v1/blocks/" + itoa(blocks[0].ID) + "/force", ""},
	}

	status, body := b.do(t, "GET", base, tokens["rita"], "")
	require.Equal(t, http.StatusOK, status, body)
	for _, c := range changes {
		status, body := b.do(t, c.method, c.path, tokens["rita"], c.body)
		require.Equal(t, http.StatusForbidden, status, "%s %s: %s", c.method, c.path, body)
		_, msg := apiErr(t, body)
		require.Contains(t, msg, `principal "rita" has the read role`)
	}
	require.Equal(t, 0, count(t, b, `SELECT count(*) FROM taskling.operator_change`), "nothing changed")
	status, _ = b.do(t, "GET", base, "not anyone's token", "")
	require.Equal(t, http.StatusUnauthorized, status)

	status, body = b.do(t, "PATCH", base+"/overrides", tokens["alice"], `{"concurrency_limit": 2, "by": "bob (dashboard@10.0.0.7)"}`)
	require.Equal(t, http.StatusOK, status, body)
	status, body = b.do(t, "POST", base+"/retire", token, "")
	require.Equal(t, http.StatusOK, status, body)
	var page httpapi.ChangePage
	status, body = b.do(t, "GET", base+"/changes", tokens["rita"], "")
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &page))
	require.Len(t, page.Changes, 2)
	require.Equal(t, "token", *page.Changes[0].Principal, "TASKLING_API_TOKEN is the principal token")
	require.Equal(t, "token", page.Changes[0].By)
	require.Equal(t, "alice", *page.Changes[1].Principal, "who signed the request")
	require.Equal(t, "bob (dashboard@10.0.0.7)", page.Changes[1].By, "the body's by, a note beside it")

	// Edits take effect without a restart: alice removed, rita made an operator, carol added.
	require.NoError(t, principals.Remove(path, "alice"))
	require.NoError(t, principals.Remove(path, "rita"))
	text, err := os.ReadFile(path)
	require.NoError(t, err)
	text = append(text, []byte("[[principal]]\nname = \"rita\"\nrole = \"operate\"\ntoken_sha256 = \""+principals.HashToken(tokens["rita"])+"\"\n")...)
	require.NoError(t, os.WriteFile(path, text, 0o600))
	carol, err := principals.Add(path, "carol", principals.RoleRead)
	require.NoError(t, err)
	edited := time.Now()
	require.Eventually(t, func() bool {
		status, _ := b.do(t, "GET", base, tokens["alice"], "")
		return status == http.StatusUnauthorized
	}, 5*time.Second, 50*time.Millisecond, "alice's token stops working")
	status, body = b.do(t, "POST", base+"/unretire", tokens["rita"], `{"by": "now an operator"}`)
	require.Equal(t, http.StatusOK, status, body)
	status, body = b.do(t, "GET", base, carol, "")
	require.Equal(t, http.StatusOK, status, body)
	t.Logf("the edit took effect %s after it", time.Since(edited).Round(time.Millisecond))
}

// TestTheDashboardOfAReadPrincipalOffersNoChange: signed in with a read token, the pages say so
// and show no form or button, and a change through the session gets 403.
func TestTheDashboardOfAReadPrincipalOffersNoChange(t *testing.T) {
	t.Parallel()
	path, tokens := principalsFile(t, "rita", "read")
	b := setup(t, 1, &httpapi.Options{PrincipalsFile: path})
	b.start(t, "export")
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar}
	resp, err := browser.PostForm(b.server.URL+"/login", url.Values{"token": {tokens["rita"]}, "next": {"tasks/app/export"}})
	require.NoError(t, err)
	page := readBody(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, `signed in as <span id="principal">rita</span> (read)`)
	require.Contains(t, page, `id="read-role"`)
	require.NotContains(t, page, `id="limit-form"`)
	require.NotContains(t, page, `id="sign-in-to-change"`)

	req, err := http.NewRequest("PATCH", b.server.URL+"/api/v1/tasks/app/export/overrides", strings.NewReader(`{"concurrency_limit": 3}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Taskling-Request", "1")
	resp, err = browser.Do(req)
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
}

func count(t *testing.T, b *testBundle, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, sql).Scan(&n))
	return n
}
