package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/internal/storedjson"
	"github.com/taskling-go/taskling/taskling"
)

var errNotFound = taskling.ErrNotFound

// printJSON writes v as the HTTP API does: indented, stored JSON values as stored (compact),
// nothing HTML-escaped.
func printJSON(w io.Writer, v any) error {
	return storedjson.Encode(w, v)
}

// storedJSONText is a stored JSON value as shown, or why it cannot be read, or "-" for none.
func storedJSONText(v []byte, unreadable string) string {
	switch {
	case unreadable != "":
		return "(unreadable: " + unreadable + ")"
	case len(v) == 0:
		return "-"
	}
	return string(v)
}

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = terminalSafe(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// terminalSafe escapes what a terminal would act on instead of print — control characters
// (escape sequences, newlines and tabs that break a table) and invisible format characters
// (bidirectional overrides) — so that stored text (reference values, messages, headers) prints as
// data. Text those escapes would make more than twice as long (plus escapeSlack bytes) is cut,
// ending with "…", where that length is reached: no stored value prints much larger than it is
// (-o json prints it whole).
func terminalSafe(s string) string {
	if !strings.ContainsFunc(s, unprintable) {
		return s
	}
	s = httpapi.Clip(s, 2*len(s)+escapeSlack, terminalSize)
	var b strings.Builder
	for _, r := range s {
		b.WriteString(terminalRune(r))
	}
	return b.String()
}

// escapeSlack lets short text keep all its escapes.
const escapeSlack = 64

// terminalRune is r as terminalSafe writes it.
func terminalRune(r rune) string {
	switch {
	case r == '\n':
		return `\n`
	case r == '\t':
		return `\t`
	case r == '\r':
		return `\r`
	case unprintable(r):
		return fmt.Sprintf(`\u%04x`, r)
	}
	return string(r)
}

// terminalSize is how many bytes terminalSafe writes for r, size bytes in the text.
func terminalSize(r rune, size int) int {
	if r == '\n' || r == '\t' || r == '\r' || unprintable(r) {
		return len(terminalRune(r))
	}
	if r == utf8.RuneError && size == 1 {
		return len(string(utf8.RuneError)) // not UTF-8: written as U+FFFD
	}
	return size
}

// unprintable: control characters and those taskling refuses in new names as invisible (bidi
// controls, zero-width characters, line and paragraph separators).
func unprintable(r rune) bool { return unicode.IsControl(r) || taskling.Invisible(r) }

// terminalWriter is the last line of defence behind terminalSafe: everything a command prints
// (tables, the fields of a show, the JSON output, errors naming a task) goes through it, and the
// characters a terminal would act on or not show — control characters other than newline and
// tab, invisible ones — are written as \uXXXX. Inside a JSON string that is the same string.
// Safe for concurrent use (serve's goroutines may log).
type terminalWriter struct {
	w    io.Writer
	mu   sync.Mutex
	tail []byte // an incomplete UTF-8 sequence that ended the last write
}

func (t *terminalWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	buf := append(t.tail, p...)
	t.tail = nil
	// Hold back a rune split across writes.
	for i := len(buf) - 1; i >= 0 && i >= len(buf)-utf8.UTFMax; i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				t.tail, buf = append([]byte(nil), buf[i:]...), buf[:i]
			}
			break
		}
	}
	if _, err := t.w.Write(escapeForTerminal(buf)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flush writes a rune left incomplete (invalid: escaped as U+FFFD).
func (t *terminalWriter) flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.tail) > 0 {
		_, _ = t.w.Write(escapeForTerminal(t.tail))
		t.tail = nil
	}
}

func escapeForTerminal(b []byte) []byte {
	if !bytes.ContainsFunc(b, func(r rune) bool { return r == utf8.RuneError || (r != '\n' && r != '\t' && unprintable(r)) }) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n == 1: // not UTF-8
			out = append(out, `\ufffd`...)
		case r == '\n' || r == '\t' || !unprintable(r):
			out = append(out, b[:n]...)
		case r > 0xffff: // a surrogate pair, as JSON spells it
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		b = b[n:]
	}
	return out
}

func clock(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

func limitText(n int) string {
	if n == -1 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

func progress(done, total *int64) string {
	switch {
	case done == nil && total == nil:
		return "-"
	case total == nil || *total == 0:
		return fmt.Sprintf("%d", deref(done))
	}
	return fmt.Sprintf("%d/%d (%d%%)", deref(done), *total, httpapi.Percent(deref(done), *total))
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
