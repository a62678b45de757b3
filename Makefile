# kolo: the two commands of the README, plus the sanitizer run and chores.
#
#   make demo       install missing deps, build what the demo runs (libkolo,
#                   kolorun, the Fashion-MNIST example: C++ when libtorch is
#                   found, else the Python package) and train it on 2 local
#                   ranks under kolorun; prints its accuracy and its speedup
#                   over 1 rank beside the machine's ceiling (two 1-rank runs
#                   at once), all runs of the same steps (scripts/demo.py)
#   make test       install missing deps, build everything (RelWithDebInfo,
#                   line-table debug info) into build/, run every test with
#                   ctest
#   make test-asan  the same tests built with ASan+UBSan into build-asan/
#   make test-tsan  the runtime's tests (label tsan) built with TSan into
#                   build-tsan/
#   make fuzz       build the libFuzzer targets (tests/fuzz/) with clang into
#                   build-fuzz/ and run each for FUZZ_SECONDS (30) from its
#                   seed corpus, FUZZ_JOBS (2) at a time; a crash fails (its
#                   input is left in build-fuzz/artifacts/)
#   make format     clang-format every C/C++ source in place
#   make clean      remove build/, build-asan/, build-tsan/ and build-fuzz/
#
# BUILD_DIR, ASAN_DIR, JOBS, CTEST_TIMEOUT, DEBUG_INFO and CUDA (the last two
# apply to a newly configured BUILD_DIR; CUDA is KOLO_WITH_CUDA: auto, ON or
# OFF, docs/gpu.md) may be overridden:
#   make test BUILD_DIR=build-mine JOBS=1
#   make test BUILD_DIR=build-cpu CUDA=OFF
#   make test BUILD_DIR=build-gdb DEBUG_INFO=-g
# Why the builds are configured as they are: docs/ci.md.
BUILD_DIR ?= build
ASAN_DIR ?= build-asan
TSAN_DIR ?= build-tsan
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 30
FUZZ_JOBS ?= 2
FUZZ_TARGETS := store_protocol tcp_handshake tcp_frames negotiation ps_wire
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CTEST_TIMEOUT ?= 600
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo Ninja || echo "Unix Makefiles")

DEMO_ARGS ?= -o allreduce -b 8 -e 64M -f 8
# The training demo (scripts/demo.py): DEMO_EPOCHS epochs of DEMO_STEPS steps
# (batch 64 per rank) on 1 rank, on two independent 1-rank jobs at once (the
# machine's ceiling) and on 2 ranks; the 2-rank run's accuracy and its
# speedup against the other two are printed.
DEMO_EPOCHS ?= 2
DEMO_STEPS ?= 150
DEMO_PY := env PYTHONPATH=$(BUILD_DIR)/python /usr/bin/python3 examples/fashion_mnist.py

# Debug information of the plain build: line tables only (-g1: file:line in
# backtraces and sanitizer reports; no variables), which halves the compile
# time of the libtorch sources against -g (docs/ci.md). DEBUG_INFO=-g for a
# build to debug in.
DEBUG_INFO ?= -g1
# ccache when installed (scripts/install-deps.sh installs it): a machine that
# builds again compiles only what changed. Evaluated when a build directory is
# configured, after the dependencies are installed.
LAUNCHER = $(if $(shell command -v ccache 2>/dev/null),-DCMAKE_C_COMPILER_LAUNCHER=ccache \
             -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
PLAIN_FLAGS = -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DKOLO_WITH_CUDA=$(CUDA) \
              -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 $(DEBUG_INFO) -DNDEBUG" \
              -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 $(DEBUG_INFO) -DNDEBUG" $(LAUNCHER) \
              $(if $(LAUNCHER),-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)

# The sanitizer builds carry only kolo's own code and its tests: no examples,
# no libtorch integration, no Python extension and no CUDA (the framework
# libraries and the CUDA runtime are not built with the sanitizers).
# The plain build has CUDA when nvcc is found (KOLO_WITH_CUDA=auto); pass
# CUDA=OFF (or ON) to choose: make test CUDA=OFF. docs/gpu.md.
# They are compiled at -O1 with line tables (-g1): what the sanitizers
# instrument and report does not depend on it, and gcc compiles the
# ASan+UBSan tests 2.3x faster than at -O2 -g (docs/ci.md). -O1 makes gcc
# warn wrongly about <regex> (maybe-uninitialized): that warning is off here.
SAN_OPT := -O1 -g1 -DNDEBUG -Wno-maybe-uninitialized
SAN_FLAGS = -DKOLO_BUILD_EXAMPLES=OFF -DKOLO_WITH_TORCH=OFF -DKOLO_BUILD_PYTHON=OFF \
            -DKOLO_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
            -DCMAKE_C_FLAGS_RELWITHDEBINFO="$(SAN_OPT)" \
            -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(SAN_OPT)" $(LAUNCHER)
CUDA ?= auto
ASAN_FLAGS = -DKOLO_SANITIZE=address,undefined $(SAN_FLAGS)
TSAN_FLAGS = -DKOLO_SANITIZE=thread $(SAN_FLAGS)
# Thread leaks are not reported: the process tests end ranks with _exit on
# purpose, with the runtime thread still running.
export TSAN_OPTIONS ?= halt_on_error=1:second_deadlock_stack=1:report_thread_leaks=0
export ASAN_OPTIONS ?= detect_leaks=1:abort_on_error=0:strict_string_checks=1
export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1

.PHONY: all deps build build-demo demo test build-asan test-asan build-tsan test-tsan build-fuzz fuzz format clean

all: build

deps:
	@scripts/install-deps.sh

# Configure once (cmake re-runs itself when a CMakeLists.txt changes).
$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -G "$(GENERATOR)" $(PLAIN_FLAGS)

$(ASAN_DIR)/CMakeCache.txt:
	cmake -S . -B $(ASAN_DIR) -G "$(GENERATOR)" $(ASAN_FLAGS)

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Only what the demo runs (target kolo_demo, examples/CMakeLists.txt):
# libkolo, kolorun and the libtorch example, or the Python package when
# libtorch is missing; not the tests. `make test` builds everything.
build-demo: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS) --target kolo_demo

