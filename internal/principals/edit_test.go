package principals

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// table writes a principal's table the plain way, as tokens add does.
func table(name string) string {
	return fmt.Sprintf("[[principal]]\nname = %q\nrole = \"read\"\ntoken_sha256 = %q\n", name, HashToken(name))
}

// TestRemoveRevokesAPrincipalWhoseHeaderHasAComment is issue 40's case: bob's header carries a
// comment (valid TOML). Remove used to say "no such principal" while the file kept bob, and his
// token kept working.
func TestRemoveRevokesAPrincipalWhoseHeaderHasAComment(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "principals.toml")
	alice, err := Add(path, "alice", RoleOperate)
	require.NoError(t, err)
	bob, err := Add(path, "bob", RoleRead)
	require.NoError(t, err)
	text, err := os.ReadFile(path)
	require.NoError(t, err)
	edited := strings.Replace(string(text), "\n[[principal]]\nname = \"bob\"", "\n[[principal]]  # contractor\nname = \"bob\"", 1)
	require.NotEqual(t, string(text), edited)
	require.NoError(t, os.WriteFile(path, []byte(edited), 0o600))

	s, err := NewSource(path, "")
	require.NoError(t, err)
	now := time.Now()
	s.now = func() time.Time { return now }
	set, _ := s.Current()
	p, ok := set.Authenticate(bob)
	require.True(t, ok)
	require.Equal(t, "bob", p.Name)

	require.NoError(t, Remove(path, "bob"))
	now = now.Add(CheckInterval)
	set, change := s.Current()
	require.Equal(t, []string{"bob"}, change.Gone)
	_, ok = set.Authenticate(bob)
	require.False(t, ok, "bob's token still works")
	_, ok = set.Authenticate(alice)
	require.True(t, ok)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, table("alice")[:len("[[principal]]\nname = \"alice\"\n")], string(after)[:len("[[principal]]\nname = \"alice\"\n")])
	require.NotContains(t, string(after), "contractor")
	require.ErrorIs(t, Remove(path, "bob"), ErrNotFound)
}

// TestRemoveTakesOutExactlyTheTableTheParserReads: headers with spaces, quotes, escapes,
// comments and CRLF; names as literal, escaped and multi-line strings; comments that look like
// headers. Each time the one table goes, the comment lines directly above it with it, and every
// other byte stays.
func TestRemoveTakesOutExactlyTheTableTheParserReads(t *testing.T) {
	t.Parallel()
	hash := func(n string) string { return HashToken(n) }
	alice := table("alice")
	carol := table("carol")
	for _, c := range []struct{ what, bob string }{
		{"spaces in the header", "[[ principal ]]\nname = \"bob\"\nrole = \"read\"\ntoken_sha256 = \"" + hash("bob") + "\"\n"},
		{"a comment after the header, no space", "[[principal]]#x\nname = \"bob\"\nrole = \"read\"\ntoken_sha256 = \"" + hash("bob") + "\"\n"},
		{"trailing spaces and tabs", "[[principal]] \t \nname = \"bob\"\nrole = \"read\"\ntoken_sha256 = \"" + hash("bob") + "\"\n"},
		{"CRLF and a comment", "[[ principal ]]  # x\r\nname = \"bob\"\r\nrole = \"read\"\r\ntoken_sha256 = \"" + hash("bob") + "\"\r\n"},
		{"a quoted header", "[[\"principal\"]]\nname = \"bob\"\nrole = \"read\"\ntoken_sha256 = \"" + hash("bob") + "\"\n"},
		{"a literal header", "[[ 'principal' ]]\nname = \"bob\"\nrole = \"read\"\ntoken_sha256 = \"" + hash("bob") + "\"\n"},
		{"an escaped header", "[[\"princip\\u0061l\"]]\nname = \"bob\"\nrole = \"read\"\ntoken_sha256 = \"" + hash("bob") + "\"\n"},
		{"a literal name", "[[principal]]\nname = 'bob'\nrole = 'read'\ntoken_sha256 = '" + hash("bob") + "'\n"},
		{"an escaped name", "[[principal]]\nname=\"b\\u006fb\"\nrole = \"read\"\ntoken_sha256 = \"" + hash("bob") + "\"\n"},
		{"a multi-line name", "[[principal]]\nname = \"\"\"\nbob\"\"\"\nrole = '''read'''\ntoken_sha256 = \"\"\"\\\n   " + hash("bob") + "\"\"\"\n"},
		{"comments after values", "[[principal]]\nname = \"bob\" # [[principal]] name = \"carol\"\nrole = \"read\"#\ntoken_sha256 = \"" + hash("bob") + "\"\n"},
		{"quoted keys, in another order", "[[principal]]\n\"token_sha256\" = \"" + hash("bob") + "\"\n'role' = \"read\"\n\"n\\u0061me\" = \"bob\"\n"},
		{"comment lines inside, like headers", "[[principal]]\n# [[principal]]\nname = \"bob\"\n  #[other]\nrole = \"read\"\n\ntoken_sha256 = \"" + hash("bob") + "\"\n"},
	} {
		t.Run(c.what, func(t *testing.T) {
			for _, f := range []struct{ before, want string }{
				{alice + "\n# bob: a contractor\n" + c.bob + "\n" + carol, alice + "\n" + carol},
				{"# the principals of prod\n" + c.bob + "\n" + alice, "# the principals of prod\n" + alice},
				{alice + "\n" + c.bob, alice},
				{c.bob, ""},
			} {
				ps, err := Parse([]byte(f.before))
				require.NoError(t, err, f.before)
				require.Contains(t, names(ps), "bob")
				after, err := withoutPrincipal([]byte(f.before), "bob")
				require.NoError(t, err, f.before)
				require.Equal(t, f.want, string(after), f.before)
			}
			// Taking out alice leaves bob's comment to bob.
			after, err := withoutPrincipal([]byte(alice+"\n# bob: a contractor\n"+c.bob), "alice")
			require.NoError(t, err)
			require.Equal(t, "# bob: a contractor\n"+c.bob, string(after))
		})
	}
}

