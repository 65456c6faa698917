package execution

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTheProtocol5HandoffCASIsTheCASWithTheHandoffCondition: p5HandoffCasTasksSQL, written out
// whole, is p5CasTasksSQL with the fast path's pending-handoff condition before its RETURNING.
func TestTheProtocol5HandoffCASIsTheCASWithTheHandoffCondition(t *testing.T) {
	require.Equal(t, 1, strings.Count(p5CasTasksSQL, "\nRETURNING d.id"))
	want := strings.Replace(p5CasTasksSQL, "\nRETURNING d.id", "\n"+noPendingHandoffSQL+"\nRETURNING d.id", 1)
	require.Equal(t, want, p5HandoffCasTasksSQL)
}
