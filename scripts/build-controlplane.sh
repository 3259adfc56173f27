#!/usr/bin/env bash
# Builds the test-only Kubernetes control plane (e2e/controlplane: embedded etcd, kube-apiserver
# and kube-controller-manager from the Go module k8s.io/kubernetes) into the clone's
# .tools/bin/sigx-controlplane, which e2e/src/controlplane.rs starts once per test file.
#
# Usage: build-controlplane.sh [1.34]
# - no argument: Kubernetes 1.37 (e2e/controlplane/go.mod) into .tools/bin/sigx-controlplane;
# - 1.34: the same source against Kubernetes 1.34, the oldest release sigx supports
#   (e2e/controlplane/go-1.34.mod, `go build -modfile`) into .tools/bin/sigx-controlplane-1.34,
#   which `make test` runs the kube_real_* suites on a second time (SIGX_CONTROLPLANE).
#
# - The binary reports the Kubernetes release it is built from (`/version`'s gitVersion, set by
#   -ldflags -X as Kubernetes' own build does): helm checks a chart's kubeVersion against it,
#   and an unversioned build reports v0.0.0-master, which the chart refuses.
# - A no-op when the binary is newer than this script and every file under e2e/controlplane.
# - Reuses a Go build cache outside the clone (build time is a feature: the cold build compiles
#   all of kube-apiserver): GOCACHE=${SIGX_GOCACHE:-$HOME/.cache/go-build}, and Go's default
#   module cache (GOMODCACHE) unless set. Modules come from the Go module proxy.
# - Parallelism follows GOFLAGS (default -p=2: the machine has 2 cores).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="${ROOT}/e2e/controlplane"
RELEASE="${1:-}"
case "${RELEASE}" in
    "") OUT="${ROOT}/.tools/bin/sigx-controlplane"; MODFILE=() ;;
    1.34) OUT="${ROOT}/.tools/bin/sigx-controlplane-1.34"; MODFILE=(-modfile=go-1.34.mod) ;;
    *) echo "build-controlplane: no go.mod for Kubernetes '${RELEASE}' (known: 1.37 by default, 1.34)" >&2; exit 2 ;;
esac

if ! command -v go >/dev/null 2>&1; then
    echo "build-controlplane: 'go' is not on PATH; the e2e control plane needs Go >= 1.26 (go.mod in ${SRC})" >&2
    exit 1
fi

if [[ -x "${OUT}" ]] && [[ -z "$(find "${SRC}" "${BASH_SOURCE[0]}" -type f -newer "${OUT}" -print -quit)" ]]; then
    echo "build-controlplane: ${OUT} is up to date"
    exit 0
fi

export GOCACHE="${SIGX_GOCACHE:-${HOME}/.cache/go-build}"
export GOFLAGS="${GOFLAGS:--p=2} -buildvcs=false"
mkdir -p "${GOCACHE}" "$(dirname "${OUT}")"
echo "build-controlplane: building ${OUT} (GOCACHE=${GOCACHE}; a cold build takes several minutes)"
start=${SECONDS}
MOD="${SRC}/go.mod"
[[ -n "${RELEASE}" ]] && MOD="${SRC}/go-${RELEASE}.mod"
KUBE_VERSION="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ { print $2; exit }' "${MOD}")"
if [[ ! "${KUBE_VERSION}" =~ ^v1\.([0-9]+)\.[0-9]+$ ]]; then
    echo "build-controlplane: no k8s.io/kubernetes v1.x.y requirement in ${MOD}" >&2
    exit 1
fi
VERSION_PKG=k8s.io/component-base/version
LDFLAGS="-X ${VERSION_PKG}.gitVersion=${KUBE_VERSION} -X ${VERSION_PKG}.gitMajor=1"
LDFLAGS+=" -X ${VERSION_PKG}.gitMinor=${BASH_REMATCH[1]} -X ${VERSION_PKG}.gitTreeState=clean"
(cd "${SRC}" && go build -trimpath -ldflags "${LDFLAGS}" "${MODFILE[@]}" -o "${OUT}.tmp" .)
mv "${OUT}.tmp" "${OUT}"
echo "build-controlplane: built in $((SECONDS - start)) s"
