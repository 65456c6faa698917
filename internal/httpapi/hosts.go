package httpapi

import (
	"fmt"
	"net"
	"strings"
)

// The Host check: a server without a token answers reads to anyone who reaches it, so a page of
// another site whose name has been pointed at the server's address (DNS rebinding) could read it
// from a victim's browser. Such a request names the other site in its Host header: only the
// names the server is reached by are served, others get 421 Misdirected Request.

// allowedHosts returns the set of allowed host names (no port, lowercase): nil allows any, as
// does "*" among them.
func allowedHosts(names []string) (map[string]bool, error) {
	if len(names) == 0 {
		return nil, nil
	}
	set := map[string]bool{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "*" {
			return nil, nil
		}
		h := hostOnly(n)
		if h == "" || strings.ContainsAny(h, "/?#@ \t") {
			return nil, fmt.Errorf("httpapi: Options.AllowedHosts: %q is not a host name or address", n)
		}
		set[h] = true
	}
	return set, nil
}

// hostOnly is a Host header's host without its port or brackets, lowercase, without a
// trailing dot.
func hostOnly(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

func (h *Handler) hostAllowed(host string) bool {
	return h.hosts == nil || h.hosts[hostOnly(host)]
}
