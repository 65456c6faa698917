# Targets that need PostgreSQL run through scripts/with-db.sh: it uses TASKLING_DATABASE_URL
# when set, else starts the private cluster in .taskling/pg (reusing a running one) and stops it
# afterwards if it started it.

GO ?= go
export GO

WITH_DB := scripts/with-db.sh
ARGS ?=
# Tests run at once per package: at least 4, as most wait on timers (docs/contributing.md).
PARALLEL ?= $(shell n=$$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1); echo $$(( n > 4 ? n : 4 )))

.PHONY: all test test-no-db demo bench scale chaos pg-start pg-stop pg-status fmt vet

all: test

## test: vet, then every test (root module, then integration_test/ if present), with -race.
test:
	@start=$$(date +%s); \
	if $(WITH_DB) $(MAKE) --no-print-directory test-no-db; then \
		echo "make test: PASS in $$(( $$(date +%s) - start ))s"; \
	else \
		status=$$?; echo "make test: FAIL (exit $$status) after $$(( $$(date +%s) - start ))s"; exit $$status; \
	fi

# The body of `test`, against the server in TASKLING_DATABASE_URL (or one each test package
# starts itself).
test-no-db: vet
	$(GO) test -race -count=1 -parallel $(PARALLEL) -timeout 14m ./...
	@if [ -f integration_test/go.mod ]; then \
		echo "cd integration_test && $(GO) test -race -count=1 ./..."; \
		cd integration_test && $(GO) test -race -count=1 ./...; \
	fi

## demo: run the demo (ARGS="..." passes arguments).
demo:
	$(WITH_DB) $(GO) run ./examples/demo $(ARGS)

## bench: run the benchmark (ARGS="..." passes arguments).
bench:
	$(WITH_DB) $(GO) run ./internal/devtools/cmd/bench $(ARGS)

## scale: issue 13's benchmark: 1 M executions over 1 000 tasks in a fresh database, reads,
## cleanup and acquisitions during it (ARGS="..." passes arguments; -h lists them).
scale:
	$(WITH_DB) $(GO) run ./internal/devtools/cmd/scale $(ARGS)

## chaos: the long multi-process chaos tests: faults of the workers and the server, primary
## failovers (a streaming standby, synchronous and asynchronous, promoted after a SIGKILL), and
## Patroni over etcd (switchovers and failovers, strict synchronous and asynchronous; these run
## servers of their own, no shared cluster).
chaos:
	TASKLING_CHAOS=long $(WITH_DB) $(GO) test -count=1 -run Chaos -timeout 40m -v ./taskling/
	cd integration_test && TASKLING_CHAOS=long ../$(WITH_DB) $(GO) test -count=1 -run Chaos -skip ChaosPatroni -timeout 30m -v ./...
	TASKLING_CHAOS=long $(GO) test -count=1 -run TestPatroniHarness -timeout 10m -v ./internal/devtools/pgcluster/
	cd integration_test && TASKLING_CHAOS=long $(GO) test -count=1 -run ChaosPatroni -timeout 40m -v ./chaos/

## pg-start, pg-stop, pg-status: the private cluster by hand (pg-start prints its URL, pg-stop
## whether it stopped one).
pg-start:
	@$(GO) run ./internal/devtools/cmd/devdb start

pg-stop:
	@$(GO) run ./internal/devtools/cmd/devdb stop

pg-status:
	@$(GO) run ./internal/devtools/cmd/devdb status

fmt:
	$(GO) fmt ./...
	@if [ -f integration_test/go.mod ]; then cd integration_test && $(GO) fmt ./...; fi

vet:
	$(GO) vet ./...
	@if [ -f integration_test/go.mod ]; then cd integration_test && $(GO) vet ./...; fi
