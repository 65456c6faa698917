package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

var errNotFound = taskling.ErrNotFound

// printJSON writes v indented, as the HTTP API does.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
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
// (bidirectional overrides) — so that stored text (reference values, messages) prints as data.
func terminalSafe(s string) string {
	if !strings.ContainsFunc(s, unprintable) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case unprintable(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func unprintable(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }

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
