package readme

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fence is one fenced block of a page: its language and its text.
type fence struct {
	lang, code string
}

func fences(md string) []fence {
	var out []fence
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "```") {
			continue
		}
		start := i + 1
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		out = append(out, fence{lang: strings.TrimPrefix(l, "```"), code: strings.Join(lines[start:i], "\n")})
	}
	return out
}

// section returns the text under the heading "## name" up to the next heading of that level.
func section(md, name string) string {
	_, rest, ok := strings.Cut(md, "\n## "+name+"\n")
	if !ok {
		return ""
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// quickStart is the README's quick start: its shell lines and its Go code, in order.
func quickStart(t *testing.T) []fence {
	t.Helper()
	blocks := fences(section(readPage(t, "README.md"), "Quick start"))
	var sh, goCode int
	for _, b := range blocks {
		switch b.lang {
		case "sh":
			sh++
		case "go":
			goCode++
		default:
			t.Fatalf("the quick start has a %q block; the check runs sh and go blocks only", b.lang)
		}
	}
	if sh == 0 || goCode != 1 {
		t.Fatalf("the quick start has %d sh blocks and %d Go blocks; want shell lines and one Go block (is the heading still \"## Quick start\"?)", sh, goCode)
	}
	return blocks
}

// TestQuickStartNamesTheDatabaseAsEverythingElseDoes: the quick start gets its URL from the
// clone's private cluster, in the one variable the CLI and the examples read.
func TestQuickStartNamesTheDatabaseAsEverythingElseDoes(t *testing.T) {
	var shell, code strings.Builder
	for _, b := range quickStart(t) {
		if b.lang == "sh" {
			shell.WriteString(b.code + "\n")
		} else {
			code.WriteString(b.code)
		}
	}
	for _, want := range []string{"\ngo mod edit -replace github.com/taskling-go/taskling=../taskling\n",
		"\nexport TASKLING_DATABASE_URL=$(make -s pg-start)"} {
		if !strings.Contains("\n"+shell.String(), want) {
			t.Errorf("the quick start's shell lines lack %q:\n%s", strings.TrimSpace(want), shell.String())
		}
	}
	if !strings.Contains(code.String(), `os.Getenv("TASKLING_DATABASE_URL")`) {
		t.Errorf("the quick start's code does not read TASKLING_DATABASE_URL:\n%s", code.String())
	}
}

// otherDatabaseVariable is a database URL variable not named TASKLING_DATABASE_URL.
var otherDatabaseVariable = regexp.MustCompile(`(?:^|[^A-Za-z0-9_])DATABASE_URL`)

// TestOneDatabaseVariableEverywhere: the docs, the godoc, the examples and the tools name the
// database URL TASKLING_DATABASE_URL, as the CLI reads it (a quick start reading DATABASE_URL
// left a new user with two names for one thing).
func TestOneDatabaseVariableEverywhere(t *testing.T) {
	self, err := filepath.Abs("quickstart_test.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == ".git" || name == ".taskling" || name == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		switch path.Ext(d.Name()) {
		case ".go", ".md", ".sh", ".toml":
		default:
			if d.Name() != "Makefile" {
				return nil
			}
		}
		if abs, _ := filepath.Abs(p); abs == self {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		checked++
		for i, line := range strings.Split(string(b), "\n") {
			if otherDatabaseVariable.MatchString(line) {
				rel, _ := filepath.Rel(repoRoot, p)
				t.Errorf("%s:%d names another database variable than TASKLING_DATABASE_URL: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d files checked: the walk is broken", checked)
	}
}

// userCode is what the quick start leaves to the user: the job (export) and a main that calls
// runExport.
const userCode = `package main

import (
	"context"
	"fmt"
	"os"
)

func export(ctx context.Context, fencingToken int64) error {
	fmt.Println("quick start: exported with fencing token", fencingToken)
	return nil
}

func main() {
	if err := runExport(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "quick start:", err)
		os.Exit(1)
	}
}
`

// TestQuickStartRunsAsWritten is the new user's first hour (issue 40): from a fresh clone, the
// README's quick start — its shell lines as written, its Go code in a main package with the
// user's export and main — builds, runs against the clone's private cluster (make -s pg-start),
// and the run is in the history the CLI lists. The clone is of the working tree as it is (every
// file git would commit), so what is checked is what would be pushed; its cluster is stopped at
// the end (make -s pg-stop, which says so). It needs git, make, the PostgreSQL server binaries
// and the Go module proxy (or a module cache holding the dependencies).
func TestQuickStartRunsAsWritten(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"git", "make", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed: the quick start's check needs it", tool)
			}
			t.Skipf("%s is not installed (under CI this fails)", tool)
		}
	}
	blocks := quickStart(t)
	var script strings.Builder
	script.WriteString("PS4='+ [${SECONDS}s] '\nset -ex -o pipefail\n")
	var code string
	for _, b := range blocks {
		if b.lang == "go" {
			code = b.code
			script.WriteString("cp \"$QUICKSTART_CODE\"/*.go . # the user saves the code\n")
			continue
		}
		script.WriteString(b.code + "\n")
	}
	m := regexp.MustCompile(`(?m)^git clone (\S+)\s*$`).FindStringSubmatch(script.String())
	if m == nil {
		t.Fatalf("the quick start has no `git clone URL` line:\n%s", script.String())
	}
	url := m[1]
	cloneName := strings.TrimSuffix(path.Base(url), ".git")

	// End in time to report the output and stop the cluster, before go test's timeout.
	deadline := time.Now().Add(8 * time.Minute)
	if d, ok := t.Deadline(); ok && d.Add(-time.Minute).Before(deadline) {
		deadline = d.Add(-time.Minute)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	work := workDir(ctx, t)
	source := filepath.Join(work, "source")
	snapshotWorkingTree(t, source)
	codeDir := filepath.Join(work, "code")
	if err := os.Mkdir(codeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(codeDir, "main.go"), []byte("package main\n\n"+code+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(codeDir, "user.go"), []byte(userCode), 0o644); err != nil {
		t.Fatal(err)
	}
	user := filepath.Join(work, "user")
	if err := os.Mkdir(user, 0o755); err != nil {
		t.Fatal(err)
	}
	clone := filepath.Join(user, cloneName)

	// The README's clone URL is served by the snapshot.
	env := append(newUserEnv(), "QUICKSTART_CODE="+codeDir,
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=url."+source+".insteadOf", "GIT_CONFIG_VALUE_0="+url)
	pgStop := func() (string, error) { return stopClusterIn(clone, env) }
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			if out, err := pgStop(); err != nil {
				t.Errorf("make -s pg-stop in the clone: %v\n%s", err, out)
			}
		}
	})

	began := time.Now()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir, cmd.Env = user, env
	cmd.WaitDelay = 10 * time.Second // for what it started and left holding its output
	out, err := cmd.CombinedOutput()
	out = password.ReplaceAll(out, []byte("postgres://$1:…@")) // the trace shows the URL
	if err != nil {
		t.Fatalf("the quick start failed: %v\n%s", err, out)
	}
	var steps []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "+ [") {
			steps = append(steps, line)
		}
	}
	t.Logf("the quick start ran in %s; its steps began at:\n%s", time.Since(began).Round(100*time.Millisecond), strings.Join(steps, "\n"))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^quick start: exported with fencing token 1$`),
		regexp.MustCompile(`(?m)^\s*\d+\s+completed\s.*2026-11-21\.csv`),
	} {
		if !want.Match(out) {
			t.Errorf("the quick start's output has no line matching %s:\n%s", want, out)
		}
	}

	stopOut, err := pgStop()
	stopped = true
	if err != nil {
		t.Fatalf("make -s pg-stop in the clone: %v\n%s", err, stopOut)
	}
	if want := "stopped the cluster in " + filepath.Join(clone, ".taskling", "pg"); !strings.Contains(stopOut, want) {
		t.Errorf("make -s pg-stop printed %q; want it to say %q", stopOut, want)
	}
	if again, _ := pgStop(); !strings.Contains(again, "no cluster running in ") {
		t.Errorf("make -s pg-stop, with the cluster stopped, printed %q; want it to say no cluster runs", again)
	}
}

var password = regexp.MustCompile(`postgres://([^:@/]*):[^@/]*@`)

