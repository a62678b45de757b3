# kolo: the two commands of the README, plus the sanitizer run and chores.
#
#   make demo       install missing deps, build, train the Fashion-MNIST
#                   example on 2 local ranks under kolorun (C++ when built
#                   with libtorch, else Python) and print its accuracy and
#                   speedup over a short 1-rank run
#   make test       install missing deps, build (RelWithDebInfo) into build/,
#                   run every test with ctest
#   make test-asan  the same tests built with ASan+UBSan into build-asan/
#   make test-tsan  the runtime's tests (label tsan) built with TSan into
#                   build-tsan/
#   make fuzz       build the libFuzzer targets (tests/fuzz/) with clang into
#                   build-fuzz/ and run each for FUZZ_SECONDS (30) from its
#                   seed corpus; a crash fails (its input is left in
#                   build-fuzz/artifacts/)
#   make format     clang-format every C/C++ source in place
#   make clean      remove build/ and build-asan/
#
# BUILD_DIR, ASAN_DIR, JOBS, CTEST_TIMEOUT and CUDA (KOLO_WITH_CUDA of a
# newly configured BUILD_DIR: auto, ON or OFF; docs/gpu.md) may be overridden:
#   make test BUILD_DIR=build-mine JOBS=1
#   make test BUILD_DIR=build-cpu CUDA=OFF
BUILD_DIR ?= build
ASAN_DIR ?= build-asan
TSAN_DIR ?= build-tsan
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 30
FUZZ_TARGETS := store_protocol tcp_handshake tcp_frames negotiation ps_wire
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CTEST_TIMEOUT ?= 600
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo Ninja || echo "Unix Makefiles")

DEMO_ARGS ?= -o allreduce -b 8 -e 64M -f 8
# The training demo: 2 epochs on 2 ranks (about 88% test accuracy); the
# 1-rank run before it is cut to DEMO_BASE_STEPS steps per epoch and only
# records the throughput the speedup is measured against.
DEMO_EPOCHS ?= 2
DEMO_BASE_STEPS ?= 150
DEMO_PY := env PYTHONPATH=$(BUILD_DIR)/python /usr/bin/python3 examples/fashion_mnist.py

# The sanitizer builds carry only kolo's own code and its tests: no examples,
# no libtorch integration, no Python extension and no CUDA (the framework
# libraries and the CUDA runtime are not built with the sanitizers).
# The plain build has CUDA when nvcc is found (KOLO_WITH_CUDA=auto); pass
# CUDA=OFF (or ON) to choose: make test CUDA=OFF. docs/gpu.md.
SAN_FLAGS := -DKOLO_BUILD_EXAMPLES=OFF -DKOLO_WITH_TORCH=OFF -DKOLO_BUILD_PYTHON=OFF \
             -DKOLO_WITH_CUDA=OFF
CUDA ?= auto
ASAN_FLAGS := -DKOLO_SANITIZE=address,undefined $(SAN_FLAGS)
TSAN_FLAGS := -DKOLO_SANITIZE=thread $(SAN_FLAGS)
# Thread leaks are not reported: the process tests end ranks with _exit on
# purpose, with the runtime thread still running.
export TSAN_OPTIONS ?= halt_on_error=1:second_deadlock_stack=1:report_thread_leaks=0
export ASAN_OPTIONS ?= detect_leaks=1:abort_on_error=0:strict_string_checks=1
export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1

.PHONY: all deps build demo test build-asan test-asan build-tsan test-tsan build-fuzz fuzz format clean

all: build

deps:
	@scripts/install-deps.sh

# Configure once (cmake re-runs itself when a CMakeLists.txt changes).
$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DKOLO_WITH_CUDA=$(CUDA)

$(ASAN_DIR)/CMakeCache.txt:
	cmake -S . -B $(ASAN_DIR) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(ASAN_FLAGS)

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The main job: train the Fashion-MNIST example on 2 ranks. The libtorch
# example when it was built, else the PyTorch one (kolo's Python package);
# without either, the allreduce benchmark (or the C example) stands in.
demo: build
	@set -e; \
	if [ -x $(BUILD_DIR)/bin/fashion_mnist ]; then \
	  train="$(BUILD_DIR)/bin/fashion_mnist"; base=$(BUILD_DIR)/fashion_mnist_1rank.json; \
	elif ls $(BUILD_DIR)/python/kolo/_native*.so >/dev/null 2>&1; then \
	  train="$(DEMO_PY)"; base=$(BUILD_DIR)/fashion_mnist_py_1rank.json; \
	fi; \
	if [ -n "$${train:-}" ]; then \
	  echo "+ $(BUILD_DIR)/bin/kolorun -np 1 $$train --epochs 2 --max-steps $(DEMO_BASE_STEPS) --no-progress --baseline $$base  # 1-rank throughput"; \
	  $(BUILD_DIR)/bin/kolorun -np 1 $$train --epochs 2 --max-steps $(DEMO_BASE_STEPS) --no-progress --baseline $$base; \
	  echo "+ $(BUILD_DIR)/bin/kolorun -np 2 $$train --epochs $(DEMO_EPOCHS) --baseline $$base"; \
	  $(BUILD_DIR)/bin/kolorun -np 2 $$train --epochs $(DEMO_EPOCHS) --baseline $$base; \
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
	cmake -S . -B $(TSAN_DIR) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(TSAN_FLAGS)

build-tsan: deps $(TSAN_DIR)/CMakeCache.txt
	cmake --build $(TSAN_DIR) -j $(JOBS) --target tsan_tests

test-tsan: build-tsan
	cd $(TSAN_DIR) && ctest --output-on-failure -j $(JOBS) --timeout $(CTEST_TIMEOUT) -L tsan

$(FUZZ_DIR)/CMakeCache.txt:
	CC=clang CXX=clang++ cmake -S tests/fuzz -B $(FUZZ_DIR) -G "$(GENERATOR)"

build-fuzz: deps $(FUZZ_DIR)/CMakeCache.txt
	cmake --build $(FUZZ_DIR) -j $(JOBS)

# New inputs go to $(FUZZ_DIR)/corpus/TARGET; the seeds in the tree are read only.
fuzz: build-fuzz
	@set -e; mkdir -p $(FUZZ_DIR)/artifacts; \
	for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_DIR)/corpus/$$t; \
	  echo "== fuzz_$$t for $(FUZZ_SECONDS) s"; \
	  $(FUZZ_DIR)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_DIR)/artifacts/$$t- \
	    $(FUZZ_DIR)/corpus/$$t tests/fuzz/corpus/$$t 2>&1 | \
	    grep -E '^(stat::number_of_executed_units|Done|==[0-9]+==ERROR|SUMMARY)' || true; \
	  if ls $(FUZZ_DIR)/artifacts/$$t-* >/dev/null 2>&1; then \
	    echo "fuzz_$$t found a failing input: $$(ls $(FUZZ_DIR)/artifacts/$$t-*)"; exit 1; fi; \
	done

format:
	@files=$$(git ls-files '*.cc' '*.h' '*.c' '*.cpp' 2>/dev/null || \
	          find src include tools tests examples python -name '*.cc' -o -name '*.h' -o -name '*.c'); \
	if [ -n "$$files" ]; then clang-format -i $$files; fi

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR) $(FUZZ_DIR)
