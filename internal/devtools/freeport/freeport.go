// Package freeport picks TCP ports on 127.0.0.1 for the servers the tests start (PostgreSQL,
// Patroni's REST API, etcd, PgBouncer, Prometheus, the chaos tests' proxies).
//
// A port the kernel hands out for "127.0.0.1:0" lies in its ephemeral range, the same range it
// takes local ports from for outgoing connections. A server that is stopped and started again on
// its port (a Patroni node after a kill, a proxy cut and healed) can then find it taken by some
// client's connection and fail to bind. The ports here lie outside that range, so only another
// listener can take them: one of this process's is never handed out twice, but another process
// (a test package running beside this one) may still pick a port this one has not bound yet.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

const (
	lowest   = 10000 // clear of the ports system services commonly use
	minSpan  = 1000  // a span outside the ephemeral range narrower than this is not used
	attempts = 200
)

var (
	mu     sync.Mutex
	handed = map[int]bool{} // ports this process handed out, which it may not have bound yet
)

// Get returns a port on 127.0.0.1 that nothing listens on now, outside the kernel's ephemeral
// range, and not returned before in this process.
func Get() (int, error) {
	lo, hi, _ := candidates()
	mu.Lock()
	defer mu.Unlock()
	for range attempts {
		port := lo + rand.IntN(hi-lo+1)
		if handed[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		_ = l.Close()
		handed[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("freeport: no free port in %d–%d after %d tries", lo, hi, attempts)
}

// candidates is the wider of the spans from lowest up to 65535 that lie below and above the
// ephemeral range, which Linux reports in /proc/sys/net/ipv4/ip_local_port_range (32768–60999 by
// default). ephemeral reports that neither is minSpan wide, so the span overlaps the range.
func candidates() (lo, hi int, ephemeral bool) {
	ephLo, ephHi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			l, err1 := strconv.Atoi(f[0])
			h, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && l <= h {
				ephLo, ephHi = l, h
			}
		}
	}
	belowLo, belowHi := lowest, ephLo-1
	aboveLo, aboveHi := max(ephHi+1, lowest), 65535
	below, above := belowHi-belowLo+1, aboveHi-aboveLo+1
	switch {
	case below >= minSpan && below >= above:
		return belowLo, belowHi, false
	case above >= minSpan:
		return aboveLo, aboveHi, false
	default:
		return lowest, 65535, true
	}
}
