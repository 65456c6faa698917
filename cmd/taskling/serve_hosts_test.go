package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServeNamesEachAllowedHostOnce is issue 40: serving on 127.0.0.1 printed "hosts 127.0.0.1,
// localhost, 127.0.0.1, ::1" — the listen address's host, then the loopback names, one of them
// again.
func TestServeNamesEachAllowedHostOnce(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1:8080":   "127.0.0.1, localhost, ::1",
		"localhost:8080":   "localhost, 127.0.0.1, ::1",
		"[::1]:8080":       "::1, localhost, 127.0.0.1",
		"example.com:8080": "example.com, localhost, 127.0.0.1, ::1",
		":8080":            "localhost, 127.0.0.1, ::1",
	} {
		hosts, err := serveHosts(addr, "")
		require.NoError(t, err)
		require.Equal(t, want, orAny(hosts), addr)
	}
}
