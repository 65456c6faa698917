// Package principals is the principals file of `taskling serve`: who may use the HTTP API and the
// dashboard, with which role, each known by the SHA-256 of its token (the token itself is never
// stored). A TOML file of [[principal]] tables:
//
//	[[principal]]
//	name = "alice"
//	role = "operate"          # or "read"
//	token_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
//
// `taskling tokens add NAME --role ROLE --file FILE` makes a token and appends its principal.
package principals

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/BurntSushi/toml"
)

// Role says what a principal may do.
type Role string

// The roles.
const (
	// RoleRead reads: the API's GET routes, the dashboard's pages, /metrics.
	RoleRead Role = "read"
	// RoleOperate reads and changes: overrides, retirement, submissions, cancels, forced blocks.
	RoleOperate Role = "operate"
)

// TokenName is the principal of the single API token (TASKLING_API_TOKEN): an operator. A file
// cannot name another principal so.
const TokenName = "token"

// MaxFileSize bounds the file: a principals file is a few lines per principal.
const MaxFileSize = 1 << 20

// ErrMalformed: the file is not a valid principals file.
var ErrMalformed = errors.New("principals: malformed principals file")

// ErrNotFound: the file has no principal of that name.
var ErrNotFound = errors.New("principals: no such principal")

// Principal is one principal of the file.
type Principal struct {
	Name        string `toml:"name"`
	Role        Role   `toml:"role"`
	TokenSHA256 string `toml:"token_sha256"` // lowercase hex of the SHA-256 of the token
}

