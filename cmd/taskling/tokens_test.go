package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/principals"
)

// TestTokensAddListRemove: tokens add prints a new token once and appends its principal to the
// file (mode 0600); a name the file has is refused; list shows the principals without their
// tokens; remove takes one out.
func TestTokensAddListRemove(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "principals.toml")
	code, alice, errOut := cli(t, "", "tokens", "add", "alice", "--role", "operate", "--file", file)
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, `^[A-Za-z0-9_-]{43}\n$`, alice)
	require.Contains(t, errOut, "its token, above, is not shown again")
	st, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	code, _, errOut = cli(t, "", "tokens", "add", "alice", "--role", "read", "--file", file)
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, `already has a principal "alice"`)
	code, _, errOut = cli(t, "", "tokens", "add", "bob", "--role", "admin", "--file", file)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `--role: role "admin": want read or operate`)
	code, _, errOut = cli(t, "", "tokens", "add", "bob", "--role", "read")
	require.Equal(t, exitUsage, code, errOut)
	ok(t, "", "tokens", "add", "bob", "--role", "read", "--file", file)

	list := ok(t, "", "tokens", "list", "--file", file)
	require.Regexp(t, `^NAME   ROLE     TOKEN SHA-256\nalice  operate  [0-9a-f]{12}…\nbob    read     [0-9a-f]{12}…\n$`, list)
	require.NotContains(t, list, strings.TrimSpace(alice))
	ok(t, "", "tokens", "remove", "alice", "--file", file)
	code, _, _ = cli(t, "", "tokens", "remove", "alice", "--file", file)
	require.Equal(t, exitNotFound, code)
	require.Contains(t, ok(t, "", "-o", "json", "tokens", "list", "--file", file), `"name": "bob"`)
}

// TestTokensRemoveRevokesAPrincipalWhoseHeaderHasAComment is issue 40's case end to end: list
// showed bob, whose header carries a comment, and remove said "no such principal" (exit 3)
// while his token kept working. Remove also keeps the file's mode less world bits, and says so.
func TestTokensRemoveRevokesAPrincipalWhoseHeaderHasAComment(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "principals.toml")
	ok(t, "", "tokens", "add", "alice", "--role", "operate", "--file", file)
	bob := strings.TrimSpace(ok(t, "", "tokens", "add", "bob", "--role", "read", "--file", file))
	text, err := os.ReadFile(file)
	require.NoError(t, err)
	edited := strings.Replace(string(text), "\n[[principal]]\nname = \"bob\"", "\n[[principal]]  # contractor\nname = \"bob\"", 1)
	require.NotEqual(t, string(text), edited)
	require.NoError(t, os.WriteFile(file, []byte(edited), 0o600))
	require.NoError(t, os.Chmod(file, 0o644))
	require.Contains(t, ok(t, "", "tokens", "list", "--file", file), "\nbob ")

	code, _, errOut := cli(t, "", "tokens", "remove", "bob", "--file", file)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, errOut, "was open to all users (mode 0644); it is now 0640")
	require.NotContains(t, ok(t, "", "tokens", "list", "--file", file), "bob")
	ps, err := principals.Load(file)
	require.NoError(t, err)
	_, authenticated := principals.NewSet(ps, "").Authenticate(bob)
	require.False(t, authenticated, "bob's token still works")
	st, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), st.Mode().Perm())
}
