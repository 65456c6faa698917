package httpapi

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/taskling-go/taskling/taskling"
)

// How the pages show stored values and free text (headers, block values, reference values,
// messages, errors): whole, unless escaping them for HTML would make them more than twice as
// long — < is written &lt;, " &#34;, an invisible character \uXXXX — in which case a page shows
// their beginning, ending with "…" (the API's JSON has them whole). So no page is larger, for a
// value it shows, than twice what is stored plus storedSlack; a table cell, whose text the page
// cuts at its width anyway, shows a preview and the value in its title.
const (
	storedSlack   = 256
	previewBudget = 256
)

// storedOnPage is a stored value or text as a page shows it (v: a string, *string, []byte or
// json.RawMessage).
func storedOnPage(v any) string {
	s := textOf(v)
	return Clip(s, 2*len(s)+storedSlack, htmlSize)
}

// previewOnPage is the beginning of a stored value or text, for a table cell.
func previewOnPage(v any) string {
	return Clip(textOf(v), previewBudget, htmlSize)
}

func textOf(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case *string:
		if x != nil {
			return *x
		}
	case []byte:
		return string(x)
	case json.RawMessage:
		return string(x)
	}
	return ""
}

// htmlSize is the size of r, of size bytes in the text, once a page is written: html/template's
// escapes, and the \uXXXX of an invisible character (showInvisible).
func htmlSize(r rune, size int) int {
	switch {
	case r == '<' || r == '>':
		return 4 // &lt;
	case r == '"' || r == '&' || r == '\'' || r == '+':
		return 5 // &#34;
	case r == 0:
		return 3 // U+FFFD
	case taskling.Invisible(r):
		return 6
	}
	return size
}

// Clip returns s if its runes, each written in written(r, its size in s) bytes, take at most
// budget bytes; else the longest beginning of s that takes at most budget bytes with the "…"
// that ends it. The CLI clips the text it escapes for the terminal with it too.
func Clip(s string, budget int, written func(r rune, size int) int) string {
	const ellipsis = "…"
	total, cut := 0, 0
	for i := 0; i < len(s); {
		if total+len(ellipsis) <= budget {
			cut = i
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if total += written(r, size); total > budget {
			return s[:cut] + ellipsis
		}
		i += size
	}
	return s
}
