// Package readme checks the documentation against the code: README.md and every docs/*.md page.
// Every Go block compiles, every repository path cited exists, and every relative link resolves to
// a file and, for an anchor, to a heading of it. (These pages are the contract users read.)
package readme

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is the repository, seen from this package's directory (where go test runs).
const repoRoot = "../../.."

// docPages returns README.md and every docs/*.md, as paths relative to the repository.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no docs/*.md page found: the glob is broken")
	}
	rel := []string{"README.md"}
	for _, p := range pages {
		r, err := filepath.Rel(repoRoot, p)
		if err != nil {
			t.Fatal(err)
		}
		rel = append(rel, filepath.ToSlash(r))
	}
	return rel
}

func readPage(t *testing.T, page string) string {
	t.Helper()
	md, err := os.ReadFile(filepath.Join(repoRoot, page))
	if err != nil {
		t.Fatal(err)
	}
	return string(md)
}

// goBlock is one ```go fence of a page.
type goBlock struct {
	line int
	code string
}

func goBlocks(md string) []goBlock {
	var blocks []goBlock
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		start := i + 1
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		blocks = append(blocks, goBlock{line: start + 1, code: strings.Join(lines[start:i], "\n")})
	}
	return blocks
}

// prelude declares what the pages' fragments use without declaring: a context, a pool, a client,
// a mux, and the user's own job functions.
const prelude = `package readmeblocks

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/dashboard"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/taskling/settingsfile"
	"github.com/taskling-go/taskling/taskling/tasklingotel"
	"github.com/taskling-go/taskling/taskling/tasklingprom"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

var (
	ctx    context.Context
	pool   *pgxpool.Pool
	client *taskling.Client
	mux    *http.ServeMux
)

func export(context.Context, int64) error           { return nil }

// The Submissions page's web app.
var (
	tx     pgx.Tx
	upload struct {
		ID     int64
		SHA256 string
	}
)

type importJob struct{ UploadID int64 }

func importRows(context.Context, importJob, *taskling.Execution) error { return nil }
func renderStatus(taskling.Submission) error                          { return nil }
func buildInvoices(context.Context, time.Time) error { return nil }

// The Blocks page's jobs.
var (
	lastPaymentID int64
	exec          *taskling.Execution
	retry         *taskling.RetryPolicy
	newRows       []any
	file          struct{ Name string }
)

type row struct{ ID int64 }

func settle(context.Context, int64, int64) (int64, error) { return 0, nil }
func send(context.Context, row) error                    { return nil }

var (
	_ = errors.Is
	_ = os.Getenv
	_ = dashboard.NewHandler
	_ = migrations.Up
	_ = tasklingprom.New
	_ = tasklingotel.New
	_ = otlptracehttp.New
	_ = sdktrace.NewTracerProvider
	_ = prometheus.MustRegister
	_ = settingsfile.Open
	_ = time.Second
)
`

var importBlock = regexp.MustCompile(`(?s)^\s*import \((.*?)\)\s*`)

