# natrix: make help
SHELL := /bin/bash
CARGO ?= $(shell command -v cargo || echo $(HOME)/.cargo/bin/cargo)
BIN := target/release/natrix
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: help deps build test demo bench lint fmt clean

help: ## this list
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

deps: ## check the machine, install what is missing (apt-get)
	@scripts/deps.sh

build: deps ## build target/release/natrix (data plane included)
	$(CARGO) build --release --locked

test: build ## every test: unit, BPF_PROG_TEST_RUN packets, namespaces (needs root)
	$(CARGO) test --release --locked -- --test-threads=2

demo: build ## namespaces, gateway, traffic from two subscribers, sessions shown
	scripts/demo.sh

bench: build ## benchmarks: bench-results/, docs/PERFORMANCE.md (BENCH_QUICK=1: ~2 min)
	scripts/bench.sh

lint: deps ## formatting and clippy
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --all-targets -- -D warnings
	clang-format --dry-run --Werror bpf/*.c bpf/*.h

fmt: deps ## format Rust and C
	$(CARGO) fmt --all
	clang-format -i bpf/*.c bpf/*.h

clean: ## remove build output
	$(CARGO) clean
