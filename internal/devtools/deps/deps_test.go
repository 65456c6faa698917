// Package deps checks the project's import layers: every package belongs to one room, and a
// package imports only from rooms before its own (tests are free to import anything). The
// README's Layout section draws the same rooms.
package deps

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/taskling-go/taskling"

// rooms, lowest first. A pattern ending in "/..." holds the packages below it too.
var rooms = []struct {
	name     string
	packages []string
}{
	{"leaves: pure logic, named codes, the read side's types and the schema", []string{"tokens", "internal/backoff", "internal/cronspec",
		"internal/codes", "internal/storedjson", "tasklingtype", "migrations", "internal/principals"}},
	{"the grant protocol", []string{"execution"}},
	{"the feature stores", []string{"internal/store/blockstore", "internal/store/submitstore", "internal/store/schedulestore",
		"internal/store/historystore", "internal/store/adminstore"}},
	{"the library", []string{"taskling"}},
	{"integrations of the library", []string{"taskling/tasklingprom", "taskling/tasklingotel", "taskling/settingsfile"}},
	{"the HTTP API", []string{"internal/httpapi"}},
	{"the dashboard", []string{"dashboard"}},
	{"the CLI", []string{"cmd/taskling"}},
	{"development tools", []string{"internal/devtools/..."}},
	{"examples", []string{"examples/..."}},
}

// roomOf returns the index of pkg's room (a path relative to the module), or -1.
func roomOf(pkg string) int {
	best, bestLen := -1, -1
	for i, r := range rooms {
		for _, p := range r.packages {
			prefix, tree := strings.CutSuffix(p, "/...")
			match := pkg == prefix || (tree && strings.HasPrefix(pkg, prefix+"/"))
			if match && len(prefix) > bestLen {
				best, bestLen = i, len(prefix)
			}
		}
	}
	return best
}

// imports reads the module's packages (not integration_test, its own module) and the project
// packages each imports in its non-test files.
func imports(t *testing.T, root string) map[string][]string {
	return importsWithPrefix(t, root, module+"/")
}

// importsWithPrefix is imports for the imports that start with prefix (cut off).
func importsWithPrefix(t *testing.T, root, prefix string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "integration_test") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		if _, ok := out[pkg]; !ok {
			out[pkg] = nil
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if dep, ok := strings.CutPrefix(p, prefix); ok {
				out[pkg] = append(out[pkg], dep)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestImportsFollowTheLayers fails on a package with no room and on an import that does not go
// to an earlier room, naming both.
func TestImportsFollowTheLayers(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no module root at %s: %v", root, err)
	}
	pkgs := imports(t, root)
	if len(pkgs) < 10 {
		t.Fatalf("only %d packages found under %s: the walk is broken", len(pkgs), root)
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// openTelemetryUsers are the packages that may link OpenTelemetry: its integration, the tools and
// the examples. The core links none of it (issue 28): what tracing needs are its hooks.
var openTelemetryUsers = []string{"taskling/tasklingotel", "internal/devtools/", "examples/"}

// TestOnlyTheIntegrationLinksOpenTelemetry fails on a package of the library, the API, the
// dashboard or the CLI that imports OpenTelemetry.
func TestOnlyTheIntegrationLinksOpenTelemetry(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	users := importsWithPrefix(t, root, "go.opentelemetry.io/")
	found := false
	for pkg, deps := range users {
		if len(deps) == 0 {
			continue
		}
		allowed := false
		for _, u := range openTelemetryUsers {
			allowed = allowed || pkg == strings.TrimSuffix(u, "/") || (strings.HasSuffix(u, "/") && strings.HasPrefix(pkg, u))
		}
		found = found || pkg == "taskling/tasklingotel"
		if !allowed {
			t.Errorf("%s imports go.opentelemetry.io/%s: only %v may link OpenTelemetry", pkg, deps[0], openTelemetryUsers)
		}
	}
	if !found {
		t.Error("taskling/tasklingotel imports no OpenTelemetry package: the walk is broken")
	}
}

// TestTheCheckCatchesAnUpwardImport keeps the check honest: an import from the protocol up to
// the library, and a package with no room, are both refused; tools may share helpers.
func TestTheCheckCatchesAnUpwardImport(t *testing.T) {
	got := violations(map[string][]string{
		"execution":                   {"taskling", "tokens"},
		"nowhere/pkg":                 nil,
		"internal/devtools/cmd/bench": {"internal/devtools/pgcluster", "taskling"},
		"internal/devtools/pgcluster": nil,
		"taskling":                    {"execution"},
	})
	if len(got) != 2 || !strings.Contains(got[0], "execution") || !strings.Contains(got[1], "nowhere/pkg") {
		t.Fatalf("want the upward import and the package with no room, got %q", got)
	}
}

// violations lists the packages with no room and the imports that do not go to an earlier room.
func violations(pkgs map[string][]string) []string {
	names := make([]string, 0, len(pkgs))
	for p := range pkgs {
		names = append(names, p)
	}
	sort.Strings(names)
	var bad []string
	for _, p := range names {
		if p == "." {
			continue // the module root holds no Go package
		}
		from := roomOf(p)
		if from < 0 {
			bad = append(bad, fmt.Sprintf("%s has no room: declare it in internal/devtools/deps", p))
			continue
		}
		for _, dep := range pkgs[p] {
			if to := roomOf(dep); to >= from && !(to == from && isTree(from)) {
				bad = append(bad, fmt.Sprintf("%s (%s) imports %s (%s): an import must go to an earlier room",
					p, rooms[from].name, dep, roomName(to)))
			}
		}
	}
	return bad
}

// isTree: the packages of a room declared as a tree may import each other (the tools and
// examples share helpers).
func isTree(room int) bool {
	for _, p := range rooms[room].packages {
		if !strings.HasSuffix(p, "/...") {
			return false
		}
	}
	return true
}

func roomName(i int) string {
	if i < 0 {
		return "no room"
	}
	return rooms[i].name
}