// MayChange reports whether the principal may make changes.
func (p Principal) MayChange() bool { return p.Role == RoleOperate }

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$`)

// CheckName refuses a name that is not 1 to 64 letters, digits and ._@+- (starting with a letter
// or digit), or that is TokenName.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("principal name %q: want 1 to 64 letters, digits and ._@+-, starting with a letter or digit", name)
	}
	if name == TokenName {
		return fmt.Errorf("principal name %q is the single API token's (TASKLING_API_TOKEN)", name)
	}
	return nil
}

// CheckRole refuses a role other than read and operate.
func CheckRole(r Role) error {
	if r != RoleRead && r != RoleOperate {
		return fmt.Errorf("role %q: want read or operate", r)
	}
	return nil
}

// Parse reads a principals file's text: every principal has a valid name, a role and a token
// hash, and no name or hash appears twice. Unknown keys are refused, and so are keys in another
// case (`Name`, `[[Principal]]`).
func Parse(text []byte) ([]Principal, error) {
	var doc struct {
		Principal []Principal `toml:"principal"`
	}
	md, err := toml.Decode(string(text), &doc)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%w: line %d: %s", ErrMalformed, pe.Position.Line, pe.Message)
		}
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		return nil, fmt.Errorf("%w: unknown key %q; want [[principal]] tables of name, role and token_sha256", ErrMalformed, undecoded[0].String())
	}
	// The decoder matches keys without regard to case, and of two that differ only so it keeps
	// either, at random: [[Principal]] beside [[principal]] would make the file mean one thing
	// to one read and another to the next.
	for _, k := range md.Keys() {
		if !slices.Equal(k, toml.Key{"principal"}) && (len(k) != 2 || k[0] != "principal" || !slices.Contains([]string{"name", "role", "token_sha256"}, k[1])) {
			return nil, fmt.Errorf("%w: key %q: keys are lowercase; want [[principal]] tables of name, role and token_sha256", ErrMalformed, k.String())
		}
	}
	names, hashes := map[string]bool{}, map[string]bool{}
	for i, p := range doc.Principal {
		where := fmt.Sprintf("principal %d", i+1)
		if err := CheckName(p.Name); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, where, err)
		}
		where = fmt.Sprintf("principal %q", p.Name)
		if err := CheckRole(p.Role); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, where, err)
		}
		if b, err := hex.DecodeString(p.TokenSHA256); err != nil || len(b) != sha256.Size || strings.ToLower(p.TokenSHA256) != p.TokenSHA256 {
			return nil, fmt.Errorf("%w: %s: token_sha256: want 64 lowercase hex digits (`taskling tokens add` writes it)", ErrMalformed, where)
		}
		if names[p.Name] {
			return nil, fmt.Errorf("%w: %s appears twice", ErrMalformed, where)
		}
		if hashes[p.TokenSHA256] {
			return nil, fmt.Errorf("%w: %s has the token of another principal", ErrMalformed, where)
		}
		names[p.Name], hashes[p.TokenSHA256] = true, true
	}
	return doc.Principal, nil
}

// ReadFile reads the file at path (following symlinks): a regular file of at most MaxFileSize
// bytes. Anything else — a FIFO, a device, a directory — is refused without waiting on it.
func ReadFile(path string) ([]byte, error) {
	text, _, err := readFile(path)
	return text, err
}

// readFile is ReadFile, with what the file read is (its mode and owner, for a rewrite).
func readFile(path string) ([]byte, os.FileInfo, error) {
	// O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below, as in
	// taskling/settingsfile); reads of a regular file ignore the flag.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("principals: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("principals: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("principals: %s is not a regular file (mode %s)", path, st.Mode())
	}
	text, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("principals: %w", err)
	}
	if len(text) > MaxFileSize {
		return nil, nil, fmt.Errorf("principals: %s is larger than %d bytes", path, MaxFileSize)
	}
	return text, st, nil
}

// Load reads and parses the file at path.
func Load(path string) ([]Principal, error) {
	text, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	ps, err := Parse(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ps, nil
}

// NewToken returns a new random token: 32 bytes from crypto/rand, base64url without padding.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// HashToken returns the token_sha256 of token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Set is a set of principals that authenticates tokens.
type Set struct {
	list []entry
}

type entry struct {
	p    Principal
	hash [sha256.Size]byte
}

// NewSet returns the set of ps (valid, as Parse returns them) and, when token is not empty, the
// principal TokenName, an operator, whose token it is.
func NewSet(ps []Principal, token string) *Set {
	s := &Set{}
	if token != "" {
		ps = append([]Principal{{Name: TokenName, Role: RoleOperate, TokenSHA256: HashToken(token)}}, ps...)
	}
	for _, p := range ps {
		e := entry{p: p}
		if _, err := hex.Decode(e.hash[:], []byte(p.TokenSHA256)); err != nil {
			continue
		}
		s.list = append(s.list, e)
	}
	return s
}

// Authenticate returns the principal whose token is token. It compares the token's hash with
// every principal's, in constant time, whichever matches.
func (s *Set) Authenticate(token string) (Principal, bool) {
	sum := sha256.Sum256([]byte(token))
	var found Principal
	ok := 0
	for _, e := range s.list {
		m := subtle.ConstantTimeCompare(sum[:], e.hash[:])
		if m == 1 {
			found = e.p
		}
		ok |= m
	}
	return found, ok == 1
}

// Lookup returns the principal named name.
func (s *Set) Lookup(name string) (Principal, bool) {
	for _, e := range s.list {
		if e.p.Name == name {
			return e.p, true
		}
	}
	return Principal{}, false
}

// Len is the number of principals.
func (s *Set) Len() int { return len(s.list) }

// Principals returns the principals, TokenName first when there is one.
func (s *Set) Principals() []Principal {
	out := make([]Principal, len(s.list))
	for i, e := range s.list {
		out[i] = e.p
	}
	return out
}

// Gone returns the names of the principals of s that next does not have with the same token:
// removed, or given another one. Their sessions must end.
func (s *Set) Gone(next *Set) []string {
	var out []string
	for _, e := range s.list {
		if p, ok := next.Lookup(e.p.Name); !ok || p.TokenSHA256 != e.p.TokenSHA256 {
			out = append(out, e.p.Name)
		}
	}
	return out
}