// TestRemoveRefusesWhatItCannotTakeOut: a principal the file has, written otherwise than as a
// [[principal]] table, is an error that says so, not "no such principal", and the file stays.
func TestRemoveRefusesWhatItCannotTakeOut(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "principals.toml")
	text := "principal = [{name = \"bob\", role = \"read\", token_sha256 = \"" + HashToken("bob") + "\"}]\n"
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	ps, err := Load(path)
	require.NoError(t, err)
	require.Equal(t, []string{"bob"}, names(ps))
	err = Remove(path, "bob")
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrNotFound)
	require.ErrorContains(t, err, `principal "bob" is in the file`)
	require.ErrorContains(t, err, "remove it by hand")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, text, string(after))
	require.ErrorIs(t, Remove(path, "carol"), ErrNotFound)
}

// TestScanIsNotFooledByHeadersInStrings: a line that opens with "[[principal]]" inside a
// multi-line string or array is no header; another table's header ends a principal's table.
func TestScanIsNotFooledByHeadersInStrings(t *testing.T) {
	t.Parallel()
	text := "x = \"\"\"\n[[principal]]\n\\\"\"\"\"\ny = '''\n[[principal]]'''\nz = [\n  [1],\n[[2]],\n] # [[principal]]\n" +
		"[[principal]]\r\nname = \"a\"\n[other] # [[principal]]\nk = \"[[principal]]\"\n[[principal]]"
	lines, err := scan(text)
	require.NoError(t, err)
	var headers []string
	for _, l := range lines {
		if l.kind == headerLine {
			headers = append(headers, fmt.Sprintf("%q %v", text[l.start:l.end], l.principal))
		}
	}
	require.Equal(t, []string{`"[[principal]]\r\n" true`, `"[other] # [[principal]]\n" false`, `"[[principal]]" true`}, headers)
	spans := principalSpans(text, lines)
	require.Len(t, spans, 2)
	require.Equal(t, "[[principal]]\r\nname = \"a\"\n", text[spans[0].start:spans[0].end])
	require.Equal(t, "[[principal]]", text[spans[1].start:spans[1].end])
}

