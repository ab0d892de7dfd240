# Glyd — one Makefile for every machine. `make help` lists the targets.
# Two commands do all the set-up on a fresh machine (README):
#   make run    pack a real model offline, load it back, compare outputs
#   make test   everything CI runs (.ci/run calls it)

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := all

GO      ?= go
PYTHON  ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
BUILD   := build
LIB     := $(BUILD)/libglyd.so
SONAME  := libglyd.so.0
FUZZTIME ?= 300x

GO_SOURCES := $(shell find core capi -name '*.go' -not -name '*_test.go' 2>/dev/null) \
              $(wildcard capi/*.c capi/*.h) include/glyd.h go.mod go.sum \
              $(wildcard core/gpu/*.fatbin core/gpu/*.c core/gpu/*.h)

.PHONY: all help lib kernels venv test test-go test-emu test-fuzz test-python test-examples fuzz examples run bench wheel clean

all: lib ## build libglyd.so

help:
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

lib: $(LIB) ## build build/libglyd.so (libc is its only dependency)

# Only the functions declared in include/glyd.h are exported.
$(BUILD)/glyd.map: include/glyd.h
	@mkdir -p $(BUILD)
	@{ echo '{ global:'; grep -oE '\bglyd_[a-z0-9_]+\(' include/glyd.h | tr -d '(' | sort -u | sed 's/$$/;/'; echo 'local: *; };'; } > $@

$(LIB): $(GO_SOURCES) $(BUILD)/glyd.map
	@mkdir -p $(BUILD)
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -trimpath \
	  -ldflags "-extldflags '-Wl,--version-script=$(CURDIR)/$(BUILD)/glyd.map -Wl,-soname,$(SONAME)'" \
	  -o $@ ./capi
	@rm -f $(BUILD)/libglyd.h
	@ln -sf libglyd.so $(BUILD)/$(SONAME)

kernels: ## rebuild core/gpu/kernels.fatbin with nvcc 13.0 (installed from PyPI into .tools/)
	bash kernels/build.sh

venv: $(VENV)/.installed ## the Python venv the tests use (torch, transformers, ...)

$(VENV)/.installed: python/requirements-dev.txt
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -r python/requirements-dev.txt
	touch $@

test: test-go test-emu test-fuzz test-examples test-python ## everything CI runs

test-go: ## gofmt, go vet, go test -race, the committed fatbin matches its sources
	bash kernels/build.sh --check
	@out=$$(gofmt -l core capi examples 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt would change: $$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

test-emu: lib ## pack.cu, tile.cu, decode.cu's fixed12, the fused linear tiles (mma.sync, wgmma, prompt; grouped mma.sync) and the transposed experts kernels run on the CPU through a fake libcuda
	bash kernels/emu/run.sh

test-fuzz: ## every fuzz target for a fixed count ($(FUZZTIME))
	@for pkg in $$($(GO) list ./core/...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg >/dev/null || { echo "FAIL fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; exit 1; }; \
	  done; \
	done; echo "fuzz targets passed"

fuzz: ## fuzz every target for 60 s each
	$(MAKE) test-fuzz FUZZTIME=60s

examples: lib ## build the C example
	$(MAKE) -C examples/c

test-examples: examples venv ## run the C, Go and Python examples
	$(MAKE) -C examples/c run
	$(GO) test -run Example ./core/...
	GLYD_LIBRARY=$(CURDIR)/$(LIB) PYTHONPATH=python $(VPY) examples/python/pack_tensor.py
	GLYD_LIBRARY=$(CURDIR)/$(LIB) PYTHONPATH=python $(VPY) examples/python/generate_packed.py --layers 2 --tokens 8

test-python: lib venv ## the Python tests (GPU tests skip without a GPU)
	GLYD_LIBRARY=$(CURDIR)/$(LIB) PYTHONPATH=python $(VPY) -m pytest -q python/tests

run: lib venv ## pack the real all-MiniLM-L6-v2 model offline, load it back, compare
	GLYD_LIBRARY=$(CURDIR)/$(LIB) PYTHONPATH=python HF_HUB_OFFLINE=1 $(VPY) examples/python/pack_minilm.py

bench: lib venv ## CPU benchmarks (go test -bench) and, with a GPU, python -m glyd.gpu bench
	$(GO) test -run '^$$' -bench . -benchmem ./core/codec
	GLYD_LIBRARY=$(CURDIR)/$(LIB) PYTHONPATH=python $(VPY) -m glyd.gpu bench

wheel: lib venv ## a wheel with libglyd.so inside, in dist/
	$(VPY) -m pip wheel --no-deps --no-build-isolation -w dist ./python

clean:
	rm -rf $(BUILD) dist python/glyd/libglyd.so
	$(MAKE) -C examples/c clean
