#!/usr/bin/env bash
# with-db.sh CMD [ARG...] — run CMD with TASKLING_DATABASE_URL set.
#
# If TASKLING_DATABASE_URL is already set, CMD runs against that server and nothing else
# happens. Otherwise the repo's private PostgreSQL cluster (internal/devtools/pgcluster, in
# .taskling/pg) is started — or reused if it runs already — and its URL exported. When CMD ends,
# however it ends, the cluster is stopped if this script started it and no other with-db.sh
# still uses it (devdb's leases); a cluster you started by hand keeps running.
# Exit status: CMD's.
set -euo pipefail

if [ "$#" -eq 0 ]; then
	echo "usage: scripts/with-db.sh CMD [ARG...]" >&2
	exit 2
fi
if [ -n "${TASKLING_DATABASE_URL:-}" ]; then
	exec "$@"
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GO=${GO:-go}
bin=$(mktemp -d "${TMPDIR:-/tmp}/with-db.XXXXXX")
devdb() { (cd "$root" && "$bin/devdb" "$@"); }
cleanup() {
	devdb release $$ || echo "with-db: could not release the cluster; stop it with 'make pg-stop'" >&2
	rm -rf "$bin"
}

(cd "$root" && "$GO" build -o "$bin/devdb" ./internal/devtools/cmd/devdb) || { rm -rf "$bin"; exit 1; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
TASKLING_DATABASE_URL=$(devdb start -lease $$)
export TASKLING_DATABASE_URL

# Run CMD in the background (keeping our stdin, and the default SIGINT/SIGQUIT handling that
# bash takes from background jobs) so that a signal sent to this script alone — a CI timeout,
# say — reaches CMD too, and the cluster is released once CMD has exited.
set +e
(trap - INT QUIT; exec "$@") <&0 &
child=$!
trap 'kill -INT "$child" 2>/dev/null' INT
trap 'kill -TERM "$child" 2>/dev/null' TERM
while :; do
	wait "$child"
	status=$?
	kill -0 "$child" 2>/dev/null || break # a trapped signal interrupted wait: wait again
done
exit "$status"
