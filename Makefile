# sigx — the two commands that matter on a fresh machine are `make demo` and `make test`.
# Cargo's target directory follows CARGO_TARGET_DIR when set (CI reuses one outside the clone).

SHELL := /bin/bash
CARGO ?= cargo
TARGET_DIR := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)
BIN := $(TARGET_DIR)/debug
RELEASE_BIN := $(TARGET_DIR)/release
SEEDS ?= 500
SEED_START ?= 0

.PHONY: all build controlplane otelcol demo test test-rust test-lang test-python test-node test-go test-dashboard test-kube-1.34 check-manifests tools fmt lint crds bench bench-chaos sim images clean-demo fuzz fuzz-smoke bench-lang

all: build

build:
	$(CARGO) build --workspace --bins

## demo: start a local 3-host cluster on the embedded SQLite membership, drive a workload,
## check every counter, print status, stop cleanly.
demo: build
	$(BIN)/sigx dev up --hosts 3 --workload 1000 --exit-after-workload --dir .sigx/demo

## test: every test of the workspace, the stock-client tests in Python, Node.js and Go, the
## dashboard's browser test, the manifest checks (helm lint, kubernetes-validate), then a short
## run of every fuzz target.
test: test-rust test-lang test-dashboard check-manifests fuzz-smoke

## nextest runs every test in a process of its own (the suites start real processes, servers and
## clusters); it is built into .tools/bin by scripts/install-tools.sh, never taken from the machine.
test-rust: build controlplane otelcol
	bash scripts/install-tools.sh nextest
	bash scripts/install-tools.sh postgres
	bash scripts/install-tools.sh manifests
	PATH="$(CURDIR)/.tools/bin:$$PATH" $(CARGO) nextest run --workspace --no-fail-fast
	$(MAKE) --no-print-directory test-kube-1.34
	$(CARGO) test --workspace --doc

## test-kube-1.34: the kube_real_* suites again on a Kubernetes 1.34 control plane, the oldest
## release the chart admits (kubeVersion), so both ends of the supported range are tested. The
## operator's idle-load measurement runs on 1.37 only: it measures the operator, not the server.
test-kube-1.34: build
	bash scripts/install-tools.sh nextest
	bash scripts/install-tools.sh manifests
	bash scripts/build-controlplane.sh 1.34
	SIGX_CONTROLPLANE="$(CURDIR)/.tools/bin/sigx-controlplane-1.34" PATH="$(CURDIR)/.tools/bin:$$PATH" \
		$(CARGO) nextest run -p sigx-e2e --no-fail-fast \
		-E 'binary(/^kube_real_/) - binary(kube_real_operator_idle)'

## controlplane: the test-only Kubernetes control plane (e2e/controlplane, Go: embedded etcd,
## kube-apiserver, kube-controller-manager) into .tools/bin/sigx-controlplane (1.37) and
## .tools/bin/sigx-controlplane-1.34, for the kube_real_* tests. A no-op when up to date; the Go build cache is reused across clones.
controlplane:
	bash scripts/build-controlplane.sh
	bash scripts/build-controlplane.sh 1.34

## otelcol: the test-only OpenTelemetry Collector (e2e/otelcol, Go: the OTLP receiver and the
## file exporter at collector release v0.161.0) into .tools/bin/sigx-otelcol, for the tracing
## e2e test (tracing_otlp). A no-op when up to date; the Go build cache is reused across clones.
otelcol:
	bash scripts/build-otelcol.sh

## test-lang: Python (pytest), Node.js (node --test) and Go (go test) programs using only their
## language's stock gRPC library, with default options, against the real sigx-sidecar binary
## (found through SIGX_BIN_DIR); the operator's metrics test also starts the test control plane.
## The tools install into .tools/ and sdk/ (install-lang-tools.sh).
test-lang: build controlplane
	bash scripts/install-lang-tools.sh
	$(MAKE) --no-print-directory test-python test-node test-go

test-python:
	cd sdk/python && SIGX_BIN_DIR=$(BIN) $(CURDIR)/.tools/venv-py/bin/python -m pytest tests

test-node:
	cd sdk/typescript && npm run --silent build && npm run --silent typecheck && SIGX_BIN_DIR=$(BIN) node --test test/

test-go:
	cd sdk/go && SIGX_BIN_DIR=$(BIN) go test -count=1 ./...

## test-dashboard: the browser test of `sigx dashboard` (e2e/dashboard/dashboard.test.mjs):
## headless Debian chromium driven by playwright-core against `sigx dev up --hosts 3` of the real
## binaries; screenshots in e2e/artifacts/. Installs chromium (apt) and the pinned playwright-core
## (npm ci) first; a missing browser fails the test, never skips it.
test-dashboard: build
	bash scripts/install-tools.sh dashboard
	cd e2e/dashboard && SIGX_BIN_DIR=$(BIN) node --test dashboard.test.mjs

