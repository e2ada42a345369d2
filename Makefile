# Cairn: run `make run` for a standalone node, `make test` for the test suite.
GO          ?= go
GOBIN       := $(shell $(GO) env GOPATH)/bin
STATICCHECK := $(GOBIN)/staticcheck
STATICCHECK_VERSION := v0.8.2
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -X main.version=$(VERSION)
# The e2e package includes the 60 s nemesis and its end checks.
TEST_TIMEOUT ?= 20m

.PHONY: build run test deps chromium influxdb tidy-check fmt-check vet staticcheck unit fuzz nemesis upgrade-test bench clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/cairn ./cmd/cairn

# A standalone node: embedded etcd, master, broker and storage in one process,
# data in ./cairn-data, API and console on http://127.0.0.1:9000.
run: build
	./bin/cairn --role standalone --data-dir ./cairn-data --http-addr 127.0.0.1:9000

test: deps tidy-check fmt-check vet staticcheck unit

# What a fresh machine with only Go lacks for `make test`: staticcheck (go
# install), a headless Chromium for the console's browser tests, and
# InfluxDB 1.x (influxd, the reference of the InfluxQL differential tests)
# with its influx CLI (apt-get, as root; anyone else is told the one command
# to run).
deps: chromium influxdb $(STATICCHECK)

CHROMIUM ?= $(or $(CAIRN_CHROMIUM),/usr/bin/chromium)
chromium:
	@if [ -x "$(CHROMIUM)" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "make test needs a headless Chromium at $(CHROMIUM) for the console's browser tests."; \
	  echo "Install it as root:  sudo apt-get install -y chromium   (or set CAIRN_CHROMIUM to its path)"; \
	  exit 1; \
	fi; \
	echo "installing chromium (apt-get)"; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

influxdb:
	@if [ -x /usr/bin/influxd ] && [ -x /usr/bin/influx ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "make test needs InfluxDB 1.x (/usr/bin/influxd and /usr/bin/influx) for the InfluxQL differential tests."; \
	  echo "Install them as root:  sudo apt-get install -y influxdb influxdb-client"; \
	  exit 1; \
	fi; \
	echo "installing influxdb and influxdb-client (apt-get)"; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq influxdb influxdb-client >/dev/null

# go.mod and go.sum must be what `go mod tidy` makes of them.
tidy-check:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy and commit"; exit 1; }

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

$(STATICCHECK):
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

staticcheck: $(STATICCHECK)
	$(STATICCHECK) ./...

# In-process packages first; then the multi-process end-to-end tests on
# their own, so their real processes do not compete with other packages for
# the machine's cores.
unit: fuzz
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v /e2e)
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./e2e/...

# Each parser of outside input fuzzed for a short budget (Go native
# fuzzing): line protocol, InfluxQL behind the query bounds, the API's JSON
# bodies and query parameters, the peer proof, backup files. A crasher found
# is fixed and kept in the package's testdata/fuzz as a regression case
# (plain `go test` replays it). FUZZTIME=200000x for a longer hunt.
# The budget is a count of executions, not a duration: go1.26's fuzz
# coordinator can report its own -fuzztime deadline as a failure
# ("context deadline exceeded", no crasher; golang/go#75804, fixed in
# go1.27), and a count never arms that deadline.
FUZZTIME ?= 2000x
FUZZ_TARGETS := ./storage/lineproto:FuzzParse ./storage/lineproto:FuzzParseWholeBody \
	./broker/influx:FuzzQueryText ./web:FuzzAPIBodies ./web:FuzzQueryParams \
	./internal/peerauth:FuzzVerify ./internal/backup:FuzzRestoreNeverPanics
fuzz:
	@for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; \
	  $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	done

# The seeded nemesis for as long as you like; prints availability and the
# longest write gap. `make test` runs it for 60 s with a fixed seed.
SEED     ?= 1
DURATION ?= 10m
nemesis:
	CAIRN_NEMESIS_SEED=$(SEED) CAIRN_NEMESIS_DURATION=$(DURATION) \
	  $(GO) test -count=1 -timeout 0 -run '^TestNemesis$$' -v ./e2e/

# The rolling upgrade from the previous release (the newest commit before
# HEAD that changed VERSION, built from git history) to this tree, and one
# node back: acknowledged batches/s per phase, in-sync drops per node, 0
# lost (COMPATIBILITY.md), without and with a cluster secret. About 5
# minutes, so not part of `make test`.
# UPGRADE_FROM=path/to/cairn uses that binary as the previous release.
# The whole output, the processes' JSON logs included, goes to
# $(UPGRADE_LOG); the screen gets it without them, and the test's status.
UPGRADE_LOG ?= $${TMPDIR:-/tmp}/cairn-upgrade-test.log
upgrade-test:
	$(GO) vet -tags upgrade ./e2e/
	CAIRN_UPGRADE_FROM=$(UPGRADE_FROM) $(GO) test -tags upgrade -count=1 -timeout 40m -run '^TestRollingUpgrade$$' -v ./e2e/ >$(UPGRADE_LOG) 2>&1; \
	  rc=$$?; grep -v '^\s*{' $(UPGRADE_LOG); echo "full output: $(UPGRADE_LOG)"; exit $$rc

# Benchmarks quoted in BENCHMARKS.md.
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 ./statemachine/ ./coordinator/... ./storage/... ./internal/backup/
	./bin/cairn simulate --nodes 1000 --shards 100000 --replicas 3 --add-nodes 1

clean:
	rm -rf bin
