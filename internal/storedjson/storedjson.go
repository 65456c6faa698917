// Package storedjson reads the JSON values the library stored in jsonb columns (headers, block
// values), for the stores that scan them into package tasklingtype's types, and measures how
// deep a value nests, for the library's bound on what it stores.
package storedjson

import (
	"bytes"
	"encoding/json"
	"fmt"
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