tools:
	bash scripts/install-tools.sh

## check-manifests: every manifest against the schemas of both ends of the supported range.
check-manifests:
	K8S_VERSION=1.37.0 bash scripts/check-manifests.sh
	K8S_VERSION=1.34.0 bash scripts/check-manifests.sh

fmt:
	$(CARGO) fmt --all

## lint: formatting and clippy with warnings as errors (clippy.toml bans std's clocks in logic).
lint:
	bash scripts/install-tools.sh rust
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## images: the sidecar (with the CLI), operator and counter-app images as OCI archives in
## target/images/ (no container engine needed; `docker load -i` / `skopeo copy oci-archive:` take
## them). TAG defaults to the workspace version; SIGX_IMAGE_REPO to ghcr.io/sigx.
images:
	$(CARGO) build --release --bins
	bash scripts/build-images.sh $(RELEASE_BIN) $(TARGET_DIR)/images $(TAG)

## crds: regenerate the checked-in CRD YAML.
crds:
	$(CARGO) run -p sigx-crds --bin crdgen

## bench: latency/throughput next to raw tonic baselines measured in the same run, HMAC,
## directory and membership figures, then the SDK overhead per language (bench-lang). See
## BENCHMARKS.md.
bench:
	$(CARGO) bench -p sigx-sidecar
	$(CARGO) bench -p sigx-e2e --bench call
	$(CARGO) bench -p sigx-e2e --bench state
	$(MAKE) --no-print-directory bench-lang

## bench-lang: issue 15's SDK overhead per language. For Rust, Python, Node.js and Go in turn, an
## SDK client calling an actor served by the same language's SDK app through one real release
## sigx-sidecar, next to that language's stock gRPC unary echo over a Unix socket in the same
## process and run; then each language's added cost (SDK p50 - echo p50) against Rust's
## (target ≤ 1.30×). scripts/bench-lang.sh; median of SIGX_BENCH_LANG_RUNS runs (default 5). See BENCHMARKS.md.
bench-lang:
	$(CARGO) build --release --bins
	bash scripts/install-lang-tools.sh
	CARGO="$(CARGO)" bash scripts/bench-lang.sh $(RELEASE_BIN)

## bench-chaos: the chaos scenarios at benchmark size on release binaries (>= 100k calls), then
## issue 12's single-activation rounds (sidecar SIGSTOP, app restart) 50 times each, then 100,000
## reminders across 3 pods (SIGX_BENCH_REMINDERS to change it).
bench-chaos:
	$(CARGO) build --release --bins
	SIGX_BIN_DIR=$(RELEASE_BIN) $(CARGO) bench -p sigx-e2e --bench chaos
	CHAOS_STOP_ROUNDS=50 CHAOS_APP_RESTARTS=50 SIGX_BIN_DIR=$(RELEASE_BIN) \
	  $(CARGO) test -p sigx-e2e --test single_activation -- --test-threads=1 --nocapture
	SIGX_BIN_DIR=$(RELEASE_BIN) $(CARGO) test -p sigx-e2e --test reminders_fleet at_scale \
	  -- --ignored --nocapture

## sim: deterministic simulation. `make sim SEED=n` replays one seed; `make sim SEEDS=n SEED_START=m` runs a batch.
## Built with --cfg tokio_unstable so that turmoil seeds tokio's own RNG from the seed (without
## it a replay reproduces the verdict but not every event time), in a target dir of its own so
## the flag does not invalidate the main build cache. The first run builds it (~6 min, 2 cores).
## A batch runs in processes of SIM_CHUNK seeds each: a simulated host's runtime, gates and
## mesh dialer hold each other in reference cycles that outlive its run (about 1.6 MB a seed;
## harmless in a sidecar, which runs one host for its whole life), so one process for 100,000
## seeds would need ~160 GB.
SIM_CHUNK ?= 2000
SIM_TARGET_DIR ?= $(if $(CARGO_TARGET_DIR),$(CARGO_TARGET_DIR)-unstable,target/tokio-unstable)
SIM_CARGO = RUSTFLAGS="--cfg tokio_unstable" CARGO_TARGET_DIR=$(SIM_TARGET_DIR) $(CARGO)
sim:
	@if [ -n "$(SEED)" ]; then \
		SIGX_SIM_SEED=$(SEED) $(SIM_CARGO) test -p sigx-e2e --release --test simulation -- --nocapture --exact replay; \
	else \
		start=$(SEED_START); left=$(SEEDS); \
		while [ $$left -gt 0 ]; do \
			n=$$(( left < $(SIM_CHUNK) ? left : $(SIM_CHUNK) )); \
			echo "sim: seeds $$start..$$((start + n - 1)) ($$left left)"; \
			SIGX_SIM_SEEDS=$$n SIGX_SIM_SEED_START=$$start $(SIM_CARGO) test -p sigx-e2e --release --test simulation -- --nocapture batch || exit 1; \
			start=$$((start + n)); left=$$((left - n)); \
		done; \
	fi