// genFile draws a valid principals file of 1 to 6 principals, each written in one of the many
// ways TOML allows, with comments and blank lines anywhere, LF or CRLF line ends.
func genFile(t *rapid.T) (string, []Principal) {
	n := rapid.IntRange(1, 6).Draw(t, "principals")
	nl := func() string { return rapid.SampledFrom([]string{"\n", "\r\n"}).Draw(t, "newline") }
	ws := func() string { return rapid.SampledFrom([]string{"", " ", "\t", "  \t"}).Draw(t, "space") }
	comment := func() string {
		return "#" + rapid.SampledFrom([]string{"", " bob", " [[principal]]", ` name = "x"`, ` """`, " '''", " [other]"}).Draw(t, "comment")
	}
	filler := func() string { // blank and comment lines
		var b strings.Builder
		for range rapid.IntRange(0, 2).Draw(t, "filler lines") {
			if rapid.Bool().Draw(t, "comment line") {
				b.WriteString(ws() + comment())
			} else {
				b.WriteString(ws())
			}
			b.WriteString(nl())
		}
		return b.String()
	}
	str := func(v string) string { // v as a TOML string of any kind
		escaped := func() string {
			var b strings.Builder
			for _, r := range v {
				if rapid.Bool().Draw(t, "escape") {
					fmt.Fprintf(&b, `\u%04x`, r)
				} else {
					b.WriteRune(r)
				}
			}
			return b.String()
		}
		switch rapid.IntRange(0, 5).Draw(t, "string kind") {
		case 0:
			return `"` + escaped() + `"`
		case 1:
			return `'` + v + `'`
		case 2:
			return `"""` + rapid.SampledFrom([]string{"", "\n", "\r\n"}).Draw(t, "first newline") + escaped() + `"""`
		case 3:
			return `"""\` + nl() + ws() + escaped() + `"""`
		case 4:
			return `'''` + rapid.SampledFrom([]string{"", "\n", "\r\n"}).Draw(t, "first newline") + v + `'''`
		default:
			return `"` + v + `"`
		}
	}
	key := func(k string) string {
		return rapid.SampledFrom([]string{k, `"` + k + `"`, `'` + k + `'`}).Draw(t, "key")
	}
	headers := []string{"[[principal]]", "[[ principal ]]", `[["principal"]]`, "[[ 'principal' ]]", `[["princip\u0061l"]]`, "[[\tprincipal]]"}
	var b strings.Builder
	if rapid.Bool().Draw(t, "BOM") {
		b.WriteString("\ufeff")
	}
	b.WriteString(filler())
	var ps []Principal
	for i := range n {
		p := Principal{
			Name: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "name stem") + fmt.Sprint(i),
			Role: rapid.SampledFrom([]Role{RoleRead, RoleOperate}).Draw(t, "role"),
		}
		p.TokenSHA256 = HashToken(p.Name)
		ps = append(ps, p)
		b.WriteString(filler())
		b.WriteString(ws() + rapid.SampledFrom(headers).Draw(t, "header") + ws())
		if rapid.Bool().Draw(t, "header comment") {
			b.WriteString(comment())
		}
		b.WriteString(nl())
		values := map[string]string{"name": p.Name, "role": string(p.Role), "token_sha256": p.TokenSHA256}
		for _, k := range rapid.Permutation([]string{"name", "role", "token_sha256"}).Draw(t, "keys") {
			b.WriteString(filler())
			b.WriteString(ws() + key(k) + ws() + "=" + ws() + str(values[k]) + ws())
			if rapid.Bool().Draw(t, "value comment") {
				b.WriteString(comment())
			}
			b.WriteString(nl())
		}
	}
	b.WriteString(filler())
	text := b.String()
	if rapid.Bool().Draw(t, "no last newline") {
		text = strings.TrimRight(text, "\r\n")
	}
	return text, ps
}

// TestRemoveAgreesWithTheParser: for any valid file, however written, removing a principal cuts
// out one run of bytes, and the rest parses to the same principals less that one; adding one
// parses to the same principals plus it.
func TestRemoveAgreesWithTheParser(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		text, want := genFile(t)
		ps, err := Parse([]byte(text))
		if err != nil {
			t.Fatalf("the generator wrote an invalid file: %v\n%q", err, text)
		}
		require.Equal(t, want, ps)
		for len(ps) > 0 {
			i := rapid.IntRange(0, len(ps)-1).Draw(t, "remove")
			next, err := withoutPrincipal([]byte(text), ps[i].Name)
			require.NoError(t, err, "%q", text)
			got, err := Parse(next)
			require.NoError(t, err)
			require.Equal(t, without(ps, i), got)
			requireOneCut(t, text, string(next))
			text, ps = string(next), got
		}
		added, err := withPrincipal([]byte(text), Principal{Name: "zed", Role: RoleRead, TokenSHA256: HashToken("zed")})
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(added), text))
	})
}

// without is ps less its i-th, as Parse returns it (nil for none).
func without(ps []Principal, i int) []Principal {
	if len(ps) == 1 {
		return nil
	}
	return slices.Delete(slices.Clone(ps), i, i+1)
}

// requireOneCut fails unless after is before less one run of bytes.
func requireOneCut(t require.TestingT, before, after string) {
	n := 0
	for n < len(after) && before[n] == after[n] {
		n++
	}
	require.True(t, strings.HasSuffix(before, after[n:]), "not one cut:\n%q\n%q", before, after)
}

// FuzzRemove: whatever a file holds, if it parses, removing any of its principals either fails
// saying why (never "no such principal") or leaves exactly the others, cutting out one run.
func FuzzRemove(f *testing.F) {
	f.Add(table("alice") + "\n[[principal]]  # contractor\r\nname = 'bob'\nrole = \"read\"\ntoken_sha256 = \"" + HashToken("bob") + "\"\n")
	f.Add("\ufeff# top\n[[\"princip\\u0061l\"]]\nname = \"\"\"\nbob\"\"\"\nrole = '''read'''\ntoken_sha256 = \"" + HashToken("bob") + "\"")
	f.Add("principal = [{name = \"bob\", role = \"read\", token_sha256 = \"" + HashToken("bob") + "\"}]\n")
	f.Fuzz(func(t *testing.T, text string) {
		ps, err := Parse([]byte(text))
		if err != nil {
			return
		}
		for i, p := range ps {
			next, err := withoutPrincipal([]byte(text), p.Name)
			if err != nil {
				require.NotErrorIs(t, err, ErrNotFound)
				continue
			}
			got, err := Parse(next)
			require.NoError(t, err)
			require.Equal(t, without(ps, i), got)
			requireOneCut(t, text, string(next))
		}
	})
}
