# The two commands: `make run` runs the default job, `make test` builds and runs the tests.
# Both install the system packages they need first (scripts/install-deps.sh, idempotent).
PRESET ?= release
BUILD := build/$(PRESET)
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: deps configure build run test install test-asan test-asan-all test-tsan test-tsan-core ci-sanitizers fuzz bench-training bench-compare bench-shm bench-scale bench-tcp bench-python bench-python-elastic bench-compression bench-sync bench-recovery bench-coordinator-loss bench-rendezvous bench-simulate soak accuracy-compression bench-trace format lint clean

deps:
	@scripts/install-deps.sh

configure: deps
	@test -f $(BUILD)/build.ninja || cmake --preset $(PRESET) >/dev/null

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The default job.
run: build
	$(BUILD)/cohort run examples/fashion-cnn.yaml

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) $(CTEST_ARGS)

test-asan:
	$(MAKE) test PRESET=asan

TSAN_OPTIONS_ALL := suppressions=$(CURDIR)/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1

test-tsan:
	TSAN_OPTIONS="$(TSAN_OPTIONS_ALL)" $(MAKE) test PRESET=tsan

# ThreadSanitizer on the communication core and the layers whose threads work with it: base, net,
# store, comm, elastic, ps (CI runs it). Only their test programs are built.
TSAN_CORE_LAYERS := base net store comm elastic ps
empty :=
space := $(empty) $(empty)
test-tsan-core:
	$(MAKE) configure PRESET=tsan
	cmake --build build/tsan -j $(JOBS) --target $(TSAN_CORE_LAYERS:%=cohort_%_tests)
	TSAN_OPTIONS="$(TSAN_OPTIONS_ALL)" ctest --test-dir build/tsan --output-on-failure \
	  -j $(JOBS) -L '^($(subst $(space),|,$(TSAN_CORE_LAYERS)))$$' $(CTEST_ARGS)

# What CI runs under the sanitizers, to fit its time: test-asan and test-tsan-core less part of the
# collectives matrices, whose worlds of 1 to 5 ranks repeat over every kind of pair what the
# sanitizers already see over shared memory (every world size, count and algorithm stays there, and
# every other kind of pair keeps its 8-rank world), and the thousand-rank scale tests, which run
# on their own for minutes. test-asan and test-tsan-core run it all.
SANITIZER_CI_SKIP := /n[1-5]_count[0-9]+_[a-z_]+_(tcp|hosts|lazy|hmac|gmac|mixed)|(Collectives|Rooted)\..*/n[1-5]_(tcp|hosts|lazy|hmac|gmac|mixed)|^(Processes|Scale)\.
ci-sanitizers:
	$(MAKE) test-asan CTEST_ARGS="-E '$(SANITIZER_CI_SKIP)'"
	$(MAKE) test-tsan-core CTEST_ARGS="-E '$(SANITIZER_CI_SKIP)'"

# Every suite, DDP, training and end to end included, under ASan + UBSan (libtorch itself is not
# instrumented: container-overflow checks across it would be false alarms, and its own
# allocations at exit are not leaks of ours). Slow: not in CI.
test-asan-all:
	ASAN_OPTIONS=detect_container_overflow=0:detect_leaks=0 $(MAKE) test PRESET=asan-all

# libFuzzer (clang, ASan + UBSan) on every decoder that reads what others send: frames, the
# handshake, the store protocol, job files, checkpoints, the console's HTTP API; built in the ASan
# tree (build/asan). FUZZ_SECONDS each (60), FUZZ_JOBS at a time (one per CPU); scripts/fuzz.sh.
fuzz: deps
	scripts/fuzz.sh

# Cohort against OpenMPI and Gloo, side by side; writes the table into BENCHMARKS.md.
bench-training: build
	scripts/bench-training.sh

bench-compare: build
	scripts/bench-compare.sh

# Cohort's shared memory against Open MPI's vader (default and tuned), 2 and 4 ranks; prints the
# table of BENCHMARKS.md's shared-memory section (about 15 minutes).
bench-shm: build
	scripts/bench-shm.sh

# Scaling on the emulated cluster (needs root): the hierarchical allreduce against the flat ring,
# 2 hosts x 2 and x 4 ranks at 1 Gbit/s (a few minutes); writes its section of BENCHMARKS.md.
bench-scale: build
	scripts/bench-scale.sh

