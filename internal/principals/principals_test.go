package principals

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const aliceHash = "4d63559a10572d247b6d2d666f8f776c2610b47d33255a6d136746d76f8d970d" // sha256("alice's token")

func TestParseRefusesWhatIsNotAPrincipal(t *testing.T) {
	t.Parallel()
	ps, err := Parse([]byte("# ops\n[[principal]]\nname = \"alice\"\nrole = \"operate\"\ntoken_sha256 = \"" + aliceHash + "\"\n"))
	require.NoError(t, err)
	require.Equal(t, []Principal{{Name: "alice", Role: RoleOperate, TokenSHA256: aliceHash}}, ps)
	require.Equal(t, aliceHash, HashToken("alice's token"))

	for text, want := range map[string]string{
		`[[principal]]` + "\nname = \"al ice\"\nrole = \"read\"\ntoken_sha256 = \"" + aliceHash + "\"":                                                                                "principal 1: principal name \"al ice\"",
		`[[principal]]` + "\nname = \"token\"\nrole = \"read\"\ntoken_sha256 = \"" + aliceHash + "\"":                                                                                 "single API token",
		`[[principal]]` + "\nname = \"alice\"\nrole = \"admin\"\ntoken_sha256 = \"" + aliceHash + "\"":                                                                                `principal "alice": role "admin"`,
		`[[principal]]` + "\nname = \"alice\"\nrole = \"read\"\ntoken_sha256 = \"abc\"":                                                                                               "64 lowercase hex digits",
		`[[principal]]` + "\nname = \"alice\"\nrole = \"read\"\ntoken = \"x\"":                                                                                                        `unknown key "principal.token"`,
		`[[principal]]` + "\nname = \"alice\"\nrole = \"read\"\ntoken_sha256 = \"" + strings.ToUpper(aliceHash) + "\"":                                                                "lowercase",
		"[[principal]]\nname = \"a\"\nrole = \"read\"\ntoken_sha256 = \"" + aliceHash + "\"\n[[principal]]\nname = \"a\"\nrole = \"read\"\ntoken_sha256 = \"" + HashToken("x") + "\"": "appears twice",
		"[[principal]]\nname = \"a\"\nrole = \"read\"\ntoken_sha256 = \"" + aliceHash + "\"\n[[principal]]\nname = \"b\"\nrole = \"read\"\ntoken_sha256 = \"" + aliceHash + "\"":      "token of another principal",
		"[[principal]\n": "line 2: expected end of table array",
		"[[principal]]\nname = \"alice\"\nrole = \"read\"\ntoken_sha256 = \"" + aliceHash + "\"\n[[Principal]]\nname = \"bob\"\nrole = \"read\"\ntoken_sha256 = \"" + HashToken("x") + "\"": `key "Principal": keys are lowercase`,
		"[[principal]]\nname = \"alice\"\nName = \"bob\"\nrole = \"read\"\ntoken_sha256 = \"" + aliceHash + "\"":                                                                            `key "principal.Name": keys are lowercase`,
	} {
		_, err := Parse([]byte(text))
		require.ErrorIs(t, err, ErrMalformed, text)
		require.ErrorContains(t, err, want, text)
	}
}

// TestAddAndRemoveKeepTheRestOfTheFile: tokens add appends a table with a fresh token's hash to
// the file (created with mode 0600, kept as it was otherwise) and refuses a name it has; remove
// takes out that one table.
func TestAddAndRemoveKeepTheRestOfTheFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "principals.toml")
	alice, err := Add(path, "alice", RoleOperate)
	require.NoError(t, err)
	require.Len(t, alice, 43, "32 bytes, base64url without padding")
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	text, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, append([]byte("# who may use the dashboard\n"), text...), 0o644))
	bob, err := Add(path, "bob", RoleRead)
	require.NoError(t, err)
	require.NotEqual(t, alice, bob)
	_, err = Add(path, "bob", RoleOperate)
	require.ErrorContains(t, err, `already has a principal "bob"`)
	_, err = Add(path, "carol", "admin")
	require.ErrorContains(t, err, `role "admin"`)
	st, err = os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "rewritten 0600")

	ps, err := Load(path)
	require.NoError(t, err)
	set := NewSet(ps, "")
	p, ok := set.Authenticate(alice)
	require.True(t, ok)
	require.Equal(t, "alice", p.Name)
	p, ok = set.Authenticate(bob)
	require.True(t, ok)
	require.Equal(t, RoleRead, p.Role)
	_, ok = set.Authenticate(alice + "x")
	require.False(t, ok)

	require.NoError(t, Remove(path, "alice"))
	require.ErrorIs(t, Remove(path, "alice"), ErrNotFound)
	text, err = os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(text), "# who may use the dashboard\n[[principal]]\nname = \"bob\""), "%s", text)
	ps, err = Load(path)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left")
}