## fuzz: every fuzz target of fuzz/ (cargo-fuzz, libFuzzer, nightly) for FUZZ_SECONDS each
## (default 60). tests/corpus.rs of sigx-fuzz replays the checked-in corpus and every crash found
## (fuzz/regressions/) on stable in `make test`. New corpus entries go to .fuzz/corpus/<target>
## (not checked in), crashes to .fuzz/artifacts/<target>/; move a crash into
## fuzz/regressions/<target>/ once it is fixed. Built in a target dir of its own
## (FUZZ_TARGET_DIR), as the coverage flags would invalidate the main build cache.
FUZZ_SECONDS ?= 60
FUZZ_TARGET_DIR ?= $(if $(CARGO_TARGET_DIR),$(CARGO_TARGET_DIR)-fuzz,$(CURDIR)/target/fuzz)
FUZZ_TARGETS = $(basename $(notdir $(wildcard fuzz/fuzz_targets/*.rs)))
FUZZ_CARGO = PATH="$(CURDIR)/.tools/bin:$$PATH" CARGO_TARGET_DIR=$(FUZZ_TARGET_DIR) $(CARGO) +nightly fuzz
FUZZ_FLAGS = --fuzz-dir fuzz --features libfuzzer --debug-assertions --sanitizer none
fuzz:
	bash scripts/install-tools.sh fuzz
	$(FUZZ_CARGO) build $(FUZZ_FLAGS)
	@set -e; for t in $(FUZZ_TARGETS); do \
		mkdir -p .fuzz/corpus/$$t .fuzz/artifacts/$$t; \
		echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
		$(FUZZ_CARGO) run $(FUZZ_FLAGS) $$t .fuzz/corpus/$$t fuzz/corpus/$$t \
			-- -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=.fuzz/artifacts/$$t/ -print_final_stats=1; \
	done

## fuzz-smoke (part of `make test`): every fuzz target for FUZZ_SMOKE_SECONDS each (default 45),
## on the stable toolchain (no sanitizer: libFuzzer's coverage flags are stable), dev profile
## (debug assertions and overflow checks on, the fastest build). Starts from the checked-in
## corpus; a crash fails the run and leaves its input in .fuzz/artifacts/<target>/.
FUZZ_SMOKE_SECONDS ?= 45
FUZZ_SMOKE_CARGO = PATH="$(CURDIR)/.tools/bin:$$PATH" CARGO_TARGET_DIR=$(FUZZ_TARGET_DIR)-stable $(CARGO) fuzz
FUZZ_SMOKE_FLAGS = --fuzz-dir fuzz --features libfuzzer --sanitizer none --dev
fuzz-smoke:
	bash scripts/install-tools.sh fuzz-stable
	$(FUZZ_SMOKE_CARGO) build $(FUZZ_SMOKE_FLAGS)
	@set -e; for t in $(FUZZ_TARGETS); do \
		rm -rf .fuzz/smoke/$$t; mkdir -p .fuzz/smoke/$$t .fuzz/artifacts/$$t; \
		echo "fuzz-smoke: $$t for $(FUZZ_SMOKE_SECONDS) s (log .fuzz/smoke/$$t.log)"; \
		if $(FUZZ_SMOKE_CARGO) run $(FUZZ_SMOKE_FLAGS) $$t .fuzz/smoke/$$t fuzz/corpus/$$t \
			-- -max_total_time=$(FUZZ_SMOKE_SECONDS) -artifact_prefix=.fuzz/artifacts/$$t/ \
			-print_final_stats=1 >.fuzz/smoke/$$t.log 2>&1; then \
			grep -E '^(stat::number_of_executed_units|stat::new_units_added|Done)' .fuzz/smoke/$$t.log || true; \
		else \
			tail -n 40 .fuzz/smoke/$$t.log; \
			echo "fuzz-smoke: $$t FAILED; the input is in .fuzz/artifacts/$$t/" >&2; exit 1; \
		fi; \
	done

clean-demo:
	rm -rf .sigx
