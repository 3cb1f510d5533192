# Every module of the repository: the core and the nested ones.
MODULES := $(shell find . -name go.mod -not -path './.git/*' -exec dirname {} \; | sort)
GO ?= go

.PHONY: demo test lint fmtcheck vet bench bench-profile fuzz

## demo: show the limiters at work on a readable timeline.
demo:
	$(GO) run ./examples/tokenbucket

## test: formatting, vet and every test of every module, with the race detector.
test: fmtcheck vet
	@set -e; for m in $(MODULES); do \
		echo "== go test -race $$m"; \
		(cd $$m && $(GO) test -race -count=1 ./...); \
	done

fmtcheck:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) vet ./...); done

## lint: staticcheck over every module (installs it on first use).
lint: vet
	@command -v staticcheck >/dev/null || $(GO) install honnef.co/go/tools/cmd/staticcheck@latest
	@set -e; for m in $(MODULES); do (cd $$m && staticcheck ./...); done

## bench: our limiters and the peers side by side (the benchmarks/ module),
## COUNT runs of each, BENCHTIME each; the raw output goes to BENCHRAW
## (ignored by git), then a benchstat summary and the ratios against
## x/time/rate, with issue 7's targets. A full run takes about 12 minutes;
## while developing: make bench COUNT=1 BENCHTIME=200ms
## A subset: make bench BENCH='OneKey/path=allow' MEMBENCH=  (MEMBENCH empty
## skips the memory flood, which always runs once per count: -benchtime 1x).
## A CPU profile of one row: make bench-profile PROFILE='OneKey/path=allow/impl=ours-tokenbucket/run=serial'
COUNT ?= 6
BENCHTIME ?= 500ms
BENCH ?= .
MEMBENCH ?= ^BenchmarkMemory$$
BENCHRAW ?= bench.txt
bench: SHELL := /bin/bash
bench: .SHELLFLAGS := -o pipefail -c
bench:
	cd benchmarks && $(GO) test -run '^$$' -bench '$(BENCH)' -skip '^BenchmarkMemory$$' \
		-benchtime $(BENCHTIME) -count $(COUNT) . | tee ../$(BENCHRAW)
	if [ -n '$(MEMBENCH)' ]; then cd benchmarks && $(GO) test -run '^$$' -bench '$(MEMBENCH)' \
		-benchtime 1x -count $(COUNT) . | tee -a ../$(BENCHRAW); fi
	@echo; echo "== benchstat $(BENCHRAW)"
	cd benchmarks && $(GO) tool benchstat ../$(BENCHRAW)
	@echo; echo "== ratios against x/time/rate, same run"
	cd benchmarks && $(GO) run ./cmd/ratios ../$(BENCHRAW)

PROFILE ?= OneKey/path=allow/impl=ours-tokenbucket/run=serial
bench-profile:
	cd benchmarks && $(GO) test -run '^$$' -bench '$(PROFILE)' -benchtime $(BENCHTIME) \
		-cpuprofile ../cpu.out -o ../benchmarks.test .
	$(GO) tool pprof -top -nodecount 25 benchmarks.test cpu.out

## fuzz: each fuzz target for FUZZTIME (default 30s).
FUZZTIME ?= 30s
fuzz:
	@set -e; for f in $$($(GO) test -list '^Fuzz' . | grep '^Fuzz'); do \
		$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) .; \
	done
