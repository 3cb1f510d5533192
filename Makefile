# Every module of the repository: the core and the nested ones.
MODULES := $(shell find . -name go.mod -not -path './.git/*' -exec dirname {} \; | sort)
GO ?= go

.PHONY: demo svg test lint fmtcheck vet bench bench-redis bench-lease bench-profile fuzz release release-test

## demo: the limiters at work: a token bucket, the five algorithms side by
## side, limits changed while serving (tiers, a raise, a reset, a settled
## cost), a flood contained by a fair rule, an HTTP API behind rules, an HTTP
## client within a server's limits,
## a gRPC server, a replay of an access log through rules, and the metrics
## page of a server under a burst. Every line fits 80 columns: a longer one fails the demo (the
## examples' own tests check it too).
DEMOS := tokenbucket algorithms operators fairshare httpserver httpclient
demo: SHELL := /bin/bash
demo: .SHELLFLAGS := -e -o pipefail -c
demo:
	@for ex in $(DEMOS); do \
		echo "== go run ./examples/$$ex"; \
		$(GO) run ./examples/$$ex | LC_ALL=C awk '{ print; s = $$0; gsub(/[\200-\277]/, "", s); \
			if (length(s) > 80) n++ } END { if (n) { print n " lines over 80 columns" > "/dev/stderr"; exit 1 } }'; \
		echo; \
	done
	@echo "== cd cmd/ratelimit/testdata && go run .. replay -rules site.rules combined.log"
	@cd cmd/ratelimit/testdata && $(GO) run .. replay -rules site.rules combined.log | LC_ALL=C awk '{ print; s = $$0; gsub(/[\200-\277]/, "", s); \
		if (length(s) > 80) n++ } END { if (n) { print n " lines over 80 columns" > "/dev/stderr"; exit 1 } }'
	@echo
	@echo "== cd grpclimit && go run ./examples/grpcserver"
	@cd grpclimit && $(GO) run ./examples/grpcserver | LC_ALL=C awk '{ print; s = $$0; gsub(/[\200-\277]/, "", s); \
		if (length(s) > 80) n++ } END { if (n) { print n " lines over 80 columns" > "/dev/stderr"; exit 1 } }'
	@echo
	@echo "== cd prometheus && go run ./examples/metricsdemo"
	@cd prometheus && $(GO) run ./examples/metricsdemo | LC_ALL=C awk '{ print; s = $$0; gsub(/[\200-\277]/, "", s); \
		if (length(s) > 80) n++ } END { if (n) { print n " lines over 80 columns" > "/dev/stderr"; exit 1 } }'

## svg: redraw docs/algorithms.svg, the five algorithms on one trace, from
## examples/algorithms (its test fails when the committed file differs).
svg:
	$(GO) run ./examples/algorithms -svg docs/algorithms.svg

## test: formatting, vet, a build of every package (examples too) and every
## test of every module, with the race detector; go test also runs each fuzz
## target on its seed corpus (f.Add and testdata/fuzz).
test: fmtcheck vet release-test
	@set -e; for m in $(MODULES); do \
		echo "== go test -race $$m"; \
		(cd $$m && $(GO) build ./... && $(GO) test -race -count=1 ./...); \
	done

fmtcheck:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) vet ./...); done

## lint: staticcheck (a pinned version, fetched on first use) over every module.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint: vet
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) run $(STATICCHECK) ./...); done

## bench: our limiters and the peers side by side (the benchmarks/ module):
## COUNT samples of each benchmark, BENCHTIME each, then a benchstat summary
## and the ratios against x/time/rate. The raw output goes to BENCHRAW
## (ignored by git). The samples are taken in COUNT rounds of the whole
## suite (-count 1 each) rather than with -count COUNT, which repeats each
## benchmark back to back: on a shared machine a burst of load then falls
## on every implementation alike, not on one. A single round (COUNT=1)
## gives one sample, which can be off by 2x on a shared machine: the bench
## warns, and its ratios are not worth quoting. A full run takes about 10
## minutes on an idle 2-core machine (18 under a load of 8); while
## developing: make bench COUNT=3 BENCHTIME=200ms
## The memory flood runs MEMCOUNT times (default 1: its bytes per key do not
## change from run to run) with -benchtime 1x, each run a whole flood. When
## BENCH narrows the run, the flood is left out unless MEMBENCH asks for it:
## make bench BENCH='OneKey/path=allow'                      (no flood)
## make bench BENCH=Keys MEMBENCH='^BenchmarkMemory$$'       (with it)
## BenchmarkContended (one key and one bulkhead from every goroutine) runs
## in each round after the rest, at -cpu CPUS (default 1,2,4,8; more goroutines than
## cores shows what a spinning lock costs when its holder is descheduled);
## BENCH=Contended runs it alone; CONTENDED= (empty) leaves it out.
## BenchmarkRedis is left to make bench-redis. The ratios end with the
## project's performance targets, checked on the run (RATIOSFLAGS= leaves
## them out).
## A CPU profile of one row: make bench-profile PROFILE='OneKey/path=allow/impl=ours-tokenbucket/run=serial'
COUNT ?= 6
BENCHTIME ?= 300ms
BENCH ?= .
MEMBENCH ?= $(if $(filter .,$(BENCH)),^Benchmark(Memory|Growth)$$,)
MEMCOUNT ?= 1
CONTENDED ?= $(if $(filter .,$(BENCH)),^BenchmarkContended$$,$(if $(findstring Contended,$(BENCH)),$(BENCH),))
CPUS ?= 1,2,4,8
BENCHRAW ?= bench.txt
RATIOSFLAGS ?= -targets
BENCHWARN = if [ '$(COUNT)' -lt 2 ]; then echo "warning: COUNT=$(COUNT): one sample per benchmark gives no spread, and on a shared machine one sample can be off by 2x: do not quote these ratios (COUNT=3 or more)" >&2; fi
bench: SHELL := /bin/bash
bench: .SHELLFLAGS := -e -o pipefail -c
bench:
	@$(BENCHWARN)
	cd benchmarks && $(GO) test -c -o ../benchmarks.test .
	: > $(BENCHRAW)
	for i in $$(seq $(COUNT)); do \
		echo "== round $$i of $(COUNT)"; \
		./benchmarks.test -test.run '^$$' -test.bench '$(BENCH)' -test.skip '^Benchmark(Memory|Growth|Redis|Contended)$$' \
			-test.benchtime $(BENCHTIME) | tee -a $(BENCHRAW); \
		if [ -n '$(CONTENDED)' ]; then ./benchmarks.test -test.run '^$$' -test.bench '$(CONTENDED)' \
			-test.cpu $(CPUS) -test.benchtime $(BENCHTIME) | tee -a $(BENCHRAW); fi; \
	done
	if [ -n '$(MEMBENCH)' ]; then ./benchmarks.test -test.run '^$$' -test.bench '$(MEMBENCH)' \
		-test.benchtime 1x -test.count $(MEMCOUNT) | tee -a $(BENCHRAW); fi
	@echo; echo "== benchstat $(BENCHRAW)"
	cd benchmarks && $(GO) tool benchstat $(abspath $(BENCHRAW))
	@echo; echo "== ratios against x/time/rate, same run"
	cd benchmarks && $(GO) run ./cmd/ratios $(RATIOSFLAGS) $(abspath $(BENCHRAW))
	@$(BENCHWARN)

