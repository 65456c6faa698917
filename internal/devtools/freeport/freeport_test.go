package freeport

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPortsLieOutsideTheEphemeralRangeAndAreNotHandedOutTwice(t *testing.T) {
	lo, hi, ephemeral := candidates()
	if !ephemeral {
		// What the kernel gives "127.0.0.1:0" is ephemeral, so it must not fall in our span.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		eph := l.Addr().(*net.TCPAddr).Port
		require.NoError(t, l.Close())
		require.False(t, eph >= lo && eph <= hi, "ephemeral port %d lies in %d–%d", eph, lo, hi)
	}
	seen := map[int]bool{}
	for range 50 {
		port, err := Get()
		require.NoError(t, err)
		require.True(t, port >= lo && port <= hi, "port %d outside %d–%d", port, lo, hi)
		require.False(t, seen[port], "port %d handed out twice", port)
		seen[port] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		require.NoError(t, err, "port %d is not free", port)
		require.NoError(t, l.Close())
	}
}
