// Package storedjson reads the JSON values the library stored in jsonb columns (headers, block
// values), for the stores that scan them into package tasklingtype's types; measures how deep a
// value nests, for the library's bound on what it stores; and writes the HTTP API's and the
// CLI's JSON so that a stored value is written as stored, never re-indented.
package storedjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// Read returns a JSON value read from a jsonb column (nil for none) or, when encoding/json
// cannot read it (nested deeper than its limit of 10 000: jsonb stores deeper values written with
// SQL), nil and why: the row still shows, with its error, and encodes as JSON.
func Read(b []byte) (json.RawMessage, string) {
	if len(b) == 0 {
		return nil, ""
	}
	if !json.Valid(b) {
		err := json.Compact(new(bytes.Buffer), b)
		return nil, fmt.Sprintf("the stored JSON (%d bytes) cannot be read: %v", len(b), err)
	}
	return b, ""
}

// Depth is how deep the JSON value b nests arrays and objects: 0 for a scalar, 1 for [1] or
// {"a": 1}, 2 for [[1]]. One pass over the bytes, skipping strings, with no recursion, so that a
// value nested 100 000 deep costs what its bytes cost. For invalid JSON it counts the brackets
// outside strings all the same.
func Depth(b []byte) int {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = stringEnd(b, i) - 1
		case '[', '{':
			if depth++; depth > deepest {
				deepest = depth
			}
		case ']', '}':
			depth--
		}
	}
	return deepest
}

// stringEnd is the index just past the JSON string that starts at b[i] (len(b) if unterminated).
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// storedKeys are the keys under which the API's shapes (package httpapi) hold a stored JSON
// value: an execution's or a submission's header, a block's value.
var storedKeys = map[string]bool{"header": true, "value": true}

// Encode writes v as JSON followed by a newline, without HTML escaping (<, > and & are written
// as they are), its envelope indented by two spaces as json.MarshalIndent would, and every stored
// JSON value — the value of a key "header" or "value" — compact, as stored, never re-indented:
// re-indenting a value nested n deep writes about n² bytes, and HTML escaping turns one byte
// into six. So no stored value is written larger than jsonb stores it (jsonb's text has a space
// after each colon and comma, which compact JSON has not).
func Encode(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(indentEnvelope(buf.Bytes()))
	return err
}

// indentEnvelope indents src, compact JSON as encoding/json writes it, like json.Indent with
// two spaces, except the arrays and objects under a stored key, which it copies as they are.
func indentEnvelope(src []byte) []byte {
	out := make([]byte, 0, len(src)+len(src)/2)
	depth := 0
	stored := false // the next value is a stored key's
	newline := func() {
		out = append(out, '\n')
		for range depth {
			out = append(out, ' ', ' ')
		}
	}
	for i := 0; i < len(src); {
		switch c := src[i]; c {
		case '"':
			end := stringEnd(src, i)
			out = append(out, src[i:end]...)
			// A key: encoding/json writes a colon right after it.
			stored = end < len(src) && src[end] == ':' && storedKeys[string(src[i+1:end-1])]
			i = end
			continue
		case '[', '{':
			if stored {
				end := valueEnd(src, i)
				out = append(out, src[i:end]...)
				i, stored = end, false
				continue
			}
			if i+1 < len(src) && (src[i+1] == ']' || src[i+1] == '}') {
				out = append(out, c, src[i+1])
				i += 2
				continue
			}
			out = append(out, c)
			depth++
			newline()
		case ']', '}':
			depth--
			newline()
			out = append(out, c)
		case ',':
			out = append(out, c)
			newline()
		case ':':
			out = append(out, ':', ' ')
			i++
			continue // the value that follows may be a stored one
		default:
			out = append(out, c)
		}
		stored = false
		i++
	}
	return out
}

// valueEnd is the index just past the array or object that starts at src[i].
func valueEnd(src []byte, i int) int {
	depth := 0
	for ; i < len(src); i++ {
		switch src[i] {
		case '"':
			i = stringEnd(src, i) - 1
		case '[', '{':
			depth++
		case ']', '}':
			if depth--; depth == 0 {
				return i + 1
			}
		}
	}
	return len(src)
}
