package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/taskling-go/taskling/dashboard"
	"github.com/taskling-go/taskling/taskling"
)

// serveFlags are the flags of `taskling serve`.
type serveFlags struct {
	addr           string
	principalsFile string
	tlsCert        string
	tlsKey         string
	allowedHosts   string
	trustedProxies string
	protectReads   bool
	publicReads    bool
	publicMetrics  bool
	refresh        time.Duration
}

func newServeCommand(e *env) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve [--addr HOST:PORT] [--principals FILE] [--tls-cert FILE --tls-key FILE] [--allowed-hosts H,…] [--trusted-proxies CIDR,…] [--public-reads | --public-metrics]",
		Short: "Serve the HTTP JSON API, the web dashboard and /metrics",
		Long: `Serve the HTTP JSON API (/api/v1/), the web dashboard (/) and Prometheus metrics (/metrics).

Principals may sign in: those of the --principals file (see 'taskling tokens'), each of the read
or the operate role, and TASKLING_API_TOKEN (at least 32 bytes, e.g. from
'openssl rand -base64 32'), the operator "token". With either, every request needs a principal's
token: scripts and Prometheus send "Authorization: Bearer TOKEN", browsers sign in once on the
dashboard. Changes need the operate role (read gets 403). --public-reads serves reads (API,
dashboard, /metrics) without a token; --public-metrics serves /metrics alone without one. With
neither, the server is read-only and every read is public. An edit of the principals file takes
effect within a second or two of the next request; a removed principal's sessions end.

--tls-cert and --tls-key (both or neither) serve HTTPS; session cookies are then Secure, and
every response carries Strict-Transport-Security: max-age=31536000 (a year).
Requests whose Host is not one of --allowed-hosts get 421 (default: the host of --addr unless
it listens on every address, localhost, 127.0.0.1 and ::1; "*" allows any). A browser's sign-in,
sign-out or change through its session from a page of another site gets 403: Sec-Fetch-Site
other than same-origin or none, or an Origin not one of those hosts (with "*": not the request's
Host). Behind a proxy that changes the Host, list its public name in --allowed-hosts.

Only wrong tokens are throttled; a right one always passes. After 10 wrong tokens within a
minute from one address (an IPv6 address by its /64), that address's wrong tokens get 429 for
60 s; after 1000 from all addresses within a minute, every wrong token does. The address is the
connection's; behind proxies listed in --trusted-proxies (CIDR ranges or addresses), it is
read from X-Forwarded-For, right to left: the first address not in those ranges.
A principal keeps at most 20 browser sessions: a sign-in past them ends its oldest.
Stops on SIGINT or SIGTERM.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error { return e.serve(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "addr", "127.0.0.1:8080", "listen address")
	fl.StringVar(&f.principalsFile, "principals", "", "principals file: who may sign in, with which role (see 'taskling tokens')")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "serve HTTPS with this certificate (PEM; with --tls-key)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "the certificate's private key (PEM; with --tls-cert)")
	fl.StringVar(&f.allowedHosts, "allowed-hosts", "", `host names requests may name (comma-separated; "*": any; default: the host of --addr unless it listens on every address, localhost, 127.0.0.1 and ::1)`)
	fl.StringVar(&f.trustedProxies, "trusted-proxies", "", "CIDR ranges or addresses of the proxies in front of the server (comma-separated): behind them the client is read from X-Forwarded-For, right to left")
	fl.BoolVar(&f.publicReads, "public-reads", false, "serve reads (API, dashboard, /metrics) without a token")
	fl.BoolVar(&f.publicMetrics, "public-metrics", false, "serve /metrics without a token")
	fl.BoolVar(&f.protectReads, "protect-reads", false, "deprecated: reads are protected whenever there are principals")
	_ = fl.MarkHidden("protect-reads")
	fl.DurationVar(&f.refresh, "refresh", 2*time.Second, "the dashboard's auto-refresh interval")
	return cmd
}

func (e *env) serve(ctx context.Context, f serveFlags) error {
	token := e.getenv("TASKLING_API_TOKEN")
	if n := len(token); n > 0 && n < dashboard.MinTokenLength {
		return usageErrorf("TASKLING_API_TOKEN is %d bytes; want at least %d (for example: openssl rand -base64 32)", n, dashboard.MinTokenLength)
	}
	if f.protectReads {
		fmt.Fprintln(e.stderr, "taskling: --protect-reads is deprecated and does nothing: reads are protected whenever there are principals (--public-reads opens them)")
	}
	tlsConfig, err := serveTLS(f.tlsCert, f.tlsKey)
	if err != nil {
		return err
	}
	hosts, err := serveHosts(f.addr, f.allowedHosts)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, e.timeout)
	pool, err := e.connect(cctx)
	cancel()
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: hostName(e)})
	if err != nil {
		return err
	}
	defer client.Close()
	log, _ := zap.NewProduction()
	defer func() { _ = log.Sync() }()
	h, err := dashboard.NewHandler(client, &dashboard.Options{Token: token, PrincipalsFile: f.principalsFile, AllowedHosts: hosts,
		TrustedProxies: splitList(f.trustedProxies), PublicReads: f.publicReads, PublicMetrics: f.publicMetrics, Logger: log, RefreshInterval: f.refresh})
	if err != nil {
		return usageErrorf("%v", err)
	}
	if tlsConfig != nil {
		h = strictTransport(h)
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return usageErrorf("--addr: %v", err)
	}
	scheme := "http"
	if tlsConfig != nil {
		scheme = "https"
	}
	signIn := token != "" || f.principalsFile != ""
	fmt.Fprintf(e.stderr, "taskling: serving on %s://%s (%s; hosts %s)\n", scheme, ln.Addr(), serveMode(signIn, f.publicReads, f.publicMetrics), orAny(hosts))
	srv := &http.Server{Handler: h, TLSConfig: tlsConfig, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute}
	done := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			done <- srv.ServeTLS(ln, "", "")
			return
		}
		done <- srv.Serve(ln)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// hstsMaxAge is the Strict-Transport-Security a server with --tls-cert sends: browsers that
// saw it use HTTPS for the host for a year. Not includeSubDomains: the other hosts of the domain
// are not the server's to decide.
const hstsMaxAge = "max-age=31536000"

// strictTransport sends Strict-Transport-Security on every response (only ever over TLS:
// plain HTTP to the port is refused before any handler).
func strictTransport(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Strict-Transport-Security", hstsMaxAge)
		h.ServeHTTP(w, r)
	})
}

// splitList splits a comma-separated flag, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// serveTLS loads the certificate and its key: both or neither.
func serveTLS(cert, key string) (*tls.Config, error) {
	switch {
	case cert == "" && key == "":
		return nil, nil
	case cert == "" || key == "":
		return nil, usageErrorf("--tls-cert and --tls-key go together: give both (HTTPS) or neither (HTTP)")
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, usageErrorf("--tls-cert, --tls-key: %v", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// serveHosts is the Host check's list: --allowed-hosts, else the host of the listen address
// (unless it listens on every address) and the loopback names. nil allows any ("*").
func serveHosts(addr, allowed string) ([]string, error) {
	if allowed != "" {
		var hosts []string
		for _, h := range strings.Split(allowed, ",") {
			if h = strings.TrimSpace(h); h == "*" {
				return nil, nil
			} else if h != "" {
				hosts = append(hosts, h)
			}
		}
		if len(hosts) == 0 {
			return nil, usageErrorf("--allowed-hosts %q names no host", allowed)
		}
		return hosts, nil
	}
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, usageErrorf("--addr: %v", err)
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		hosts = append([]string{host}, slices.DeleteFunc(hosts, func(h string) bool { return h == host })...)
	}
	return hosts, nil
}

func orAny(hosts []string) string {
	if hosts == nil {
		return "any"
	}
	return strings.Join(hosts, ", ")
}

func serveMode(signIn, publicReads, publicMetrics bool) string {
	switch {
	case !signIn:
		return "read-only: no principals, every read is public"
	case publicReads:
		return "reads public, changes need an operator's token"
	case publicMetrics:
		return "everything but /metrics needs a token"
	}
	return "every request needs a token"
}