// workDir returns the directory the quick start runs in, empty, held by this test until it ends.
// It is the same path every time, so that the clone's packages, compiled at the same paths, are
// found in the build cache by the next run; a lock keeps two runs (of two checkouts, say) apart.
// It can be entered by the postgres OS user, which runs the clone's cluster when tests run as root.
func workDir(ctx context.Context, t *testing.T) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "taskling-quickstart")
	lock, err := os.OpenFile(dir+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Close() }) // releases the flock, after the cleanups below
	for syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		select {
		case <-ctx.Done():
			t.Fatalf("another run holds %s.lock: %v", dir, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	clear := func() {
		// A run killed before its cleanup left its cluster running: stop it first.
		if clones, _ := filepath.Glob(filepath.Join(dir, "user", "*", "Makefile")); len(clones) > 0 {
			if out, err := stopClusterIn(filepath.Dir(clones[0]), newUserEnv()); err != nil {
				t.Errorf("stop the cluster a run left in %s: %v\n%s", dir, err, out)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	}
	clear()
	t.Cleanup(clear)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	return dir
}

// newUserEnv is a new user's environment: this one without the harness's TASKLING_ variables
// (its database, its cluster's directory), GOWORK or git configuration.
func newUserEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TASKLING_") && !strings.HasPrefix(kv, "GOWORK=") && !strings.HasPrefix(kv, "GIT_CONFIG_") {
			env = append(env, kv)
		}
	}
	return env
}

