# natrix: make help
SHELL := /bin/bash
CARGO ?= $(shell command -v cargo || echo $(HOME)/.cargo/bin/cargo)
BIN := target/release/natrix
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: help deps deps-test deps-bench deps-lint deps-hw deps-kernels build test kernel-matrix demo bench hw-test lint fmt clean

help: ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

deps: ## check the machine for building, install what is missing (apt-get)
	@scripts/deps.sh build

deps-test deps-bench deps-lint deps-hw deps-kernels: # what make test, bench, lint, hw-test and kernel-matrix need besides
	@scripts/deps.sh $(@:deps-%=%)

build: deps ## build target/release/natrix (data plane included): the product only
	$(CARGO) build --release --locked -p natrix

test: build deps-test deps-hw deps-kernels ## every test: unit, BPF_PROG_TEST_RUN packets, namespaces (needs root), make kernel-matrix, make hw-test
	$(CARGO) test --release --locked --workspace -- --test-threads=2
	CARGO=$(CARGO) tests/kernels/matrix.sh
	hw/run-tests.sh

kernel-matrix: build deps-test deps-kernels ## the data plane's tests on Linux 6.1, 6.12 (qemu -accel tcg) and this kernel, clang 14 and 19 (tests/kernels/)
	CARGO=$(CARGO) tests/kernels/matrix.sh

demo: build deps-test ## namespaces, gateway, traffic from two subscribers, sessions shown
	scripts/demo.sh

bench: build deps-bench ## benchmarks: bench-results/, docs/PERFORMANCE.md (BENCH_QUICK=1: ~2 min)
	$(CARGO) build --release --locked -p natrix-bench
	scripts/bench.sh

hw-test: deps-hw ## the RTL under hw/: proofs, simulations against the C (docs/HARDWARE.md)
	hw/run-tests.sh

.PHONY: bench-hw
bench-hw: ## the RTL core's numbers: Verilator cycles, Yosys size, nextpnr Fmax -> docs/HARDWARE.md (BENCH_QUICK=1: 1k only)
	hw/bench/deps.sh
	hw/bench/bench.sh

lint: deps deps-lint ## formatting, clippy -D warnings, clang-format (CI runs it)
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --locked --workspace --all-targets -- -D warnings
	clang-format --dry-run --Werror bpf/*.c bpf/*.h bench/bpf/*.c bench/bpf/*.h tests/bpf/*.c

fmt: deps deps-lint ## format Rust and C
	$(CARGO) fmt --all
	clang-format -i bpf/*.c bpf/*.h bench/bpf/*.c bench/bpf/*.h tests/bpf/*.c

clean: ## remove build output
	$(CARGO) clean
