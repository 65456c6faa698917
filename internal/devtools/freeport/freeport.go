// Package freeport picks TCP ports on 127.0.0.1 for the servers the tests start (PostgreSQL,
// Patroni's REST API, etcd, PgBouncer).
//
// A port the kernel hands out for "127.0.0.1:0" lies in its ephemeral range, the same range it
// takes local ports from for outgoing connections. A server that is stopped and started again on
// its port (a Patroni node after a kill, say) can then find it taken by some client's connection
// and fail to bind. The ports here lie outside that range, so only another listener can take them.
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

// Below the ephemeral range by default, above the well-known and most registered ports.
const (
	lowest   = 10000
	attempts = 200
)

var (
	mu     sync.Mutex
	handed = map[int]bool{} // ports this process handed out, which it may not have bound yet
)

// Get returns a port on 127.0.0.1 that nothing listens on now, outside the kernel's ephemeral
// range, and not returned before in this process.
func Get() (int, error) {
	lo, hi := candidates()
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

// candidates is the widest span of ports outside the ephemeral range, which Linux reports in
// /proc/sys/net/ipv4/ip_local_port_range (32768–60999 by default).
func candidates() (lo, hi int) {
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
	below, above := ephLo-lowest, 65535-ephHi
	switch {
	case below >= above && below > 0:
		return lowest, ephLo - 1
	case above > 0:
		return ephHi + 1, 65535
	default:
		// The whole range is ephemeral: pick from it anyway.
		return lowest, 65535
	}
}