## bench-redis: the redis backend's five limiters, a second independent
## instance of its token bucket (the control row: the harness's noise) and
## go-redis/redis_rate, on one redis-server that it starts on a free
## loopback port (or RATELIMIT_REDIS_ADDR): serial calls alternated call by
## call in a random order, alternating blocks at 8 and 64 goroutines, and
## per script the server's time (INFO commandstats), the commands per
## decision and the Go allocations; at 64 goroutines also the server's CPU
## and the Go allocations and bytes per decision. Ratios against redis_rate, round by
## round, with their spread; then the targets, checked. Not part of
## `make bench`. About a minute with the defaults: make bench-redis
## REDISROUNDS=9 REDISCALLS=3000 for a longer run.
REDISROUNDS ?= 7
REDISCALLS ?= 2000
REDISBLOCK ?= 250ms
bench-redis:
	cd benchmarks && $(GO) run ./cmd/redisbench -rounds $(REDISROUNDS) -calls $(REDISCALLS) -block $(REDISBLOCK)

## bench-lease: one hot key from LEASEPROCS processes of LEASEG goroutines
## each, on one redis-server: the redis TokenBucket with WithLease against
## go-redis/redis_rate (and the TokenBucket without leases), alternated
## round by round; ratios to redis_rate with their spread, then a recorded
## round whose admitted instants are checked against the bucket's bound.
## Under a minute with the defaults.
LEASEPROCS ?= 4
LEASEG ?= 16
LEASEROUNDS ?= 5
bench-lease:
	cd benchmarks && $(GO) build -o ../leasebench.test ./cmd/leasebench
	./leasebench.test -procs $(LEASEPROCS) -goroutines $(LEASEG) -rounds $(LEASEROUNDS)

PROFILE ?= OneKey/path=allow/impl=ours-tokenbucket/run=serial
bench-profile:
	cd benchmarks && $(GO) test -run '^$$' -bench '$(PROFILE)' -benchtime $(BENCHTIME) \
		-cpuprofile ../cpu.out -o ../benchmarks.test .
	$(GO) tool pprof -top -nodecount 25 benchmarks.test cpu.out

## fuzz: every fuzz target of every package of the core module (the root
## package and httplimit), each for FUZZTIME (default 30s); FUZZFLAGS adds
## flags (e.g. FUZZFLAGS=-parallel=1). New failing inputs are written to the
## package's testdata/fuzz/<target>/, which plain go test, hence make test,
## replays along with the committed seed corpora.
FUZZTIME ?= 30s
FUZZFLAGS ?=
fuzz:
	@set -e; for p in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$p | grep '^Fuzz'); do \
			echo "== $$p $$f"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) $$p; \
		done; \
	done

## release: cut release VERSION (vX.Y.Z) with .ci/release: semver and not
## yet tagged, a CHANGELOG.md section, the API check against the previous
## release, one commit setting the nested modules' requires on the core to
## VERSION, then the tags VERSION, redis/, grpclimit/, prometheus/ and
## otel/VERSION. DRYRUN=1 prints the commit and the tags and changes
## nothing. Nothing is pushed. See docs/testing.md, "Releasing".
VERSION ?=
DRYRUN ?=
release:
	@test -n '$(VERSION)' || { echo "usage: make release VERSION=vX.Y.Z [DRYRUN=1]" >&2; exit 1; }
	bash .ci/release '$(VERSION)' $(if $(DRYRUN),--dry-run)

## release-test: .ci/release and .ci/check-release on temporary clones
## (part of make test).
release-test:
	bash .ci/release_test.sh
