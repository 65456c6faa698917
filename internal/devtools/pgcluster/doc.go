// Package pgcluster runs the private PostgreSQL cluster that taskling's tests, `make demo` and
// `make bench` use when no server is given in TASKLING_DATABASE_URL.
//
// The cluster lives in <repo root>/.taskling/pg (data/, sock/, postgres.log, state.json, lock);
// TASKLING_PG_DIR overrides the place. The repo root is the nearest ancestor of the working
// directory holding go.work, else the nearest holding go.mod. When the server runs as the
// postgres OS user (we are root) and that user cannot reach the repo (a checkout under a 0700
// /root), the cluster lives in /tmp/taskling-pg-<hash of the repo path> instead.
//
// Ensure is safe to call from many goroutines and processes at once: all of them serialize on an
// flock of the lock file, the first starts the cluster and the rest reuse it. Ensure never
// stops a cluster, so a plain `go test ./...` leaves it running for the next run; `make`
// targets stop what they started through leases (AcquireLease, ReleaseLease), and
// `go run ./internal/devtools/cmd/devdb stop` (make pg-stop) stops it by hand.
//
// The server listens on 127.0.0.1 only, on a port picked free at first start and kept across
// restarts when still free, and asks for a password (scram-sha-256) that no command line carries
// (pg_basebackup reads it from its environment); the password file, state.json and postgres.log
// are 0600, the socket directory 0700. It runs with fsync and synchronous_commit on — the PostgreSQL
// defaults — so that benchmarks measure what users get and a `pg_ctl stop -m immediate` in a
// fault-injection test loses no acknowledged commit; max_connections is 400 for parallel tests
// and multi-process chaos runs.
//
//	c, err := pgcluster.Ensure(ctx, nil)
//	if err != nil {
//		return err
//	}
//	pool, err := pgxpool.New(ctx, c.URL())
package pgcluster
