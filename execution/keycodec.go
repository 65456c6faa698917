package execution

import (
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A keyed task's row keeps text columns of its own format, like its holders and queue (0022):
// key_holders, "E:<execution>,K:<key>,C:<cost>|…", the holders whose key is not empty or whose cost
// is not 1; key_overrides and declared_keys, "K:<key>,L:<limit>|…", limits of named keys. A key is
// written as the hex of its UTF-8 bytes, so that no key can break the format.

// keyHold is what a holder holds under its key.
type keyHold struct {
	key  string
	cost int
}

var errMalformedKeys = errors.New("malformed key column")

// parseKeyHolders parses a key_holders column; "" is none.
func parseKeyHolders(s string) (map[int64]keyHold, error) {
	out := map[int64]keyHold{}
	if s == "" {
		return out, nil
	}
	for i, p := range strings.Split(s, "|") {
		var v [3]string
		if err := keyFields(p, []string{"E", "K", "C"}, v[:]); err != nil {
			return nil, fmt.Errorf("%w: holder %d: %v", errMalformedKeys, i, err)
		}
		exec, err1 := strconv.ParseInt(v[0], 10, 64)
		key, err2 := decodeKey(v[1])
		cost, err3 := strconv.Atoi(v[2])
		if err := errors.Join(err1, err2, err3); err != nil || exec <= 0 || cost < 1 {
			return nil, fmt.Errorf("%w: holder %d (%.100q): bad execution, key or cost", errMalformedKeys, i, p)
		}
		if _, dup := out[exec]; dup {
			return nil, fmt.Errorf("%w: execution %d appears twice", errMalformedKeys, exec)
		}
		out[exec] = keyHold{key: key, cost: cost}
	}
	return out, nil
}

// formatKeyHolders writes the holders of holds that have a key or a cost, in execution order.
func formatKeyHolders(holds map[int64]keyHold) string {
	var b strings.Builder
	for _, exec := range slices.Sorted(maps.Keys(holds)) {
		h := holds[exec]
		if h.key == "" && h.cost == 1 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString("E:" + strconv.FormatInt(exec, 10) + ",K:" + hex.EncodeToString([]byte(h.key)) + ",C:" + strconv.Itoa(h.cost))
	}
	return b.String()
}

// ParseKeyLimits parses a key_overrides or declared_keys column; "" is none.
func ParseKeyLimits(s string) (map[string]int, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]int{}
	for i, p := range strings.Split(s, "|") {
		var v [2]string
		if err := keyFields(p, []string{"K", "L"}, v[:]); err != nil {
			return nil, fmt.Errorf("%w: key %d: %v", errMalformedKeys, i, err)
		}
		key, err := decodeKey(v[0])
		limit, lerr := strconv.Atoi(v[1])
		if err != nil || lerr != nil || limit < 0 {
			return nil, fmt.Errorf("%w: key %d (%.100q): bad key or limit", errMalformedKeys, i, p)
		}
		out[key] = limit
	}
	return out, nil
}

// FormatKeyLimits writes limits of named keys as a key_overrides or declared_keys column, in key
// order.
func FormatKeyLimits(limits map[string]int) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(limits)) {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString("K:" + hex.EncodeToString([]byte(k)) + ",L:" + strconv.Itoa(limits[k]))
	}
	return b.String()
}

func keyFields(p string, keys []string, into []string) error {
	fields := strings.Split(p, ",")
	if len(fields) != len(keys) {
		return fmt.Errorf("%d fields, want %d (%s)", len(fields), len(keys), strings.Join(keys, ", "))
	}
	for i, k := range keys {
		v, ok := strings.CutPrefix(fields[i], k+":")
		if !ok {
			return fmt.Errorf("field %d is not %s:<value>", i, k)
		}
		into[i] = v
	}
	return nil
}

func decodeKey(h string) (string, error) {
	b, err := hex.DecodeString(h)
	if err != nil || !utf8.Valid(b) {
		return "", errors.New("not the hex of UTF-8")
	}
	return string(b), nil
}

// KeyUsage is the cost in use per key as a task row lists its holders (holders, key_holders):
// every holder counts, live or not (a view, not a grant decision).
func KeyUsage(holders, keyHolders string) (map[string]int, error) {
	terms, err := parseTerms(holders)
	if err != nil {
		return nil, err
	}
	holds, err := parseKeyHolders(keyHolders)
	if err != nil {
		return nil, err
	}
	used := map[string]int{}
	for _, t := range terms {
		h, ok := holds[t.exec]
		if !ok {
			h = keyHold{cost: 1}
		}
		used[h.key] += h.cost
	}
	return used, nil
}
