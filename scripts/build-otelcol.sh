#!/usr/bin/env bash
# Builds the test-only OpenTelemetry Collector (e2e/otelcol: the upstream otelcol service with the
# OTLP receiver and the contrib file exporter, all at release v0.161.0) into the clone's
# .tools/bin/sigx-otelcol, which e2e/src/otelcol.rs starts for the tracing tests.
#
# - A no-op when the binary is newer than every file under e2e/otelcol.
# - Reuses a Go build cache outside the clone: GOCACHE=${SIGX_GOCACHE:-$HOME/.cache/go-build},
#   and Go's default module cache (GOMODCACHE) unless set. Modules come from the Go module proxy.
# - Parallelism follows GOFLAGS (default -p=2: the machine has 2 cores).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="${ROOT}/e2e/otelcol"
OUT="${ROOT}/.tools/bin/sigx-otelcol"

if ! command -v go >/dev/null 2>&1; then
    echo "build-otelcol: 'go' is not on PATH; the test collector needs Go >= 1.26 (go.mod in ${SRC})" >&2
    exit 1
fi

if [[ -x "${OUT}" ]] && [[ -z "$(find "${SRC}" -type f -newer "${OUT}" -print -quit)" ]]; then
    echo "build-otelcol: ${OUT} is up to date"
    exit 0
fi

export GOCACHE="${SIGX_GOCACHE:-${HOME}/.cache/go-build}"
export GOFLAGS="${GOFLAGS:--p=2} -buildvcs=false"
mkdir -p "${GOCACHE}" "$(dirname "${OUT}")"
echo "build-otelcol: building ${OUT} (GOCACHE=${GOCACHE}; a cold build takes a few minutes)"
start=${SECONDS}
(cd "${SRC}" && go build -trimpath -o "${OUT}.tmp" .)
mv "${OUT}.tmp" "${OUT}"
echo "build-otelcol: built in $((SECONDS - start)) s"
