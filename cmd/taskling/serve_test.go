package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/testutil"
)

// selfSigned writes a certificate for 127.0.0.1 and localhost, and its key, under dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "taskling test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// serveInBackground runs `taskling serve` with args until the test ends and returns its base URL.
func serveInBackground(t *testing.T, dbURL string, env map[string]string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &testutil.SyncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), &bytes.Buffer{}, out, func(k string) string {
			if k == "TASKLING_DATABASE_URL" {
				return dbURL
			}
			return env[k]
		})
	}()
	t.Cleanup(func() {
		cancel()
		require.Equal(t, exitOK, <-done, out.String())
	})
	serving := regexp.MustCompile(`serving on (https?://\S+) `)
	var base string
	require.Eventually(t, func() bool {
		m := serving.FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil || strings.Contains(out.String(), "taskling: ")
	}, 10*time.Second, 20*time.Millisecond)
	require.NotEmpty(t, base, out.String())
	return base
}

// TestServeChecksTheHost is issue 23 item 4: a token-less `taskling serve` answered any Host, so
// a page whose name was pointed at it (DNS rebinding) could read everything from a browser.
// Now a Host other than the listen address's, localhost, 127.0.0.1 and ::1 gets 421, unless
// --allowed-hosts names it.
func TestServeChecksTheHost(t *testing.T) {
	t.Parallel()
	f := setup(t)
	get := func(base, host string) int {
		req, err := http.NewRequest("GET", base+"/api/v1/tasks", nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Empty(t, resp.Header.Values("Strict-Transport-Security"), "never over plain HTTP")
		return resp.StatusCode
	}
	base := serveInBackground(t, f.url, nil)
	port := base[strings.LastIndexByte(base, ':'):]
	require.Equal(t, http.StatusOK, get(base, "127.0.0.1"+port))
	require.Equal(t, http.StatusOK, get(base, "localhost"+port))
	require.Equal(t, http.StatusMisdirectedRequest, get(base, "rebind.evil.example"+port))

	named := serveInBackground(t, f.url, nil, "--allowed-hosts", "taskling.internal, rebind.evil.example")
	require.Equal(t, http.StatusOK, get(named, "taskling.internal"))
	require.Equal(t, http.StatusMisdirectedRequest, get(named, "localhost"), "the list replaces the default")
	open := serveInBackground(t, f.url, nil, "--allowed-hosts", "*")
	require.Equal(t, http.StatusOK, get(open, "anything.example"))
}

// TestServeSpeaksTLS is issue 23 item 4: `taskling serve` had no TLS of its own. With
// --tls-cert and --tls-key it serves HTTPS only, and the session cookie is Secure; one without
// the other is a usage error. And issue 40 item 9: every response over TLS carries
// Strict-Transport-Security, so that a browser never tries plain HTTP to the host again.
func TestServeSpeaksTLS(t *testing.T) {
	t.Parallel()
	f := setup(t)
	certFile, keyFile, roots := selfSigned(t, t.TempDir())
	principals := filepath.Join(t.TempDir(), "principals.toml")
	code, tok, errOut := cli(t, "", "tokens", "add", "alice", "--role", "operate", "--file", principals)
	require.Equal(t, exitOK, code, errOut)
	tok = strings.TrimSpace(tok)

	base := serveInBackground(t, f.url, nil, "--tls-cert", certFile, "--tls-key", keyFile, "--principals", principals)
	require.True(t, strings.HasPrefix(base, "https://"), base)
	client := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.PostForm(base+"/login", url.Values{"token": {tok}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Set-Cookie"), "; Secure")
	require.Equal(t, "max-age=31536000", resp.Header.Get("Strict-Transport-Security"))
	for _, path := range []string{"/login", "/api/v1/tasks", "/static/dashboard.css", "/api/v1/nothing"} {
		resp, err = client.Get(base + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, "max-age=31536000", resp.Header.Get("Strict-Transport-Security"), "%s: %d", path, resp.StatusCode)
	}
	resp, err = http.Get("http://" + strings.TrimPrefix(base, "https://") + "/api/v1/tasks")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP to the TLS port")

	code, _, errOut = cli(t, f.url, "serve", "--addr", "127.0.0.1:0", "--tls-cert", certFile)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--tls-cert and --tls-key go together")
	code, _, errOut = cli(t, f.url, "serve", "--addr", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", certFile)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--tls-cert, --tls-key:")
}

// TestServeTrustedProxiesAreChecked: --trusted-proxies takes CIDR ranges and addresses; anything
// else is a usage error naming it.
func TestServeTrustedProxiesAreChecked(t *testing.T) {
	t.Parallel()
	f := setup(t)
	serveInBackground(t, f.url, nil, "--trusted-proxies", "10.0.0.0/8, 192.0.2.7,fd00::/8")
	code, _, errOut := cli(t, f.url, "serve", "--addr", "127.0.0.1:0", "--trusted-proxies", "10.0.0.0/8,proxy.internal")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `TrustedProxies: "proxy.internal" is not a CIDR range`)
}
