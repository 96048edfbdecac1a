# ffgen: `make demo` runs the main job, `make test` runs every test.
GO        ?= go
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
FUZZTIME  ?= 10s

PAGETEST  := runtime/cluster/pagetest
# OpenTelemetry support, a module of its own so that the library does not
# depend on OpenTelemetry.
OTEL      := runtime/otelffgen
# The comparison with grpc-go, net/rpc and raw TCP: a module of its own,
# so that the library does not depend on grpc-go.
BENCHMOD  := bench
# The browser for the cluster page's test; empty when none is installed.
CHROMIUM  ?= $(shell command -v chromium || command -v chromium-browser || command -v google-chrome || command -v google-chrome-stable)

.PHONY: test vet gencheck lint bench bench-compare bench-replication restart-time fuzz generate demo browsertest screenshot detect overload

# Every check the project has: vet, the race-enabled test suite, the
# allocation counts (without the race detector, whose sync.Pool drops
# items at random), the check that committed generated code is current,
# and the cluster page in a browser (skipped, saying so, without Chromium).
test: vet gencheck
	$(GO) test -race -count=1 ./...
	cd $(OTEL) && $(GO) test -race -count=1 ./...
	$(GO) test -count=1 -run 'Allocs$$' ./...
	cd $(BENCHMOD) && $(GO) test -race -count=1 ./...
	@$(MAKE) --no-print-directory browsertest

vet:
	$(GO) vet ./...
	cd $(PAGETEST) && $(GO) vet ./...
	cd $(OTEL) && $(GO) vet ./...
	cd $(BENCHMOD) && $(GO) vet ./...

# The cluster page in headless Chromium against a 4-node cluster
# ($(PAGETEST) is a module of its own, so that the library does not
# depend on chromedp). Without a Chromium it says SKIPPED and succeeds,
# unless FFGEN_REQUIRE_BROWSER is set.
browsertest:
	@if [ -z "$(CHROMIUM)" ]; then \
		echo "browsertest: SKIPPED: no Chromium found (apt-get install chromium, or set CHROMIUM=/path/to/browser)"; \
		if [ -n "$$FFGEN_REQUIRE_BROWSER" ]; then echo "browsertest: FFGEN_REQUIRE_BROWSER is set: failing"; exit 1; fi; \
	else \
		echo "browsertest: $(CHROMIUM)"; \
		cd $(PAGETEST) && CHROMIUM="$(CHROMIUM)" $(GO) test -race -count=1 ./...; \
	fi

# Renews the screenshots of the cluster page in docs/.
screenshot:
	cd $(PAGETEST) && CHROMIUM="$(CHROMIUM)" FFGEN_REQUIRE_BROWSER=1 PAGETEST_SCREENSHOTS=$(CURDIR)/docs \
		$(GO) test -count=1 -run TestPageFollowsKillAndRejoin ./...

# ffgen -check on every package with //go:generate go tool ffgen (or the
# older forms): committed generated code can never go stale. The packages
# of $(BENCHMOD), a module of its own, are checked from inside it.
gencheck:
	@pkgs=$$(grep -rlE --include='*.go' '^//go:generate (go tool ffgen|ffgen|go run github.com/ffgen/ffgen/cmd/ffgen)' . | grep -v /testdata/ | grep -v '^./$(BENCHMOD)/' | xargs -r -n1 dirname | sort -u); \
	if [ -z "$$pkgs" ]; then echo "gencheck: no package uses ffgen"; exit 1; fi; \
	echo "ffgen -check $$pkgs"; $(GO) run ./cmd/ffgen -check $$pkgs
	@pkgs=$$(cd $(BENCHMOD) && grep -rlE --include='*.go' '^//go:generate go tool ffgen' . | xargs -r -n1 dirname | sort -u); \
	if [ -z "$$pkgs" ]; then echo "gencheck: no package of $(BENCHMOD) uses ffgen"; exit 1; fi; \
	echo "ffgen -check (in $(BENCHMOD)) $$pkgs"; cd $(BENCHMOD) && $(GO) tool ffgen -check $$pkgs

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	cd $(PAGETEST) && $(GO) vet ./... && $(STATICCHECK) ./...
	cd $(OTEL) && $(GO) vet ./... && $(STATICCHECK) ./...
	cd $(BENCHMOD) && $(GO) vet ./... && $(STATICCHECK) ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The failure detector over real processes on loopback: false failovers of
