package execution

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStripeStatementsNameOnlyTheirPartitions: every statement of the keyed and rated paths,
// in each stripe's version, names that stripe's partitions and never a partitioned table (whose
// every partition a cached generic plan would lock).
func TestStripeStatementsNameOnlyTheirPartitions(t *testing.T) {
	parent := regexp.MustCompile(`taskling\.(key_ticket|task_key|task_rate|key_rate)([^_]|$)`)
	for name, sqls := range map[string][stripeCount]string{"keyRows": keyRowsSQLs, "keyTickets": keyTicketsSQLs,
		"deleteKeyTickets": deleteKeyTicketsSQLs, "insertKeyTickets": insertKeyTicketsSQLs, "updateKeyTickets": updateKeyTicketsSQLs,
		"upsertKeys": upsertKeysSQLs, "refreshKeys": refreshKeysSQLs, "dropKeys": dropKeysSQLs, "fastDropKeys": fastDropKeysSQLs,
		"rateRead": rateReadSQLs, "upsertTaskRate": upsertTaskRateSQLs, "upsertKeyRates": upsertKeyRatesSQLs, "dropKeyRates": dropKeyRatesSQLs} {
		for i, sql := range sqls {
			require.NotRegexp(t, parent, sql, "%s of stripe %d", name, i)
			require.Contains(t, sql, fmt.Sprintf("_%02d ", i), "%s of stripe %d names its partitions", name, i)
		}
	}
}
