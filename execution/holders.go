package execution

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A task row keeps, next to its token list, the liveness terms of every execution that may hold
// one of its slots: task_definition.holders, "E:<execution>,P:<session>,A:<grant µs>,D:<threshold
// µs>|…". A holder is alive while the database clock is within D of max(A, its session's last
// heartbeat); a holder in Override mode has no session (P:0) and is alive within D of A. So a
// token transaction judges every holder from its own task row plus the heartbeat of the holders'
// sessions — rows that only heartbeats (never token transactions) write — and reads nothing
// that unrelated tasks write.

// term is one holder's liveness terms.
type term struct {
	exec      int64
	session   int64 // 0: Override mode, judged by its grant time alone
	grantedUS int64 // DB clock at the grant, µs since the Unix epoch; pendingUS until written
	threshold time.Duration
}

// pendingUS marks a term granted in the transaction being planned: the statement that writes the
// holders puts the database clock in its place (grantMark), so that a holder's lease is measured
// on the database from a moment after the client sent the write (the client measures its lease
// from the send).
const pendingUS = -1

const grantMark = "A:@"

// errMalformedHolders is wrapped by every parse error of a holders column.
var errMalformedHolders = errors.New("malformed holders")

// HolderExecutions are the executions a holders column (task_definition.holders) lists.
func HolderExecutions(holders string) ([]int64, error) {
	terms, err := parseTerms(holders)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(terms))
	for i, t := range terms {
		ids[i] = t.exec
	}
	return ids, nil
}

// parseTerms parses a holders column; "" is no holder.
func parseTerms(s string) ([]term, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, "|")
	out := make([]term, 0, len(parts))
	seen := make(map[int64]bool, len(parts))
	for i, p := range parts {
		t, err := parseTerm(p)
		if err == nil && seen[t.exec] {
			err = fmt.Errorf("execution %d appears twice", t.exec)
		}
		if err != nil {
			if len(p) > 100 {
				p = p[:100]
			}
			return nil, fmt.Errorf("%w: holder %d (%q): %v", errMalformedHolders, i, p, err)
		}
		seen[t.exec] = true
		out = append(out, t)
	}
	return out, nil
}

func parseTerm(s string) (term, error) {
	var t term
	fields := strings.Split(s, ",")
	if len(fields) != 4 {
		return t, fmt.Errorf("%d fields, want 4 (E, P, A, D)", len(fields))
	}
	var vals [4]int64
	for i, key := range [4]string{"E", "P", "A", "D"} {
		v, ok := strings.CutPrefix(fields[i], key+":")
		if !ok {
			return t, fmt.Errorf("field %d is not %s:<number>", i, key)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || v == "" || v[0] < '0' || v[0] > '9' {
			return t, fmt.Errorf("field %s: %q is not a non-negative integer", key, v)
		}
		vals[i] = n
	}
	if vals[0] <= 0 {
		return t, errors.New("field E: execution id must be positive")
	}
	if vals[3] <= 0 {
		return t, errors.New("field D: threshold must be positive")
	}
	return term{exec: vals[0], session: vals[1], grantedUS: vals[2], threshold: time.Duration(vals[3]) * time.Microsecond}, nil
}

// formatTerms writes terms in order; pending grants get the grant mark.
func formatTerms(ts []term) string {
	var b strings.Builder
	for i, t := range ts {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString("E:")
		b.WriteString(strconv.FormatInt(t.exec, 10))
		b.WriteString(",P:")
		b.WriteString(strconv.FormatInt(t.session, 10))
		if t.grantedUS == pendingUS {
			b.WriteString("," + grantMark)
		} else {
			b.WriteString(",A:")
			b.WriteString(strconv.FormatInt(t.grantedUS, 10))
		}
		b.WriteString(",D:")
		b.WriteString(strconv.FormatInt(t.threshold.Microseconds(), 10))
	}
	return b.String()
}

// expiresIn is how long, from nowUS, until the holder may be judged dead (negative once dead),
// given its session's last heartbeat (0 if unknown).
func (t term) expiresIn(nowUS, heartbeatUS int64) time.Duration {
	if t.grantedUS == pendingUS {
		return t.threshold
	}
	last := t.grantedUS
	if t.session != 0 {
		last = max(last, heartbeatUS)
	}
	return time.Duration(last-nowUS)*time.Microsecond + t.threshold
}
