package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// TestBlocksListShowAndForce makes blocks, then lists them by task, by execution and at their
// retry limit, shows one with its attempts, and forces one that the next execution takes first.
func TestBlocksListShowAndForce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	e, err := f.client.StartExecution(ctx, "billing", "import", &taskling.StartOptions{ReferenceValue: "nightly"})
	require.NoError(t, err)
	blocks, err := e.NumericBlocks(ctx, taskling.NumericRange{From: 1, To: 2000, MaxSize: 1000}, nil)
	require.NoError(t, err)
	require.NoError(t, blocks[0].Complete(ctx, 1000))
	require.NoError(t, blocks[1].Fail(ctx, "timeout talking to the ledger"))
	require.NoError(t, e.Complete(ctx))

	out := ok(t, f.url, "blocks", "list", "billing/import")
	require.Contains(t, out, "1001–2000")
	require.Contains(t, out, "failed")
	require.Contains(t, out, "timeout talking to the ledger")
	out = ok(t, f.url, "blocks", "list", "--execution", fmt.Sprint(e.ID()), "--output", "json")
	var list httpapi.BlockList
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Blocks, 2)
	out = ok(t, f.url, "blocks", "list", "billing/import", "--at-retry-limit", "--output", "json")
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Blocks, 1)
	require.Equal(t, blocks[1].ID, list.Blocks[0].ID)

	out = ok(t, f.url, "blocks", "force", fmt.Sprint(blocks[0].ID), "--by", "alice")
	require.Contains(t, out, "completed (forced)")
	require.Contains(t, out, "ATTEMPT")

	code, _, errOut := cli(t, f.url, "blocks", "show", "999999")
	require.Equal(t, exitNotFound, code, errOut)
	code, _, errOut = cli(t, f.url, "blocks", "force", "x")
	require.Equal(t, exitUsage, code, errOut)

	e, err = f.client.StartExecution(ctx, "billing", "import", nil)
	require.NoError(t, err)
	got, err := e.NumericBlocks(ctx, taskling.NumericRange{From: 1, To: 1, MaxSize: 1}, &taskling.BlockOptions{OnlyOld: true})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.True(t, got[0].Forced)
	require.NoError(t, e.Complete(ctx))
	out = ok(t, f.url, "blocks", "show", fmt.Sprint(blocks[0].ID))
	require.Contains(t, out, "Attempts: 2")
}
