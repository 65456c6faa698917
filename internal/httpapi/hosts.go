package httpapi

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
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

// Requests from another site: a page elsewhere can make the browser post a form to /login (and
// sign it in as the attacker: a top-level navigation may set even a SameSite=Strict cookie), to
// /logout, or to any change it can reach with the session cookie. Browsers say where a request
// comes from: Sec-Fetch-Site, and Origin on every POST. A request whose Sec-Fetch-Site is neither
// same-origin nor none (a typed address, a bookmark), or whose Origin is not a served host, is
// refused. Clients that send neither header (scripts, with a bearer token) are not browsers
// acting for a page of another site, and pass.

// foreign reports why r comes from a page of another site: the header that says so and a
// message; "" when it does not.
func (h *Handler) foreign(r *http.Request) (field, message string) {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return "Sec-Fetch-Site", "the request comes from a page of another site (Sec-Fetch-Site: " + site + "): use the dashboard's own pages"
	}
	if o := r.Header.Get("Origin"); o != "" && !h.originServed(o, r.Host) {
		return "Origin", "the request comes from a page of another site (Origin: " + o + "), not one of this server's hosts (taskling serve --allowed-hosts): use the dashboard's own pages"
	}
	return "", ""
}

// originServed reports whether an Origin header names a host this server serves: one of the
// allowed hosts (ports ignored, as in the Host check: a TLS-terminating proxy's public name is
// one), or, when any host is allowed, the request's own Host, port included.
func (h *Handler) originServed(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.User != nil {
		return false // "null" (a sandboxed or opaque origin) included
	}
	if h.hosts != nil {
		return h.hosts[hostOnly(u.Host)]
	}
	if hostOnly(u.Host) != hostOnly(host) {
		return false
	}
	port := func(hostport, def string) string {
		if _, p, err := net.SplitHostPort(hostport); err == nil && p != "" {
			return p
		}
		return def
	}
	def := "80"
	if u.Scheme == "https" {
		def = "443"
	}
	// A Host without a port is the default port of the scheme the browser used: the Origin's.
	return port(u.Host, def) == port(host, def)
}