// TestEveryGoBlockCompiles builds each Go block of every page: a block of declarations as it is
// (its import block merged into the prelude's), a block of statements as the body of a function
// returning error.
func TestEveryGoBlockCompiles(t *testing.T) {
	dir, err := os.MkdirTemp(".", "blocks-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var src strings.Builder
	src.WriteString(prelude)
	n := 0
	for _, page := range docPages(t) {
		blocks := goBlocks(readPage(t, page))
		if page == "README.md" && len(blocks) == 0 {
			t.Fatal("the README has no Go block: the parser is broken")
		}
		for _, b := range blocks {
			n++
			code := importBlock.ReplaceAllString(b.code, "") // the prelude imports what they need
			fmt.Fprintf(&src, "\n// %s:%d\n", page, b.line)
			if strings.HasPrefix(strings.TrimSpace(code), "func ") {
				src.WriteString(code + "\n")
				continue
			}
			lines := strings.Split(strings.TrimSpace(code), "\n")
			if !strings.HasPrefix(strings.TrimSpace(lines[len(lines)-1]), "return ") {
				code += "\nreturn nil"
			}
			fmt.Fprintf(&src, "func block%d() error {\n%s\n}\n", n, code)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "blocks.go"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "build", "-o", os.DevNull, "./"+dir).CombinedOutput()
	if err != nil {
		t.Fatalf("a Go block of the docs does not compile:\n%s\n(the generated file, with PAGE:LINE comments before each block:)\n%s", out, numbered(src.String()))
	}
}

// pathLike matches a backticked token or a bare relative path that names a file or directory of
// the repository: one whose first segment is a top-level entry, or that ends in a file extension.
// Such citations are read from the repository's root on every page; links are another matter
// (relative to their page: see TestEveryLinkResolves).
var (
	backticked = regexp.MustCompile("`([^`\\s]+)`")
	// bare finds a relative file path anywhere, in code blocks too ("see shared/X.md").
	bare       = regexp.MustCompile(`(?:^|[\s(])([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+\.(?:md|go|png|sql|yaml|yml|toml|json|sh))\b`)
	extension  = regexp.MustCompile(`\.(md|go|png|sql|yaml|yml|toml|json|sh)$`)
	linkTarget = regexp.MustCompile(`\]\([^)\s]+\)`)
)

// TestEveryCitedPathExists checks every repository path the pages cite.
func TestEveryCitedPathExists(t *testing.T) {
	top, err := os.ReadDir(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	topLevel := map[string]bool{}
	for _, e := range top {
		topLevel[e.Name()] = true
	}
	checked := 0
	for _, page := range docPages(t) {
		md := linkTarget.ReplaceAllString(readPage(t, page), "]") // links: relative to the page
		var cited []string
		for _, re := range []*regexp.Regexp{backticked, bare} {
			for _, m := range re.FindAllStringSubmatch(md, -1) {
				cited = append(cited, m[1])
			}
		}
		for _, p := range cited {
			p = strings.TrimPrefix(p, "./")
			if strings.Contains(p, "://") || strings.HasPrefix(p, "/") || strings.HasPrefix(p, "../") || strings.ContainsAny(p, "{}*$<>|=") {
				continue
			}
			first, _, _ := strings.Cut(p, "/")
			if !topLevel[first] && !extension.MatchString(p) {
				continue
			}
			if topLevel[first] && !strings.Contains(p, "/") && !extension.MatchString(p) {
				continue // a bare top-level name that is also a word ("taskling")
			}
			checked++
			if _, err := os.Stat(filepath.Join(repoRoot, p)); err != nil {
				t.Errorf("%s cites %q, which does not exist in the repository", page, p)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d paths checked: the matcher is broken", checked)
	}
	t.Logf("%d paths checked", checked)
}

// TestEveryLinkResolves checks every relative link of every page: its file exists (relative to
// the page, as GitHub resolves it) and its anchor, if any, is a heading of that file.
func TestEveryLinkResolves(t *testing.T) {
	links := 0
	for _, page := range docPages(t) {
		broken, n, err := brokenLinks(repoRoot, page)
		if err != nil {
			t.Fatal(err)
		}
		links += n
		for _, b := range broken {
			t.Error(b)
		}
	}
	if links < 20 {
		t.Fatalf("only %d links checked: the matcher is broken", links)
	}
	t.Logf("%d links checked", links)
}

// TestEveryPageIsLinkedFromTheReadme: the README's map of docs/ names every page.
func TestEveryPageIsLinkedFromTheReadme(t *testing.T) {
	readme := readPage(t, "README.md")
	for _, page := range docPages(t)[1:] {
		if !strings.Contains(readme, "]("+page+")") {
			t.Errorf("README.md does not link to %s", page)
		}
	}
}

// TestTheLinkCheckerFindsBrokenLinks runs the checker on pages made for it, with one broken link
// of each kind among good ones.
func TestTheLinkCheckerFindsBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Top\n\nSee [settings](docs/settings.md), [its bounds](docs/settings.md#bounds-of-overrides),\n"+
		"[missing page](docs/nope.md), [missing anchor](docs/settings.md#no-such-heading), [here](#top),\n"+
		"[an image](docs/shot.png) and [the web](https://example.com/x.md).\n")
	write("docs/settings.md", "# Settings\n\n## Bounds of overrides\n\n```sh\n# not a heading\n[in code](gone.md)\n```\n\n"+
		"Back to the [top](../README.md#top), [own heading](#settings), [a code comment](#not-a-heading),\n"+
		"[twice](#limits-1) and [`code` in text](#bounds-of-overrides).\n\n## Limits\n\n## Limits\n")
	write("docs/shot.png", "")

	var got []string
	for _, page := range []string{"README.md", "docs/settings.md"} {
		broken, _, err := brokenLinks(root, page)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, broken...)
	}
	want := []string{
		`README.md: link "docs/nope.md": no file docs/nope.md`,
		`README.md: link "docs/settings.md#no-such-heading": docs/settings.md has no heading with anchor "no-such-heading"`,
		`docs/settings.md: link "#not-a-heading": docs/settings.md has no heading with anchor "not-a-heading"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("broken links:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSlugFollowsGitHub(t *testing.T) {
	for heading, want := range map[string]string{
		"Isolation: READ COMMITTED by default":       "isolation-read-committed-by-default",
		"History at scale: `make scale`":             "history-at-scale-make-scale",
		"Taskling's defects, fixed":                  "tasklings-defects-fixed",
		"Direct handoff (grant protocol 4)":          "direct-handoff-grant-protocol-4",
		"Retiring a task, and who changed what":      "retiring-a-task-and-who-changed-what",
		"Blocks (work that resumes after a crash)":   "blocks-work-that-resumes-after-a-crash",
		"**Bold** and [a link](x.md) — and → arrows": "bold-and-a-link--and--arrows",
		"snake_case and São Paulo":                   "snake_case-and-são-paulo",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

func numbered(s string) string {
	lines := strings.Split(s, "\n")
	for i := range lines {
		lines[i] = fmt.Sprintf("%4d  %s", i+1, lines[i])
	}
	return strings.Join(lines, "\n")
}
