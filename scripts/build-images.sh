#!/usr/bin/env bash
# Builds the three sigx images as OCI archives, without a container engine:
#   build-images.sh BIN_DIR OUT_DIR [TAG]
# BIN_DIR holds the built binaries (`make images` passes target/release); TAG defaults to the
# workspace version. Each archive loads with `docker load -i`, `podman load -i` or
# `skopeo copy oci-archive:OUT_DIR/NAME.tar docker://REGISTRY/...`. Repository names follow
# SIGX_IMAGE_REPO (default ghcr.io/sigx), the names the chart and examples use.
# sidecar/Dockerfile, operator/Dockerfile and examples/counter/Dockerfile build the same images
# where a container engine exists.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:?usage: build-images.sh BIN_DIR OUT_DIR [TAG]}"
OUT="${2:?usage: build-images.sh BIN_DIR OUT_DIR [TAG]}"
TAG="${3:-$(sed -n 's/^version = "\(.*\)"/\1/p' "${ROOT}/Cargo.toml" | head -n 1)}"
REPO="${SIGX_IMAGE_REPO:-ghcr.io/sigx}"
build() { python3 "${ROOT}/scripts/build-image.py" --tag "${TAG}" "$@"; }

# The sidecar carries the CLI, so `kubectl exec ... -c sigx-sidecar -- sigx status` works.
build --name "${REPO}/sidecar" --out "${OUT}/sidecar.tar" \
    --entrypoint /usr/local/bin/sigx-sidecar \
    --binary "${BIN}/sigx-sidecar:/usr/local/bin/sigx-sidecar" \
    --binary "${BIN}/sigx:/usr/local/bin/sigx"
build --name "${REPO}/operator" --out "${OUT}/operator.tar" \
    --entrypoint /usr/local/bin/sigx-operator \
    --binary "${BIN}/sigx-operator:/usr/local/bin/sigx-operator"
build --name "${REPO}/counter-app" --out "${OUT}/counter-app.tar" \
    --entrypoint /usr/local/bin/counter-app \
    --binary "${BIN}/counter-app:/usr/local/bin/counter-app"
