package tasklingtype

import "time"

// Change is one operator change of a task, as its audit trail records it: who (Principal, the
// Operator's Name, and By, its Note or else its Name), when (the change's transaction time on the
// database clock), which Field ("concurrency_limit",
// "enabled", "death_mode", "keep_alive_interval", "keep_alive_death_threshold",
// "override_threshold", "keep_completed", "keep_failed", "keep_blocked", "key_limit", "rate",
// "key_rate", "key_limit[KEY]" and "key_rate[KEY]" for a named key's overrides, "retired",
// "schedule_retired", "block #ID" for a forced block, "submission #ID" for a cancelled
// submission), and its Old and New values as text ("3", "unlimited", "30s", "14d", "forever",
// "yes"). A nil value means not overridden: the task inherits what its hosts declare.
type Change struct {
	ID int64
	At time.Time
	By string
	// Principal is "" on the changes recorded before migration 0016, or by older binaries.
	Principal string
	Field     string
	Old       *string
	New       *string
}
