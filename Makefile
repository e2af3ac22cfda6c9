# Two commands set everything up on a fresh machine:
#   make demo   - the main job under the profiler; writes merged step profiles
#   make test   - installs what is missing, builds, runs every test
# Also: make bench (headline overhead and throughput tables, a few minutes),
# make bench-long (every section), make build, make format, make clean.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
BUILD_DIR := build/py
JOBS ?= 2

.PHONY: all deps venv build test test-cpp test-py demo bench bench-long clean gpu-bundle fuzz format

all: build

deps:
	@scripts/install_deps.sh

# requirements-verl.txt: verl and torch from PyPI for tests/test_verl.py (about 6 GB, 3-5 minutes once).
# requirements-hta.txt: Holistic Trace Analysis for tests/test_hta_export.py, --no-deps (its
# declared dependencies pull jupyterlab; what it imports is in requirements-dev.txt).
$(VENV)/.stamp: requirements-dev.txt requirements-verl.txt requirements-hta.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r requirements-dev.txt -r requirements-verl.txt
	$(PIP) install -q --no-deps -r requirements-hta.txt
	@touch $@

venv: $(VENV)/.stamp

# One CMake build (in $(BUILD_DIR)) serves the installed package and the tests.
build: deps venv
	CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(PIP) install -q --no-build-isolation --no-deps \
	  -Cbuild-dir=$(BUILD_DIR) -Ccmake.define.RLSCOPE_BUILD_TESTS=ON .

test-cpp: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

test-py: build
	RLSCOPE_BUILD_DIR=$(BUILD_DIR) $(PY) -m pytest -q tests

test: test-cpp test-py

demo: build
	RLSCOPE_BUILD_DIR=$(BUILD_DIR) $(PY) examples/verl/mini_ppo.py --out demo_out

# make bench: the headline tables (hot path, Python ranges, aggregator, scale,
# the demo on/off) in a few minutes; make bench-long: every section, full size.
bench: build
	$(PY) bench/run_bench.py --build-dir $(BUILD_DIR)

bench-long: build
	$(PY) bench/run_bench.py --build-dir $(BUILD_DIR) --long

# Coverage-guided fuzzing of the frame decoder with libFuzzer (clang, installed
# if missing); FUZZ_SECONDS long (default 300). `make test` runs the same
# target as a bounded ctest (wire_fuzz) without clang.
FUZZ_SECONDS ?= 300
fuzz: deps
	@command -v clang++ >/dev/null || (apt-get update -qq && apt-get install -y -qq clang)
	mkdir -p build/fuzz/corpus
	clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -I. \
	  -DMSGPACK_NO_BOOST -DMSGPACK_DEFAULT_API_VERSION=3 \
	  tests/fuzz/wire_fuzz.cc native/wire*.cc -o build/fuzz/wire_fuzz
	build/fuzz/wire_fuzz -max_total_time=$(FUZZ_SECONDS) build/fuzz/corpus

# build/gpu-bundle: what tests/gpu/run_gpu_checks.sh runs on a GPU machine
# with no build step there (scripts/build_gpu_bundle.sh).
gpu-bundle: deps
	JOBS=$(JOBS) scripts/build_gpu_bundle.sh

# The C and C++ sources laid out by .clang-format (third_party/ as it came).
FORMATTED = $(shell git ls-files 'aggregator/*.cc' 'aggregator/*.h' 'collector/*.c' 'collector/*.cc' \
  'collector/*.h' 'native/*.cc' 'native/*.h' 'python/bindings/*.c' 'python/bindings/*.cc' 'python/bindings/*.h' \
  'bench/*.c' 'bench/*.cc' 'tests/cpp/*.cc' 'tests/cpp/*.h' 'tests/apps/*.c' 'tests/apps/*.cc' 'tests/fuzz/*.cc')
format:
	@command -v clang-format >/dev/null || (apt-get update -qq && apt-get install -y -qq clang-format)
	clang-format -i $(FORMATTED)

clean:
	rm -rf build $(VENV) demo_out
