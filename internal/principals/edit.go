package principals

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// Add makes a new token for a new principal, appends the principal to the file at path (created
// if missing) and returns the token, which is printed once and stored nowhere. The file keeps its
// text, the new table after it (with the file's line endings). A name the file has already is
// refused. How the file is rewritten: see Remove.
func Add(path, name string, role Role) (string, error) {
	if err := CheckName(name); err != nil {
		return "", fmt.Errorf("principals: %w", err)
	}
	if err := CheckRole(role); err != nil {
		return "", fmt.Errorf("principals: %w", err)
	}
	target, text, orig, err := readForEdit(path, true)
	if err != nil {
		return "", err
	}
	token := NewToken()
	next, err := withPrincipal(text, Principal{Name: name, Role: role, TokenSHA256: HashToken(token)})
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return token, replace(target, next, orig)
}

// Remove removes the principal named name from the file at path, keeping the rest of its text:
// the [[principal]] table that the TOML parser reads the principal from goes, from the comment
// lines directly above its header to the next table's. The result must parse to the same
// principals less that one, else nothing is written and the error says to remove it by hand (a
// principal written otherwise than as a [[principal]] table, say). Its token stops working at
// once for a server that rereads the file, and its sessions end.
//
// Add and Remove write the file whole into a temporary file beside it, renamed over it, so that a
// server never reads half a table; a symlink is followed, and the file it names rewritten. The
// new file keeps the old one's owner, group and mode less its world bits (a new file is 0600):
// when the owner and group cannot be kept (not root, and the file is another user's or another
// group's), nothing is written, since a server reading the file as them would be locked out.
func Remove(path, name string) error {
	target, text, orig, err := readForEdit(path, false)
	if err != nil {
		return err
	}
	next, err := withoutPrincipal(text, name)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return replace(target, next, orig)
}

// readForEdit reads the file that path names, through symlinks: its path, its text and what it
// is. A missing file, when missingOK, is path with no text.
func readForEdit(path string, missingOK bool) (string, []byte, os.FileInfo, error) {
	target, err := filepath.EvalSymlinks(path)
	if missingOK && errors.Is(err, os.ErrNotExist) {
		return path, nil, nil, nil
	}
	if err != nil {
		return "", nil, nil, fmt.Errorf("principals: %w", err)
	}
	text, orig, err := readFile(target)
	if missingOK && errors.Is(err, os.ErrNotExist) {
		return path, nil, nil, nil
	}
	return target, text, orig, err
}

// withPrincipal returns text with p's table after it.
func withPrincipal(text []byte, p Principal) ([]byte, error) {
	ps, err := Parse(text)
	if err != nil {
		return nil, err
	}
	if slices.ContainsFunc(ps, func(q Principal) bool { return q.Name == p.Name }) {
		return nil, fmt.Errorf("principals: the file already has a principal %q (remove it first to give it a new token)", p.Name)
	}
	nl := "\n"
	if bytes.Contains(text, []byte("\r\n")) {
		nl = "\r\n"
	}
	var b bytes.Buffer
	b.Write(text)
	if len(text) > 0 && !bytes.HasSuffix(text, []byte("\n")) {
		b.WriteString(nl)
	}
	if len(text) > 0 {
		b.WriteString(nl)
	}
	fmt.Fprintf(&b, "[[principal]]%sname = %q%srole = %q%stoken_sha256 = %q%s", nl, p.Name, nl, p.Role, nl, p.TokenSHA256, nl)
	if err := checkEdit(b.Bytes(), append(ps, p)); err != nil {
		return nil, fmt.Errorf("principals: the file would not read as before plus %q after adding it (%w); nothing was written", p.Name, err)
	}
	return b.Bytes(), nil
}

// withoutPrincipal returns text less the table of the principal named name.
func withoutPrincipal(text []byte, name string) ([]byte, error) {
	ps, err := Parse(text)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(ps, func(p Principal) bool { return p.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("%w %q", ErrNotFound, name)
	}
	lines, err := scan(string(text))
	if err != nil {
		return nil, fmt.Errorf("principals: principal %q: its table cannot be told from the rest of the file (%w); nothing was written: remove it by hand", name, err)
	}
	spans := principalSpans(string(text), lines)
	if len(spans) != len(ps) {
		return nil, fmt.Errorf("principals: principal %q is in the file, but %d [[principal]] table headers were found for its %d principals (a principal written otherwise, as in `principal = [{…}]`?); nothing was written: remove it by hand", name, len(spans), len(ps))
	}
	next := slices.Concat(text[:spans[i].start], text[spans[i].end:])
	if err := checkEdit(next, slices.Delete(slices.Clone(ps), i, i+1)); err != nil {
		return nil, fmt.Errorf("principals: taking out the table of principal %q would not leave the file's other principals alone (%w); nothing was written: remove it by hand", name, err)
	}
	return next, nil
}

// checkEdit says how text, an edit's result, does not parse to exactly want.
func checkEdit(text []byte, want []Principal) error {
	got, err := Parse(text)
	if err != nil {
		return err
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("it would read as %d principals %v, not %v", len(got), names(got), names(want))
	}
	return nil
}

func names(ps []Principal) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// chown gives a file an owner and group; tests replace it to see a refusal.
var chown = (*os.File).Chown

// replace writes text to a temporary file beside path and renames it over path. The new file has
// orig's owner and group and its mode less the world bits, or mode 0600 when orig is nil.
func replace(path string, text []byte, orig os.FileInfo) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("principals: %w", err)
	}
	defer os.Remove(f.Name()) // after a successful rename there is nothing left to remove
	mode := os.FileMode(0o600)
	if orig != nil {
		mode = orig.Mode().Perm() &^ 0o007
		if err := keepOwner(f, path, orig); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Chmod(mode); err != nil { // after the chown, which may clear bits
		f.Close()
		return fmt.Errorf("principals: %w", err)
	}
	if _, err := f.Write(text); err != nil {
		f.Close()
		return fmt.Errorf("principals: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("principals: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("principals: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("principals: %w", err)
	}
	// A removal must survive a crash: the rename is durable once the directory is synced. The
	// file is in place either way, so a directory that cannot be synced is not an error.
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// keepOwner gives f, the new text of path, the owner and group of orig, path's old file.
func keepOwner(f *os.File, path string, orig os.FileInfo) error {
	want, ok := orig.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("principals: %w", err)
	}
	if have, ok := st.Sys().(*syscall.Stat_t); ok && have.Uid == want.Uid && have.Gid == want.Gid {
		return nil
	}
	if err := chown(f, int(want.Uid), int(want.Gid)); err != nil {
		return fmt.Errorf("principals: %s belongs to uid %d, gid %d, which its rewrite could not keep (%w); nothing was written: run this as root, or as that user in that group", path, want.Uid, want.Gid, err)
	}
	return nil
}
