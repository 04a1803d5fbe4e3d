# The two commands of the quick start. Each installs what is missing, configures and builds.
BUILD ?= build
JOBS ?= $(shell nproc)
# Tests in parallel: they check only what their own jobs made; the few that time signals run
# alone (RUN_SERIAL). Their ranks wait on each other much of the time, so one more test than
# cores keeps a small machine busy; more than 4 at once only stacks ranks on the same cores.
CTEST_JOBS ?= $(shell n=$$(nproc); echo $$((n + 1 > 4 ? 4 : n + 1)))
DEMO_OUT ?= runs/demo-$(shell date +%Y%m%d-%H%M%S)

.PHONY: all deps build demo test test-asan fuzz clean

all: build

deps:
	@tools/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

demo: build
	$(BUILD)/bin/mtrun -np 4 configs/tiny.cfg --out $(DEMO_OUT)

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(CTEST_JOBS)

# The CPU test suite under ASan and UBSan (no CUDA: the sanitizers do not see into kernels).
# Leaks are not checked: MPI and UCX keep allocations until exit by design. A step is about 50x
# slower here, so the longest tests train shorter jobs (MT_E2E_QUICK: the demo 10 steps, make
# test checks the whole run's loss; e2e_storage's and e2e_grad_ring's 10 steps instead of 20),
# and e2e_beside, which reruns four e2e tests beside a job, runs in make test only.
test-asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMT_SANITIZE=ON -DMT_CUDA=OFF >/dev/null
	@cmake --build build-asan -j$(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 MT_E2E_QUICK=1 \
		ctest --output-on-failure -j$(CTEST_JOBS) -LE beside

# libFuzzer on the six parsers that read files from strangers (tests/fuzz/README.md), with clang.
# FUZZ_SECONDS=600 make fuzz runs each for ten minutes.
fuzz:
	@tools/install-deps.sh fuzz
	@tests/fuzz/run.sh

clean:
	rm -rf $(BUILD) build-asan build-fuzz
