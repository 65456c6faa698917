// Package migrations creates and upgrades taskling's schema ("taskling") in a PostgreSQL
// database.
//
// The migrations are SQL files embedded in the binary, applied in version order, forward only.
// Each file runs in its own transaction under a transaction-scoped advisory lock, so any number of
// hosts may call Up at the same moment: one applies each file, the others wait and then find it
// applied. A checksum of every applied file is stored; Up refuses to run against a database whose
// applied files differ from the embedded ones, since that means the schema is not what this
// version of the library expects.
//
//	if err := migrations.Up(ctx, pool); err != nil {
//		return err
//	}
package migrations
