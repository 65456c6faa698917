package principals

import (
	"fmt"
	"strings"

	"github.com/BurntSushi/toml"
)

// A principals file is edited as text, so that `tokens add` and `tokens remove` keep everything
// else in it (comments, blank lines, layout). The scan below finds each table's lines the way the
// TOML parser reads them: a line that opens with '[' inside a multi-line string or array is no
// header, a header may carry spaces, quotes and a comment (`[[ "principal" ]]  # contractor`), and
// lines may end in CRLF. Whatever it finds, an edit is checked by parsing its result.

// lineKind is what a line of a principals file holds, as the scan sees it.
type lineKind int

const (
	blankLine   lineKind = iota // spaces and tabs only
	commentLine                 // a comment alone
	headerLine                  // a table header, with perhaps a comment
	valueLine                   // a key and its value, which may run over several lines
)

// line is one entry of the scan: a line, or the lines of one key and its value.
type line struct {
	start, end int // byte offsets: end is past its newline
	kind       lineKind
	principal  bool // a header that opens a [[principal]] table
}

// scan splits a principals file's text into lines. It refuses what it cannot read as TOML (the
// file parsed, so that is a defect of the scan): an edit then stops rather than guessing.
func scan(text string) ([]line, error) {
	var out []line
	i := 0
	if strings.HasPrefix(text, "\ufeff") {
		i = len("\ufeff")
	}
	for i < len(text) {
		l := line{start: i}
		j := skipSpace(text, i)
		switch {
		case j == len(text) || text[j] == '\n' || strings.HasPrefix(text[j:], "\r\n"):
			l.kind = blankLine
			l.end = lineEnd(text, j)
		case text[j] == '#':
			l.kind = commentLine
			l.end = lineEnd(text, j)
		case text[j] == '[':
			l.kind = headerLine
			end, principal, err := scanHeader(text, j)
			if err != nil {
				return nil, err
			}
			l.end, l.principal = end, principal
		default:
			l.kind = valueLine
			l.end = valueEnd(text, j)
		}
		out = append(out, l)
		i = l.end
	}
	return out, nil
}

func skipSpace(text string, i int) int {
	for i < len(text) && (text[i] == ' ' || text[i] == '\t') {
		i++
	}
	return i
}

// lineEnd is the offset past the newline that ends the line i is on (or len(text)).
func lineEnd(text string, i int) int {
	if n := strings.IndexByte(text[i:], '\n'); n >= 0 {
		return i + n + 1
	}
	return len(text)
}

// scanHeader reads the table header whose '[' is at i, to the end of its line, and says whether
// it opens a [[principal]] table: the TOML parser reads the header alone, so that quoted and
// escaped keys (`[["princip\u0061l"]]`) count as they do in the file.
func scanHeader(text string, i int) (end int, principal bool, err error) {
	j := i + 1
	for j < len(text) && text[j] != ']' && text[j] != '\n' {
		switch text[j] {
		case '"':
			j = stringEnd(text, j+1, '"')
		case '\'':
			j = stringEnd(text, j+1, '\'')
		default:
			j++
		}
	}
	end = lineEnd(text, j)
	var header map[string]any
	if _, err := toml.Decode(text[i:end], &header); err != nil {
		return 0, false, fmt.Errorf("the table header at byte %d: %w", i, err)
	}
	tables, ok := header["principal"].([]map[string]any)
	return end, ok && len(header) == 1 && len(tables) == 1, nil
}

// valueEnd is the offset past the newline that ends the key and value starting at i: strings
// (multi-line ones too), arrays and inline tables may hold newlines, comments may hold anything.
func valueEnd(text string, i int) int {
	depth := 0
	for i < len(text) {
		switch c := text[i]; {
		case strings.HasPrefix(text[i:], `"""`):
			i = multilineEnd(text, i+3, `"""`, true)
		case strings.HasPrefix(text[i:], `'''`):
			i = multilineEnd(text, i+3, `'''`, false)
		case c == '"':
			i = stringEnd(text, i+1, '"')
		case c == '\'':
			i = stringEnd(text, i+1, '\'')
		case c == '[' || c == '{':
			depth++
			i++
		case c == ']' || c == '}':
			depth--
			i++
		case c == '#':
			i = lineEnd(text, i) - 1
			if text[i] != '\n' { // a comment at the end of the file
				return len(text)
			}
		case c == '\n' && depth <= 0:
			return i + 1
		default:
			i++
		}
	}
	return len(text)
}

// stringEnd is the offset past the quote that closes the one-line string whose text starts at
// i — a basic string (quote '"', with escapes) or a literal one (a single quote) — or of the
// newline that (wrongly) ends it first.
func stringEnd(text string, i int, quote byte) int {
	for i < len(text) && text[i] != quote && text[i] != '\n' {
		if text[i] == '\\' && quote == '"' {
			i++
		}
		i++
	}
	if i < len(text) && text[i] == quote {
		return i + 1
	}
	return min(i, len(text))
}

// multilineEnd is the offset past the delimiter that closes the multi-line string whose text
// starts at i; up to two quotes before it belong to the string (`"""a"""""` is `a""`).
func multilineEnd(text string, i int, delim string, escapes bool) int {
	for i < len(text) {
		switch {
		case escapes && text[i] == '\\':
			i += 2
		case strings.HasPrefix(text[i:], delim):
			i += 3
			for n := 0; n < 2 && i < len(text) && text[i] == delim[0]; n++ {
				i++
			}
			return i
		default:
			i++
		}
	}
	return len(text)
}

// span is a [[principal]] table's bytes in a file: from the comment lines directly above its
// header (not those that open the file: they speak of the file) to the next table's; the last
// table takes the blank lines before it too, so that the file does not end in them.
type span struct{ start, end int }

// principalSpans returns the spans of the file's [[principal]] tables, in the file's order: the
// order in which the parser lists its principals.
func principalSpans(text string, lines []line) []span {
	// top is the first line of the table whose header is line h.
	top := func(h int) int {
		k := h
		for k > 0 && lines[k-1].kind == commentLine {
			k--
		}
		if k == 0 {
			return h
		}
		return k
	}
	var out []span
	for h, l := range lines {
		if l.kind != headerLine || !l.principal {
			continue
		}
		first, next := top(h), -1
		for n := h + 1; n < len(lines) && next < 0; n++ {
			if lines[n].kind == headerLine {
				next = top(n)
			}
		}
		if next >= 0 {
			out = append(out, span{start: lines[first].start, end: lines[next].start})
			continue
		}
		for first > 0 && lines[first-1].kind == blankLine {
			first--
		}
		out = append(out, span{start: lines[first].start, end: len(text)})
	}
	return out
}
