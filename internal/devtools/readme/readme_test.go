// Package readme checks the README against the code: every Go block compiles, and every
// repository path it cites exists. (The README is the contract users read.)
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

const readmePath = "../../../README.md"

// goBlock is one ```go fence of the README.
type goBlock struct {
	line int
	code string
}

func goBlocks(t *testing.T, md string) []goBlock {
	t.Helper()
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
	if len(blocks) == 0 {
		t.Fatal("the README has no Go block: the parser is broken")
	}
	return blocks
}

// prelude declares what the README's fragments use without declaring: a context, a pool, a client,
// a mux, and the user's own job functions.
const prelude = `package readmeblocks

import (
	"context"
	"errors"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/dashboard"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/taskling/settingsfile"
	"github.com/taskling-go/taskling/taskling/tasklingprom"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	ctx    context.Context
	pool   *pgxpool.Pool
	client *taskling.Client
	mux    *http.ServeMux
)

func export(context.Context, int64) error           { return nil }

// The Submissions section's web app.
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

// The Blocks section's jobs.
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
	_ = prometheus.MustRegister
	_ = settingsfile.Open
	_ = time.Second
)
`

var importBlock = regexp.MustCompile(`(?s)^\s*import \((.*?)\)\s*`)

// TestEveryGoBlockCompiles builds each Go block of the README: a block of declarations as it is
// (its import block merged into the prelude's), a block of statements as the body of a function
// returning error.
func TestEveryGoBlockCompiles(t *testing.T) {
	md, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(".", "blocks-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var src strings.Builder
	src.WriteString(prelude)
	for i, b := range goBlocks(t, string(md)) {
		code := importBlock.ReplaceAllString(b.code, "") // the prelude imports what they need
		fmt.Fprintf(&src, "\n// README.md:%d\n", b.line)
		if strings.HasPrefix(strings.TrimSpace(code), "func ") {
			src.WriteString(code + "\n")
			continue
		}
		lines := strings.Split(strings.TrimSpace(code), "\n")
		if !strings.HasPrefix(strings.TrimSpace(lines[len(lines)-1]), "return ") {
			code += "\nreturn nil"
		}
		fmt.Fprintf(&src, "func block%d() error {\n%s\n}\n", i, code)
	}
	if err := os.WriteFile(filepath.Join(dir, "blocks.go"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "build", "-o", os.DevNull, "./"+dir).CombinedOutput()
	if err != nil {
		t.Fatalf("a Go block of the README does not compile:\n%s\n(the generated file, with README.md:LINE comments before each block:)\n%s", out, numbered(src.String()))
	}
}

// pathLike matches a backticked token or a link target that names a file or directory of the
// repository: one whose first segment is a top-level entry, or that ends in a file extension.
var (
	backticked = regexp.MustCompile("`([^`\\s]+)`")
	linked     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// bare finds a relative file path anywhere, in code blocks too ("see shared/X.md").
	bare      = regexp.MustCompile(`(?:^|[\s(])([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+\.(?:md|go|png|sql|yaml|yml|toml|json|sh))\b`)
	extension = regexp.MustCompile(`\.(md|go|png|sql|yaml|yml|toml|json|sh)$`)
)

// TestEveryCitedPathExists checks every repository path the README cites.
func TestEveryCitedPathExists(t *testing.T) {
	md, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	top, err := os.ReadDir("../../..")
	if err != nil {
		t.Fatal(err)
	}
	topLevel := map[string]bool{}
	for _, e := range top {
		topLevel[e.Name()] = true
	}
	var cited []string
	for _, re := range []*regexp.Regexp{backticked, linked, bare} {
		for _, m := range re.FindAllStringSubmatch(string(md), -1) {
			cited = append(cited, m[1])
		}
	}
	checked := 0
	for _, p := range cited {
		p = strings.TrimPrefix(p, "./")
		if strings.Contains(p, "://") || strings.HasPrefix(p, "/") || strings.ContainsAny(p, "{}*$<>|=") {
			continue
		}
		first, _, _ := strings.Cut(p, "/")
		if !topLevel[first] && !(strings.Contains(p, "/") && extension.MatchString(p)) && !extension.MatchString(p) {
			continue
		}
		if topLevel[first] && !strings.Contains(p, "/") && !extension.MatchString(p) {
			continue // a bare top-level name that is also a word ("taskling")
		}
		checked++
		if _, err := os.Stat(filepath.Join("../../..", p)); err != nil {
			t.Errorf("the README cites %q, which does not exist in the repository", p)
		}
	}
	if checked < 10 {
		t.Fatalf("only %d paths checked: the matcher is broken", checked)
	}
}

func numbered(s string) string {
	lines := strings.Split(s, "\n")
	for i := range lines {
		lines[i] = fmt.Sprintf("%4d  %s", i+1, lines[i])
	}
	return strings.Join(lines, "\n")
}
