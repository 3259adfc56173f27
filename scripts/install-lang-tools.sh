#!/usr/bin/env bash
# Installs what the other-language tests need (`make test-lang`), into the clone only:
#
#   install-lang-tools.sh [all|python|node|go ...]      (default all)
#
# python: a venv at .tools/venv-py with the pinned grpcio, grpcio-tools, grpcio-status, pytest and
#   setuptools of sdk/python/requirements-test.txt, from PyPI (re-installed when that file
#   changes), and the sigx SDK of sdk/python installed editable into it.
# node:   `npm ci` in sdk/typescript (package-lock.json is checked in, typescript pinned in it) from
#   the npm registry, then `npm run build` (tsc → sdk/typescript/dist).
# go:     `go mod download` in sdk/go (go.sum is checked in), and protoc-gen-go and
#   protoc-gen-go-grpc built into .tools/bin, from the Go module proxy. sdk/go/gen.sh runs them
#   under the protoc inside grpcio-tools (no system protoc), so `go` needs `python` too.
# A missing toolchain (python3 with venv, node and npm, go) fails loudly: a test that cannot run
# never passes. Idempotent: a second run with everything in place only reports it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ROOT}/.tools/venv-py"
SYSTEM_PYTHON="${SYSTEM_PYTHON:-python3}"
SELECTED=("${@:-all}")
for what in "${SELECTED[@]}"; do
    case "${what}" in
        all | python | node | go) ;;
        *)
            echo "install-lang-tools: unknown selection '${what}'; use all, python, node or go" >&2
            exit 2
            ;;
    esac
done
want() {
    local what
    for what in "${SELECTED[@]}"; do
        [[ "${what}" == all || "${what}" == "$1" ]] && return 0
    done
    return 1
}
need() {
    if ! command -v "$1" >/dev/null 2>&1; then
        echo "install-lang-tools: ERROR: '$1' not found; $2" >&2
        exit 1
    fi
}

if want python; then
    need "${SYSTEM_PYTHON}" "install Python 3.10+ (with its venv module) to run the Python tests"
    REQS="${ROOT}/sdk/python/requirements-test.txt"
    STAMP="${VENV}/.requirements-test.txt"
    if [[ ! -x "${VENV}/bin/python" ]]; then
        echo "install-lang-tools: creating ${VENV}"
        "${SYSTEM_PYTHON}" -m venv "${VENV}"
    fi
    if ! cmp -s "${REQS}" "${STAMP}"; then
        echo "install-lang-tools: pip install -r sdk/python/requirements-test.txt"
        "${VENV}/bin/python" -m pip install --quiet --disable-pip-version-check -r "${REQS}"
        cp "${REQS}" "${STAMP}"
    fi
    # The sigx SDK itself, editable (its code is the checkout's), built with the pinned setuptools
    # already in the venv; its dependencies are the pins above.
    if ! "${VENV}/bin/python" -c 'import sigx.app' >/dev/null 2>&1; then
        echo "install-lang-tools: pip install -e sdk/python"
        "${VENV}/bin/python" -m pip install --quiet --disable-pip-version-check \
            --no-build-isolation --no-deps -e "${ROOT}/sdk/python"
    fi
    echo "install-lang-tools: python $("${VENV}/bin/python" -c 'import grpc, sys; print(sys.version.split()[0], "grpcio", grpc.__version__)')"
fi

if want node; then
    need node "install Node.js 18+ to run the Node.js tests"
    need npm "install npm (it comes with Node.js) to run the Node.js tests"
    TS="${ROOT}/sdk/typescript"
    STAMP="${TS}/node_modules/.package-lock.json"
    if [[ ! -f "${STAMP}" || "${TS}/package-lock.json" -nt "${STAMP}" ]]; then
        echo "install-lang-tools: npm ci in sdk/typescript"
        (cd "${TS}" && npm ci --no-audit --no-fund --loglevel=error)
    fi
    (cd "${TS}" && npm run --silent build)
    echo "install-lang-tools: node $(node --version), @grpc/grpc-js $(cd "${TS}" && node -p 'require("@grpc/grpc-js/package.json").version'), typescript $(cd "${TS}" && node -p 'require("typescript/package.json").version') (sdk built into dist/)"
fi

if want go; then
    need go "install Go 1.26+ (what sdk/go/go.mod needs) to run the Go tests"
    (cd "${ROOT}/sdk/go" && go mod download)
    # The Go counter example (its build is part of the SDK tests) pins the same modules.
    (cd "${ROOT}/examples/counter-go" && go mod download)
    # So does the Go hop of the cross-language test (sdk/python/tests/test_cross_language.py).
    (cd "${ROOT}/sdk/python/tests/cross_language/middle-go" && go mod download)
    # The stub generators (sdk/go/gen.sh; the staleness test runs it), pinned, into .tools/bin.
    GOBIN="${ROOT}/.tools/bin" go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
    GOBIN="${ROOT}/.tools/bin" go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
    echo "install-lang-tools: $(go version), modules of sdk/go, examples/counter-go and the cross-language Go hop downloaded, protoc-gen-go and protoc-gen-go-grpc in .tools/bin"
fi