# Two ranks over TCP (needs root for its second part): Cohort's allreduce at 16 and 64 MiB against
# iperf3 --bidir on loopback, and on the emulated cluster at 1 Gbit/s Cohort's default socket
# buffers against pinned ones (about 10 minutes); writes its section of BENCHMARKS.md.
bench-tcp: build
	scripts/bench-tcp.sh

# The same PyTorch scripts with backend "gloo" and "cohort": DDP samples/s (mlp, cnn; workers
# unbound and bound, separate runs and both backends in the same processes) and all_reduce latency
# and bandwidth, 2 workers under torchrun; then elastic recovery against TorchElastic (about 30
# minutes in all); writes their sections of BENCHMARKS.md.
bench-python: build
	scripts/bench-python.sh
	scripts/bench-python-elastic.sh

bench-python-elastic: build
	scripts/bench-python-elastic.sh

# Time to accuracy on the emulated bandwidth-limited cluster (scripts/netcluster.sh, needs root):
# Cohort's gradient compressions against PyTorch DDP; writes its section of BENCHMARKS.md. The
# default is the 100 Mbit/s, 2-worker row (~25 min on 2 idle CPUs); BENCH_RATES, BENCH_WORKERS,
# BENCH_BATCH pick others (BENCH_KEEP=1 adds them to the rows already in BENCHMARKS.md).
bench-compression: build
	scripts/bench-compression.sh

# Synchronization modes on the emulated cluster (needs root): Cohort's allreduce and local SGD
# against PyTorch DDP and PyTorch's post-local SGD; writes its section of BENCHMARKS.md. The
# default is the bandwidth-bound regime (100 Mbit/s, 4 workers, batch 16; ~25 min on 2 idle
# CPUs); BENCH_RATE, BENCH_WORKERS, BENCH_BATCH, BENCH_PERIOD pick others (BENCH_KEEP=1 adds them).
bench-sync: build
	scripts/bench-sync.sh

# The simulator against this machine's measurements (1, 2, 4 workers on loopback; the emulated
# cluster at 100 Mbit/s and 1 Gbit/s, which needs root) and against Horovod's published scaling
# (scripts/bench-simulate.py; the loopback part alone, which calibrates before each of its 18
# runs, about 45 minutes); writes its section of BENCHMARKS.md.
bench-simulate: build
	/usr/bin/python3 scripts/bench-simulate.py $(BUILD)/cohort

# The CNN on Fashion-MNIST with each gradient compression against uncompressed training (one
# epoch each, about 15 minutes on 2 cores); fails if a codec misses its accuracy target.
accuracy-compression: build
	scripts/compression-accuracy.sh

# Recovery from a killed worker: Cohort against TorchElastic; writes its section of BENCHMARKS.md.
bench-recovery: build
	scripts/bench-recovery.sh

# Losing the coordinator: Cohort's etcd standby against TorchElastic's etcd-v2 rendezvous (etcd
# started for each run); writes its section of BENCHMARKS.md.
bench-coordinator-loss: build
	scripts/bench-coordinator-loss.sh

# Rendezvous of 128 workers on this machine: Cohort's embedded store and etcd against torchrun's
# c10d and etcd-v2 rendezvous; writes its section of BENCHMARKS.md (needs ~12 GiB of memory).
bench-rendezvous: build
	scripts/bench-rendezvous.sh

# The soak drill (needs root): a 4-worker job on the emulated cluster for SOAK_MINUTES (10) under a
# random fault every 20-40 s; fails unless the job finished with every sample of every epoch trained
# on once, every checkpoint verifying and nothing of the job left; writes its section of
# BENCHMARKS.md (scripts/soak.py).
soak: build
	/usr/bin/python3 scripts/soak.py $(BUILD)/cohort $(BUILD)/soak --report BENCHMARKS.md

# The cost of the timeline on step time (trace.enabled on against off).
bench-trace: build
	scripts/bench-trace.sh

PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

format:
	find src tests bench -name '*.h' -o -name '*.cc' | xargs clang-format -i

lint: configure
	find src -name '*.cc' | xargs clang-tidy -p $(BUILD) --quiet

clean:
	rm -rf build
