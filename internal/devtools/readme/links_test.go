package readme

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

var (
	link       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	linkText   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// brokenLinks returns, one line each, the relative links of page (a path under root) that do not
// resolve: a file that does not exist, or an anchor that is no heading of its file. It also returns
// how many relative links it checked. Links inside code (fenced or inline) are text, not links.
func brokenLinks(root, page string) ([]string, int, error) {
	md, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		return nil, 0, err
	}
	text := inlineCode.ReplaceAllString(strings.Join(prose(string(md)), "\n"), "code")
	var broken []string
	n := 0
	for _, m := range link.FindAllStringSubmatch(text, -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		n++
		file, anchor, _ := strings.Cut(target, "#")
		resolved := page
		if file != "" {
			resolved = path.Clean(path.Join(path.Dir(page), file))
		}
		if strings.HasPrefix(resolved, "../") {
			broken = append(broken, fmt.Sprintf("%s: link %q: outside the repository", page, target))
			continue
		}
		if _, err := os.Stat(filepath.Join(root, resolved)); err != nil {
			broken = append(broken, fmt.Sprintf("%s: link %q: no file %s", page, target, resolved))
			continue
		}
		if anchor == "" {
			continue
		}
		anchors, err := headingAnchors(filepath.Join(root, resolved))
		if err != nil {
			return nil, 0, err
		}
		if !anchors[anchor] {
			broken = append(broken, fmt.Sprintf("%s: link %q: %s has no heading with anchor %q", page, target, resolved, anchor))
		}
	}
	return broken, n, nil
}

// prose returns the lines of md outside fenced code blocks.
func prose(md string) []string {
	var out []string
	inFence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if !inFence {
			out = append(out, line)
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives the headings of a Markdown file: a repeated
// slug gets -1, -2, … after its first use.
func headingAnchors(file string) (map[string]bool, error) {
	md, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range prose(string(md)) {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if k := seen[s]; k > 0 {
			anchors[fmt.Sprintf("%s-%d", s, k)] = true
		} else {
			anchors[s] = true
		}
		seen[s]++
	}
	return anchors, nil
}

// slug is GitHub's anchor of a heading: its text as rendered (no link targets, backticks or
// asterisks), lowercased, punctuation and symbols removed, each space a '-'.
func slug(h string) string {
	h = linkText.ReplaceAllString(h, "$1")
	h = strings.NewReplacer("`", "", "*", "").Replace(h)
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