// stopClusterIn runs make -s pg-stop in a clone, if it is one.
func stopClusterIn(clone string, env []string) (string, error) {
	if _, err := os.Stat(filepath.Join(clone, "Makefile")); err != nil {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "-s", "pg-stop")
	cmd.Dir, cmd.Env, cmd.WaitDelay = clone, env, 10*time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// snapshotWorkingTree makes dir a git repository whose one commit holds the working tree as it is:
// every file git tracks or would add (untracked and not ignored), with its mode, as it is on disk.
func snapshotWorkingTree(t *testing.T, dir string) {
	t.Helper()
	git := func(dir string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
		}
		return out
	}
	list := git(repoRoot, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	copied := 0
	for _, name := range strings.Split(strings.TrimSuffix(string(list), "\x00"), "\x00") {
		from, to := filepath.Join(repoRoot, name), filepath.Join(dir, name)
		info, err := os.Lstat(from)
		if os.IsNotExist(err) {
			continue // deleted in the working tree, or a file another test just removed
		} else if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(from)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, to); err != nil {
				t.Fatal(err)
			}
		case info.Mode().IsRegular():
			b, err := os.ReadFile(from)
			if os.IsNotExist(err) {
				continue
			} else if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(to, b, info.Mode().Perm()); err != nil {
				t.Fatal(err)
			}
		default:
			continue // a submodule's directory
		}
		copied++
	}
	if copied < 100 {
		t.Fatalf("only %d files of the working tree copied: the listing is broken", copied)
	}
	git(dir, "init", "-q")
	git(dir, "add", "-A")
	// A fixed date: the same files make the same commit, and the same build stamps.
	commit := exec.Command("git", "-c", "user.name=taskling readme test", "-c", "user.email=readme-test@localhost",
		"-c", "commit.gpgsign=false", "commit", "-q", "-m", fmt.Sprintf("the working tree, %d files", copied))
	commit.Dir = dir
	commit.Env = append(os.Environ(), "GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z")
	if out, err := commit.CombinedOutput(); err != nil {
		t.Fatalf("git commit: %v\n%s", err, out)
	}
}
