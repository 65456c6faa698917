package httpapi

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// Who a request comes from, for the count of refused credentials and the log. By default the
// connection's peer. Behind proxies listed in Options.TrustedProxies, X-Forwarded-For is read
// right to left — each proxy appends the address it got the request from, so only the entries a
// trusted proxy wrote can be believed — and the first address not in those ranges is the client.
// The leftmost entry, which the client itself may have written, is never taken on its own word.

// remote is a request's client address.
type remote struct {
	addr string // as logged: the address, or RemoteAddr when it is none
	key  string // what refused credentials are counted by: the address, an IPv6 address's /64
}

// trustedProxies parses Options.TrustedProxies: CIDR ranges or single addresses.
func trustedProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil || a.Zone() != "" {
				return nil, fmt.Errorf("httpapi: Options.TrustedProxies: %q is not a CIDR range (10.0.0.0/8, fd00::/8) or an address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		// A range of IPv4-mapped addresses names the IPv4 addresses they map, as those are
		// compared unmapped.
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// remote returns the request's client address.
func (h *Handler) remote(r *http.Request) remote {
	a, ok := parseHop(r.RemoteAddr)
	if !ok {
		return remote{addr: r.RemoteAddr, key: r.RemoteAddr} // not IP (a test, a Unix socket)
	}
	if h.trusted(a) {
		a = h.forwardedFor(r, a)
	}
	key := a.String()
	if a.Is6() {
		key = netip.PrefixFrom(a, 64).Masked().String() // one host's addresses, usually
	}
	return remote{addr: a.String(), key: key}
}

// forwardedFor walks X-Forwarded-For (every header line, each a comma-separated list) right to
// left from peer, a trusted proxy, and returns the first address not trusted. A malformed entry
// stops the walk at the last trusted hop; when every entry is trusted, the leftmost is the client.
func (h *Handler) forwardedFor(r *http.Request, peer netip.Addr) netip.Addr {
	lines := r.Header.Values("X-Forwarded-For")
	client := peer
	for i := len(lines) - 1; i >= 0; i-- {
		entries := strings.Split(lines[i], ",")
		for j := len(entries) - 1; j >= 0; j-- {
			if strings.TrimSpace(entries[j]) == "" {
				continue
			}
			hop, ok := parseHop(entries[j])
			if !ok {
				return client
			}
			client = hop
			if !h.trusted(hop) {
				return client
			}
		}
	}
	return client
}

func (h *Handler) trusted(a netip.Addr) bool {
	for _, p := range h.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHop reads an address as RemoteAddr or X-Forwarded-For give it: "192.0.2.7",
// "192.0.2.7:51000", "2001:db8::7", "[2001:db8::7]:51000"; IPv4-mapped IPv6 addresses read as
// IPv4, and a zone is dropped.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, perr := netip.ParseAddrPort(s)
		if perr != nil {
			a, err = netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
			if err != nil {
				return netip.Addr{}, false
			}
		} else {
			a = ap.Addr()
		}
	}
	return a.Unmap().WithZone(""), true
}
