package taskling

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/taskling-go/taskling/internal/storedjson"
)

// MaxJSONDepth is how deep a JSON value the library stores — a header (StartOptions.Header,
// SubmitOptions.Header), an object block's value, a list block's items and header — may nest
// arrays and objects: [[1]] is 2 deep. A deeper one is refused with ErrInvalidArgument naming
// the field. Values stored before this bound (or written with SQL) still read.
const MaxJSONDepth = 64

// Every JSON value the library stores (headers, block values, list items) goes into a jsonb
// column, which refuses some JSON that encoding/json accepts. They are refused up front, naming
// the field, rather than failing the statement that stores them; so is a value nested deeper
// than MaxJSONDepth, which no caller needs and which costs every reader.

// encodeJSON encodes v as JSON of at most max bytes and MaxJSONDepth levels that PostgreSQL's
// jsonb can store.
func encodeJSON(field string, v any, max int) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %s cannot be encoded as JSON: %w", ErrInvalidArgument, field, err)
	}
	if len(b) > max {
		return nil, fmt.Errorf("%w: %s is %d bytes of JSON; at most %d allowed", ErrInvalidArgument, field, len(b), max)
	}
	if d := storedjson.Depth(b); d > MaxJSONDepth {
		return nil, fmt.Errorf("%w: %s nests %d levels deep; at most %d allowed", ErrInvalidArgument, field, d, MaxJSONDepth)
	}
	if err := checkJSONB(b); err != nil {
		return nil, fmt.Errorf("%w: %s %s, which PostgreSQL's jsonb cannot store", ErrInvalidArgument, field, err)
	}
	return b, nil
}

// jsonb's limits on numbers (PostgreSQL's numeric): at most 131 072 digits before the decimal
// point and 16 383 after it (counting trailing zeros: jsonb keeps them); an exponent is refused
// outright from INT_MAX/2 on.
const (
	numericMaxIntDigits = 131072
	numericMaxScale     = 16383
	numericMaxExponent  = 1<<30 - 1
)

// checkJSONB reports what jsonb would refuse in b, which is valid JSON (json.Marshal's): invalid
// UTF-8, a \u0000 escape, an escaped surrogate that is not half of a pair, or a number out of
// numeric's range.
func checkJSONB(b []byte) error {
	if !utf8.Valid(b) {
		return fmt.Errorf("is not valid UTF-8")
	}
	for i := 0; i < len(b); {
		switch c := b[i]; {
		case c == '"':
			n, err := checkJSONString(b[i:], i)
			if err != nil {
				return err
			}
			i += n
		case c == '-' || '0' <= c && c <= '9':
			n := numberLength(b[i:])
			if err := checkNumeric(string(b[i : i+n])); err != nil {
				return fmt.Errorf("holds the number %.40s at byte %d: %w", b[i:i+n], i, err)
			}
			i += n
		default:
			i++
		}
	}
	return nil
}

// checkJSONString checks the string that b starts with (at byte at of the value) and returns
// its length in bytes.
func checkJSONString(b []byte, at int) (int, error) {
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '"':
			return i + 1, nil
		case '\\':
			if b[i+1] != 'u' {
				i++
				continue
			}
			r := hex4(b[i+2:])
			switch {
			case r == 0:
				return 0, fmt.Errorf(`contains a NUL character (\u0000 at byte %d)`, at+i)
			case 0xDC00 <= r && r <= 0xDFFF:
				return 0, fmt.Errorf(`holds \u%04x at byte %d, a low surrogate without its high one`, r, at+i)
			case 0xD800 <= r && r <= 0xDBFF:
				if i+11 >= len(b) || b[i+6] != '\\' || b[i+7] != 'u' || hex4(b[i+8:]) < 0xDC00 || hex4(b[i+8:]) > 0xDFFF {
					return 0, fmt.Errorf(`holds \u%04x at byte %d, a high surrogate not followed by a low one`, r, at+i)
				}
				i += 6
			}
			i += 5
		}
	}
	return len(b), nil
}

// hex4 decodes the 4 hex digits of a \u escape (valid JSON has them).
func hex4(b []byte) rune {
	v, err := strconv.ParseUint(string(b[:4]), 16, 32)
	if err != nil {
		return -1
	}
	return rune(v)
}

// numberLength is the length of the JSON number b starts with.
func numberLength(b []byte) int {
	n := 0
	for n < len(b) {
		switch c := b[n]; {
		case '0' <= c && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			n++
		default:
			return n
		}
	}
	return n
}

// checkNumeric checks a JSON number against numeric's range, as PostgreSQL's numeric input
// does: the scale is the digits after the point less the exponent, and the first significant
// digit's place sets the digits before the point.
func checkNumeric(s string) error {
	if s[0] == '-' {
		s = s[1:]
	}
	mantissa, exp := s, 0
	for i := 0; i < len(s); i++ {
		if s[i] == 'e' || s[i] == 'E' {
			mantissa = s[:i]
			e, err := strconv.Atoi(s[i+1:])
			if err != nil || e >= numericMaxExponent || e <= -numericMaxExponent {
				return fmt.Errorf("its exponent is out of range")
			}
			exp = e
			break
		}
	}
	intPart, frac := mantissa, ""
	for i := 0; i < len(mantissa); i++ {
		if mantissa[i] == '.' {
			intPart, frac = mantissa[:i], mantissa[i+1:]
			break
		}
	}
	if scale := len(frac) - exp; scale > numericMaxScale {
		return fmt.Errorf("it has %d digits after the decimal point; at most %d allowed", scale, numericMaxScale)
	}
	digits := intPart + frac
	for i := 0; i < len(digits); i++ {
		if digits[i] != '0' {
			// The place of the first significant digit: 10^place.
			if place := len(intPart) - 1 - i + exp; place >= numericMaxIntDigits {
				return fmt.Errorf("it has %d digits before the decimal point; at most %d allowed", place+1, numericMaxIntDigits)
			}
			break
		}
	}
	return nil
}