# healthy calls with two CPU burners, and SIGSTOP-to-failover, at the
# default heartbeat settings and at 10 ms / 25 ms. About two minutes.
# DETECT_ENV passes options, e.g. DETECT_ENV='FFGEN_DETECT_FOR=30s'.
detect:
	FFGEN_DETECT=1 $(DETECT_ENV) $(GO) test -run '^TestDetection$$' -count=1 -v ./runtime/

# ffgen next to grpc-go, net/rpc and raw TCP, and raw TCP next to a minimal
# ping-pong, then ffgen's replicated writes (on disk and in memory) next to
# a three-member etcd, each interleaved in one run, every client and server
# in a process of its own: the tables, the ratios and the targets. About
# four minutes. BENCH_FLAGS passes options, e.g. BENCH_FLAGS='-rounds 3' or
# BENCH_FLAGS='-only replicated'.
bench-compare:
	cd $(BENCHMOD) && $(GO) run . $(BENCH_FLAGS)

# The replication of scatter writes next to the protocol raft replaced:
# BenchmarkReplicatedWrite (four nodes on loopback, one caller, then 64) in
# a temporary worktree of BASE (default 3349ce7) and in this tree,
# interleaved round by round: the table, the ratios and the targets. About
# two minutes. BASE=<commit> compares with another commit;
# REPLICATION_FLAGS passes options, e.g. REPLICATION_FLAGS='-rounds 2'.
bench-replication:
	cd $(BENCHMOD) && $(GO) run ./replication $(REPLICATION_FLAGS)

# A bank cluster (two nodes, each with a data directory) given 100,000
# accounts and 1,000,000 writes, killed at once and started again: how long
# until it is ready, and that every balance came back. A few minutes, most
# of them making the data. RESTART_ACCOUNTS / RESTART_WRITES change the size.
RESTART_ACCOUNTS ?= 100000
RESTART_WRITES   ?= 1000000
restart-time:
	FFGEN_RESTART_ACCOUNTS=$(RESTART_ACCOUNTS) FFGEN_RESTART_WRITES=$(RESTART_WRITES) \
		$(GO) test -count=1 -timeout 60m -run '^TestLedgerRestartsFromDisk$$' -v ./examples/bank/

# Short runs of every fuzz target.
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "fuzz $$pkg $$t"; \
			$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

generate:
	$(GO) generate ./...

# The bank example under failure: 4 nodes (2 groups x 2) on loopback,
# bankload for 40 s, one node killed and another frozen for 1 s, then the
# summary and the audit of every surviving node. About a minute.
# DEMO_FLAGS passes options, e.g. DEMO_FLAGS='-duration 20s -keep'.
demo:
	$(GO) run ./examples/bank/demo $(DEMO_FLAGS)

# The bank example's fault suite: for each fault a fresh 4-node cluster on
# loopback under bankload at 2,000 ops/s for 25 s, the fault, and the audit
# of every node (balances, and every acknowledged write in every node's
# journal). A table per fault; exit 1 if any audit failed. 8 to 15
# minutes. FAULTS_FLAGS passes options, e.g. FAULTS_FLAGS='-only sigstop'.
faults: faults-deps
	$(GO) run ./examples/bank/faults $(FAULTS_FLAGS)

# The bank example past its capacity: for each run a fresh 4-node cluster
# on loopback and one bankload: 16 callers (the capacity), 256 and 1024
# callers unpaced, 256 callers paced at 3x the capacity, the callers of
# each run sharing four clients (a fleet of four application processes;
# -clients changes it). Per run: ops/s,
# admitted p50/p99/max, refusals, heartbeat-timeout failovers of nodes that
# were only busy, suspicions, the audit, and the load average beside them;
# then the targets (exit 1 if one is missed). About two minutes at the
# default 20 s per run. OVERLOAD_DURATION lengthens the runs;
# OVERLOAD_FLAGS passes options, e.g. OVERLOAD_FLAGS='-only capacity,1024'.
OVERLOAD_DURATION ?= 20s
overload:
	$(GO) run ./examples/bank/overload -duration $(OVERLOAD_DURATION) $(OVERLOAD_FLAGS)

# The partition faults need iptables: installed with apt-get where it is
# missing and we may; otherwise the suite skips them and says why.
faults-deps:
	@command -v iptables >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		apt-get install -y -q iptables >/dev/null 2>&1; } || \
		echo "faults-deps: iptables is missing and cannot be installed here; the partition faults will be skipped"
