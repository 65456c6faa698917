// Package storedjson reads the JSON values the library stored in jsonb columns (headers, block
// values), for the stores that scan them into package tasklingtype's types.
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