# The main job: train the Fashion-MNIST example on 2 ranks. The libtorch
# example when it was built, else the PyTorch one (kolo's Python package);
# without either, the allreduce benchmark (or the C example) stands in.
demo: build-demo
	@set -e; \
	if [ -x $(BUILD_DIR)/bin/fashion_mnist ]; then \
	  train="$(BUILD_DIR)/bin/fashion_mnist"; \
	elif ls $(BUILD_DIR)/python/kolo/_native*.so >/dev/null 2>&1; then \
	  train="$(DEMO_PY)"; \
	fi; \
	if [ -n "$${train:-}" ]; then \
	  /usr/bin/python3 scripts/demo.py --kolorun $(BUILD_DIR)/bin/kolorun \
	    --epochs $(DEMO_EPOCHS) --steps $(DEMO_STEPS) --out $(BUILD_DIR)/demo -- $$train; \
	elif [ -x $(BUILD_DIR)/bin/kolo-bench ]; then \
	  echo "+ $(BUILD_DIR)/bin/kolorun -np 2 $(BUILD_DIR)/bin/kolo-bench $(DEMO_ARGS)"; \
	  $(BUILD_DIR)/bin/kolorun -np 2 $(BUILD_DIR)/bin/kolo-bench $(DEMO_ARGS); \
	else \
	  echo "+ $(BUILD_DIR)/bin/kolorun -np 2 $(BUILD_DIR)/bin/c_allreduce"; \
	  $(BUILD_DIR)/bin/kolorun -np 2 $(BUILD_DIR)/bin/c_allreduce; \
	fi

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout $(CTEST_TIMEOUT)

build-asan: deps $(ASAN_DIR)/CMakeCache.txt
	cmake --build $(ASAN_DIR) -j $(JOBS)

# The network-namespace tests (label multihost) run in `make test` only: they
# exercise kolorun and the transports across "hosts", which the sanitizer
# build already checks on one host, and take minutes each.
test-asan: build-asan
	cd $(ASAN_DIR) && ctest --output-on-failure -j $(JOBS) --timeout $(CTEST_TIMEOUT) -LE multihost

$(TSAN_DIR)/CMakeCache.txt:
	cmake -S . -B $(TSAN_DIR) -G "$(GENERATOR)" $(TSAN_FLAGS)

build-tsan: deps $(TSAN_DIR)/CMakeCache.txt
	cmake --build $(TSAN_DIR) -j $(JOBS) --target tsan_tests

test-tsan: build-tsan
	cd $(TSAN_DIR) && ctest --output-on-failure -j $(JOBS) --timeout $(CTEST_TIMEOUT) -L tsan

$(FUZZ_DIR)/CMakeCache.txt:
	CC=clang CXX=clang++ cmake -S tests/fuzz -B $(FUZZ_DIR) -G "$(GENERATOR)" $(LAUNCHER)

build-fuzz: deps $(FUZZ_DIR)/CMakeCache.txt
	cmake --build $(FUZZ_DIR) -j $(JOBS)

# New inputs go to $(FUZZ_DIR)/corpus/TARGET; the seeds in the tree are read
# only. FUZZ_JOBS targets run at once, each for FUZZ_SECONDS on its own core.
fuzz: build-fuzz
	@scripts/run_fuzzers.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(FUZZ_JOBS) $(FUZZ_TARGETS)

format:
	@files=$$(git ls-files '*.cc' '*.h' '*.c' '*.cpp' 2>/dev/null || \
	          find src include tools tests examples python -name '*.cc' -o -name '*.h' -o -name '*.c'); \
	if [ -n "$$files" ]; then clang-format -i $$files; fi

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR) $(FUZZ_DIR)
