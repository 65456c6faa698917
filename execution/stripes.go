package execution

import (
	"fmt"
	"slices"
	"strings"
)

// Every token transaction first locks its tasks' stripes (migration 0019, grant protocol 5): one
// of stripeCount empty tables per task, by its id, IN EXCLUSIVE MODE, in stripe order. LOCK TABLE
// takes no snapshot, so a transaction waits there for the previous transaction of its tasks to
// commit, and its snapshot (taken by its first SELECT) sees that commit: under SERIALIZABLE it
// does not fail because another transaction of its task committed while it waited for the row
// lock. Tasks that share a stripe wait for each other too (the cost of a fixed number of tables);
// locking in stripe order keeps two transactions of several tasks from deadlocking. The fast path
// takes its stripes without waiting (NOWAIT): held, it fails, and its requests go the usual way.

// stripeCount is the number of stripe tables.
const stripeCount = 64

// lockStripeSQL[i] locks stripe i, waiting for it; lockStripeNowaitSQL[i] without waiting. Each is
// a statement as it is written, such as "LOCK TABLE taskling.stripe_07 IN EXCLUSIVE MODE" (a table
// name cannot be a parameter).
var lockStripeSQL, lockStripeNowaitSQL = stripeStatements()

func stripeStatements() (wait, nowait [stripeCount]string) {
	for i := range stripeCount {
		wait[i] = fmt.Sprintf("LOCK TABLE taskling.stripe_%02d IN EXCLUSIVE MODE", i)
		nowait[i] = wait[i] + " NOWAIT"
	}
	return wait, nowait
}

// stripes are the stripes a token transaction of tasks locks: none on a schema without them.
func (s *Store) stripes(tasks []int64) []int {
	if !s.epochs.stripes.Load() {
		return nil
	}
	return stripesOf(tasks)
}

// stripesOf are the stripes of tasks, in the order they are locked.
func stripesOf(tasks []int64) []int {
	out := make([]int, 0, len(tasks))
	for _, id := range tasks {
		out = append(out, int(uint64(id)%stripeCount))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// PartitionsOf is partitionsOf, for the read side's statements (adminstore).
func PartitionsOf(sql string) [stripeCount]string { return partitionsOf(sql) }

// StripeOf is the stripe of task id (0019_stripes.sql).
func StripeOf(id int64) int64 { return id % stripeCount }

// partitionsOf is sql for each stripe, naming the stripe's partitions of the tables partitioned by
// stripe (0022, 0023) instead of the partitioned tables. The token transactions' statements on
// them run in every transaction of a keyed or rated task (the rate read in every one), and
// PostgreSQL 15 locks every partition of a partitioned table a cached generic plan names before it
// prunes them: 64 locks a table, measured at about 15 % of a token transaction.
func partitionsOf(sql string) (out [stripeCount]string) {
	for i := range out {
		out[i] = strings.NewReplacer(
			"taskling.key_ticket ", fmt.Sprintf("taskling.key_ticket_%02d ", i),
			"taskling.task_key ", fmt.Sprintf("taskling.task_key_%02d ", i),
			"taskling.task_rate ", fmt.Sprintf("taskling.task_rate_%02d ", i),
			"taskling.key_rate ", fmt.Sprintf("taskling.key_rate_%02d ", i)).Replace(sql)
	}
	return out
}