// TestSourceRereadsTheFile: an edit is seen at the first look a CheckInterval after the last; a
// principal removed or given a new token is gone; an invalid file leaves only the single
// token's principal, and ends no session.
func TestSourceRereadsTheFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "principals.toml")
	alice, err := Add(path, "alice", RoleOperate)
	require.NoError(t, err)
	s, err := NewSource(path, "the single token of at least 32 bytes")
	require.NoError(t, err)
	now := time.Now()
	s.now = func() time.Time { return now }
	set, change := s.Current()
	require.Nil(t, change)
	require.Equal(t, 2, set.Len())
	p, ok := set.Authenticate("the single token of at least 32 bytes")
	require.True(t, ok)
	require.Equal(t, Principal{Name: TokenName, Role: RoleOperate, TokenSHA256: HashToken("the single token of at least 32 bytes")}, p)

	bob, err := Add(path, "bob", RoleRead)
	require.NoError(t, err)
	set, change = s.Current()
	require.Nil(t, change, "not looked at again yet")
	_, ok = set.Authenticate(bob)
	require.False(t, ok)
	now = now.Add(CheckInterval)
	set, change = s.Current()
	require.Equal(t, &Change{}, change)
	_, ok = set.Authenticate(bob)
	require.True(t, ok)

	require.NoError(t, Remove(path, "alice"))
	now = now.Add(CheckInterval)
	set, change = s.Current()
	require.Equal(t, []string{"alice"}, change.Gone)
	_, ok = set.Authenticate(alice)
	require.False(t, ok)

	require.NoError(t, os.WriteFile(path, []byte("[[principal]\n"), 0o600))
	now = now.Add(CheckInterval)
	set, change = s.Current()
	require.Contains(t, change.Problem, "malformed")
	require.Empty(t, change.Gone, "a broken file ends no session")
	require.Equal(t, []Principal{{Name: TokenName, Role: RoleOperate, TokenSHA256: HashToken("the single token of at least 32 bytes")}}, set.Principals())
	now = now.Add(CheckInterval)
	_, change = s.Current()
	require.Nil(t, change, "reported once")
	require.NoError(t, os.Remove(path))
	now = now.Add(CheckInterval)
	_, change = s.Current()
	require.Contains(t, change.Problem, "no such file")

	_, err = Add(path, "carol", RoleOperate)
	require.NoError(t, err)
	now = now.Add(CheckInterval)
	set, change = s.Current()
	require.Equal(t, []string{"bob"}, change.Gone, "against the last valid file")
	require.Equal(t, 2, set.Len())

	_, err = NewSource(filepath.Join(t.TempDir(), "missing.toml"), "")
	require.ErrorContains(t, err, "no such file")
	_, err = NewSource("/dev/zero", "")
	require.ErrorContains(t, err, "not a regular file")
}

// TestCurrentDoesNotWaitForALookUnderWay: while one call reads the file (slowly), the others
// return the principals of the previous look at once, rather than waiting on the Source's lock.
func TestCurrentDoesNotWaitForALookUnderWay(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "principals.toml")
	alice, err := Add(path, "alice", RoleOperate)
	require.NoError(t, err)
	s, err := NewSource(path, "")
	require.NoError(t, err)
	var mu sync.Mutex
	now := time.Now()
	s.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	reading, release := make(chan struct{}), make(chan struct{})
	s.read = func(path string) ([]byte, error) {
		close(reading)
		<-release
		return ReadFile(path)
	}
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	bob, err := Add(path, "bob", RoleRead)
	require.NoError(t, err)
	mu.Lock()
	now = now.Add(CheckInterval)
	mu.Unlock()

	looked := make(chan *Set)
	go func() {
		set, _ := s.Current()
		looked <- set
	}()
	<-reading
	inTime(t, "Current beside a slow look", func() {
		for range 3 {
			set, change := s.Current()
			assert.Nil(t, change)
			_, ok := set.Authenticate(alice)
			assert.True(t, ok)
			_, ok = set.Authenticate(bob)
			assert.False(t, ok, "not looked at yet")
		}
	})
	close(release)
	set := <-looked
	_, ok := set.Authenticate(bob)
	require.True(t, ok)
	set, change := s.Current()
	require.Nil(t, change)
	_, ok = set.Authenticate(bob)
	require.True(t, ok, "the look's principals are the Source's now")
}
