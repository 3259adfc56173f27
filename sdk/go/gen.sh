#!/usr/bin/env bash
# Regenerates sdk/go/sigxpb from proto/sigx with the standard generators: protoc (the one inside
# grpcio-tools, in .tools/venv-py: no system protoc), protoc-gen-go and protoc-gen-go-grpc (built
# from the Go module proxy into .tools/bin by scripts/install-lang-tools.sh go).
#   gen.sh [OUT_DIR]     (default: sdk/go/sigxpb; the staleness test passes a temp dir)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/../.." && pwd)"
OUT="${1:-${HERE}/sigxpb}"
PY="${ROOT}/.tools/venv-py/bin/python"
for tool in "${PY}" "${ROOT}/.tools/bin/protoc-gen-go" "${ROOT}/.tools/bin/protoc-gen-go-grpc"; do
    [[ -x "${tool}" ]] || { echo "gen.sh: ${tool} missing: run scripts/install-lang-tools.sh python go" >&2; exit 1; }
done
PKG="example.invalid/sigx/sdk/go/sigxpb"
FILES=(sigx/actors/v1/errors.proto sigx/actors/v1/types.proto sigx/actors/v1/app.proto)
MAP=()
for f in "${FILES[@]}"; do MAP+=("--go_opt=M${f}=${PKG}" "--go-grpc_opt=M${f}=${PKG}"); done
mkdir -p "${OUT}"
PATH="${ROOT}/.tools/bin:${PATH}" "${PY}" -m grpc_tools.protoc -I"${ROOT}/proto" \
    --go_out="${OUT}" --go_opt=paths=source_relative --go-grpc_out="${OUT}" \
    --go-grpc_opt=paths=source_relative "${MAP[@]}" "${FILES[@]}"
# paths=source_relative nests the files under sigx/actors/v1; the package is flat.
mv "${OUT}"/sigx/actors/v1/*.go "${OUT}/"
rm -rf "${OUT}/sigx"
