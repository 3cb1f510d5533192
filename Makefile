# Every module of the repository: the core and the nested ones.
MODULES := $(shell find . -name go.mod -not -path './.git/*' -exec dirname {} \; | sort)
GO ?= go

.PHONY: demo test lint fmtcheck vet bench fuzz

## demo: show the limiters at work on a readable timeline.
demo:
	$(GO) run ./examples/tokenbucket
	@echo
	$(GO) run ./examples/algorithms
	@echo
	$(GO) run ./examples/httpserver

## test: formatting, vet, a build of every package (examples too) and every
## test of every module, with the race detector.
test: fmtcheck vet
	@set -e; for m in $(MODULES); do \
		echo "== go test -race $$m"; \
		(cd $$m && $(GO) build ./... && $(GO) test -race -count=1 ./...); \
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

## bench: the core's benchmarks.
bench:
	$(GO) test -run '^$$' -bench . -benchmem .

## fuzz: each fuzz target for FUZZTIME (default 30s).
FUZZTIME ?= 30s
fuzz:
	@set -e; for f in $$($(GO) test -list '^Fuzz' . | grep '^Fuzz'); do \
		$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) .; \
	done
