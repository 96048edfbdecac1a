# ffgen: `make demo` runs the main job, `make test` runs every test.
GO        ?= go
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
FUZZTIME  ?= 10s

.PHONY: test vet gencheck lint bench fuzz generate demo faults faults-deps

# Every check the project has: vet, the race-enabled test suite, and the
# check that committed generated code is current.
test: vet gencheck
	$(GO) test -race -count=1 ./...

vet:
	$(GO) vet ./...

# ffgen -check on every package with //go:generate ffgen: committed
# generated code can never go stale.
gencheck:
	@pkgs=$$(grep -rlE --include='*.go' '^//go:generate (ffgen|go run github.com/ffgen/ffgen/cmd/ffgen)' . | grep -v /testdata/ | xargs -r -n1 dirname | sort -u); \
	if [ -z "$$pkgs" ]; then echo "gencheck: no package uses ffgen"; exit 1; fi; \
	echo "ffgen -check $$pkgs"; $(GO) run ./cmd/ffgen -check $$pkgs

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

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

# The partition faults need iptables: installed with apt-get where it is
# missing and we may; otherwise the suite skips them and says why.
faults-deps:
	@command -v iptables >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		apt-get install -y -q iptables >/dev/null 2>&1; } || \
		echo "faults-deps: iptables is missing and cannot be installed here; the partition faults will be skipped"
