package execution

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A batch with more acquisitions than the ids reserved ahead takes the usual path, which reserves
// more: enough that the next batches of that size find their ids and take the fast path.
func TestIDsReservedAheadGrowWithTheBatches(t *testing.T) {
	var c rowCache
	require.Equal(t, reserveAhead, c.toReserve(), "nothing reserved yet")
	c.ids = make([]int64, reserveAhead)
	require.Zero(t, c.toReserve())

	_, ok := c.takeIDs(30, epoch{})
	require.False(t, ok, "16 ids reserved cannot serve 30 acquisitions")
	require.Equal(t, 60, c.toReserve(), "16 left is fewer than half of the 60 the next reservation makes")
	c.ids = make([]int64, 16+60)
	ids, ok := c.takeIDs(30, epoch{})
	require.True(t, ok)
	require.Len(t, ids, 30)
	require.Zero(t, c.toReserve(), "46 left of a reservation of 60")

	_, ok = c.takeIDs(maxBatch+10, epoch{})
	require.False(t, ok)
	require.Equal(t, maxReserveAhead, c.toReserve(), "reservations are bounded")
}

// Ids reserved ahead on one epoch are not taken on another: after a failover the new primary's
// sequence may hand them out again.
func TestIDsReservedAheadServeOnlyTheirEpoch(t *testing.T) {
	var c rowCache
	old, failedOver := epoch{timeline: 1}, epoch{timeline: 2, sinceUS: 5}
	c.ids, c.idsEpoch = []int64{1, 2, 3, 4}, old
	ids, ok := c.takeIDs(2, old)
	require.True(t, ok)
	require.Equal(t, []int64{1, 2}, ids)
	_, ok = c.takeIDs(1, failedOver)
	require.False(t, ok, "ids of the old epoch")
	_, ok = c.takeIDs(1, old)
	require.False(t, ok, "dropped once another epoch asked")
}
