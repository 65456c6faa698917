package tokens

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// ErrMalformed matches every error Parse returns (errors.Is).
var ErrMalformed = errors.New("tokens: malformed token list")

// maxTokenText bounds the token text kept in a FormatError, so a corrupted multi-megabyte
// column cannot flood the logs.
const maxTokenText = 100

// FormatError describes why Parse rejected a list. It matches ErrMalformed.
type FormatError struct {
	Index  int    // 0-based index of the offending token
	Token  string // the offending token text, truncated to 100 bytes
	Field  string // "I", "S", "G" or "token" (structure)
	Reason string
}

func (e *FormatError) Error() string {
	if e.Field == "token" {
		return fmt.Sprintf("tokens: token %d (%q): %s", e.Index, e.Token, e.Reason)
	}
	return fmt.Sprintf("tokens: token %d (%q): field %s: %s", e.Index, e.Token, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrMalformed) true.
func (e *FormatError) Is(target error) bool { return target == ErrMalformed }

// Parse parses "I:<uuid>,S:<status>,G:<execution id>|I:…"; "" is the empty, initial list.
//
// It is strict: within a token the parts may come in any order, but I, S and G each appear
// exactly once; I is a UUID in its 36-character form, S is 0 to 3, G is a non-negative int64
// in decimal digits. Empty tokens, whitespace, repeated token ids and an Unlimited token next to
// any other token are rejected. Every error is a *FormatError.
func Parse(s string) (List, error) {
	if s == "" {
		return List{}, nil
	}
	texts := strings.Split(s, "|")
	l := List{Tokens: make([]Token, 0, len(texts))}
	index := make(map[uuid.UUID]int, len(texts))
	for i, text := range texts {
		t, field, reason := parseToken(text)
		if reason == "" {
			if j, dup := index[t.ID]; dup {
				field, reason = "I", fmt.Sprintf("duplicate token id (also token %d)", j)
			} else if t.Status == Unlimited && len(texts) > 1 {
				field, reason = "S", "an unlimited token must be the only token"
			}
		}
		if reason != "" {
			return List{}, &FormatError{Index: i, Token: truncate(text), Field: field, Reason: reason}
		}
		index[t.ID] = i
		l.Tokens = append(l.Tokens, t)
	}
	return l, nil
}

// parseToken parses one token; a non-empty reason means it is malformed in field.
func parseToken(text string) (t Token, field, reason string) {
	if text == "" {
		return t, "token", "empty token"
	}
	parts := strings.Split(text, ",")
	if len(parts) != 3 {
		return t, "token", fmt.Sprintf("has %d comma-separated parts, want 3 (I, S and G)", len(parts))
	}
	seen := map[string]bool{}
	for _, p := range parts {
		key, val, ok := strings.Cut(p, ":")
		switch {
		case !ok:
			return t, "token", fmt.Sprintf("part %q is not KEY:VALUE", truncate(p))
		case key != "I" && key != "S" && key != "G":
			return t, "token", fmt.Sprintf("unknown field %q", truncate(key))
		case seen[key]:
			return t, key, "appears twice"
		case val == "":
			return t, key, "empty value"
		}
		seen[key] = true
		switch key {
		case "I":
			id, err := uuid.Parse(val)
			// uuid.Parse also takes braces, urn: and bare hex; only our canonical form is valid.
			if err != nil || len(val) != 36 {
				return t, key, "invalid UUID"
			}
			t.ID = id
		case "S":
			if len(val) != 1 || val[0] < '0' || val[0] > '3' {
				return t, key, fmt.Sprintf("invalid status %q, want 0 to 3", truncate(val))
			}
			t.Status = Status(val[0] - '0')
		case "G":
			g, err := strconv.ParseInt(val, 10, 64)
			// ParseInt accepts a sign; an execution id is plain digits.
			if err != nil || val[0] < '0' || val[0] > '9' {
				return t, key, fmt.Sprintf("invalid execution id %q, want a non-negative 64-bit integer", truncate(val))
			}
			t.Grantee = g
		}
	}
	return t, "", ""
}

func truncate(s string) string {
	if len(s) > maxTokenText {
		return s[:maxTokenText]
	}
	return s
}

// String returns the canonical form of the list, "" for the empty list.
func (l List) String() string {
	var b strings.Builder
	b.Grow(len(l.Tokens) * 64)
	for i, t := range l.Tokens {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString("I:")
		b.WriteString(t.ID.String())
		b.WriteString(",S:")
		b.WriteString(strconv.Itoa(int(t.Status)))
		b.WriteString(",G:")
		b.WriteString(strconv.FormatInt(t.Grantee, 10))
	}
	return b.String()
}
