package taskling_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// TestOlderProtocolBinaryRefusesToGrant is issue 15 item 15: during a rolling upgrade an older
// binary silently accepted a newer schema and would grant by its old rules. Migrations store the
// grant protocol; a binary older than it refuses to grant, naming both versions, and still
// completes the executions it runs.
func TestOlderProtocolBinaryRefusesToGrant(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(2))
	require.Equal(t, taskling.ProtocolVersion, b.count(t, `SELECT version FROM taskling.protocol`),
		"the migrations and the binary agree on the protocol")
	running := b.start(t, nil)

	b.exec(t, `UPDATE taskling.protocol SET version = version + 1`) // as a newer binary's migration would
	before := b.count(t, `SELECT count(*) FROM taskling.task_execution`)
	_, err := b.client.StartExecution(b.ctx, b.app, b.task, nil)
	require.ErrorIs(t, err, taskling.ErrUpgradeRequired)
	require.ErrorContains(t, err, fmt.Sprintf("grant protocol %d; this binary speaks protocol %d", taskling.ProtocolVersion+1, taskling.ProtocolVersion))
	require.Equal(t, before, b.count(t, `SELECT count(*) FROM taskling.task_execution`), "nothing granted, nothing written")
	require.NoError(t, running.Complete(b.ctx), "what it already runs completes")

	b.exec(t, `UPDATE taskling.protocol SET version = version - 1`) // back to this binary's rules
	b.start(t, nil)
}
