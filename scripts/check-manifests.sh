#!/usr/bin/env bash
# Checks every manifest sigx ships or renders against the Kubernetes schemas:
#   - `helm lint --strict` of charts/sigx (default and non-default values);
#   - `helm template` output, the generated CRDs, and the manifests the operator's render
#     functions produce for examples/k8s, through `kubernetes-validate --strict` for
#     Kubernetes ${K8S_VERSION} (default 1.37.0);
#   - canaries that prove the checkers are not vacuous: a deliberately broken Deployment must
#     fail kubernetes-validate, and a value of the wrong type must be refused by the chart's
#     values.schema.json;
#   - the chart's CRDs are the generated ones (modulo Helm labels/annotations);
#   - the CRD schemas are structural (scripts/lib/structural.py);
#   - the example CRs match the CRD schemas with strict field validation (scripts/lib/validate_crs.py);
#   - the operator's ClusterRole covers the Lease Role it grants the sidecars.
# Tools come from scripts/install-tools.sh (run here; it is idempotent): helm in .tools/bin,
# kubernetes-validate and PyYAML in the venv .tools/venv, whose Python runs every check here.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
K8S_VERSION="${K8S_VERSION:-1.37.0}"
PYTHON="${ROOT}/.tools/venv/bin/python"
HELM="${ROOT}/.tools/bin/helm"
CHART="${ROOT}/charts/sigx"

"${ROOT}/scripts/install-tools.sh" manifests >/dev/null
VALIDATE=("${ROOT}/.tools/venv/bin/kubernetes-validate" -k "${K8S_VERSION}" --strict --quiet)

OUT="$(mktemp -d)"
trap 'rm -rf "${OUT}"' EXIT
passed=0
failed=0
check() {
    local what="$1"
    shift
    if "$@" >"${OUT}/last.log" 2>&1; then
        echo "ok   ${what}"
        passed=$((passed + 1))
    else
        echo "FAIL ${what}"
        sed 's/^/     /' "${OUT}/last.log"
        failed=$((failed + 1))
    fi
}
refuses() { ! "$@"; }

ALT_VALUES=(--set replicaCount=2 --set crds.keep=false --set serviceAccount.name=ops
    --set 'extraArgs={--verbose}' --set 'extraEnv[0].name=X' --set 'extraEnv[0].value=y'
    --set 'imagePullSecrets[0].name=regcred' --set priorityClassName=system-cluster-critical --set watchNamespace=apps)

check "helm lint --strict (defaults)" "${HELM}" lint --strict "${CHART}"
check "helm lint --strict (non-default values)" "${HELM}" lint --strict "${CHART}" "${ALT_VALUES[@]}"
check "helm template (defaults)" \
    sh -c "'${HELM}' template sigx '${CHART}' --namespace sigx-system > '${OUT}/chart.yaml'"
check "helm template (non-default values)" \
    sh -c "'${HELM}' template sigx '${CHART}' --namespace sigx-system $(printf "'%s' " "${ALT_VALUES[@]}") > '${OUT}/chart-alt.yaml'"
no_crds() {
    "${HELM}" template sigx "${CHART}" --set crds.install=false >"${OUT}/chart-nocrds.yaml" &&
        grep -q '^kind: Deployment' "${OUT}/chart-nocrds.yaml" &&
        ! grep -q '^kind: CustomResourceDefinition' "${OUT}/chart-nocrds.yaml"
}
check "helm template (crds.install=false renders no CRD)" no_crds
check "values.schema.json refuses a wrong type (canary)" \
    refuses "${HELM}" template sigx "${CHART}" --set replicaCount=many
check "values.schema.json refuses an unknown key (canary)" \
    refuses "${HELM}" template sigx "${CHART}" --set replicas=2

check "render example manifests (cargo test -p sigx-operator --test render_examples)" \
    env SIGX_RENDER_OUT="${OUT}" cargo test -q -p sigx-operator --test render_examples

check "kubernetes-validate ${K8S_VERSION}: chart (defaults)" "${VALIDATE[@]}" "${OUT}/chart.yaml"
check "kubernetes-validate ${K8S_VERSION}: chart (non-default values)" "${VALIDATE[@]}" "${OUT}/chart-alt.yaml"
check "kubernetes-validate ${K8S_VERSION}: crds/generated" "${VALIDATE[@]}" crds/generated/*.yaml
check "kubernetes-validate ${K8S_VERSION}: rendered examples" "${VALIDATE[@]}" "${OUT}/rendered.yaml"

cat >"${OUT}/broken.yaml" <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: broken
spec:
  replicaz: 3
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers: [{name: c, image: i}]
YAML
check "kubernetes-validate refuses a broken Deployment (canary)" \
    refuses "${VALIDATE[@]}" "${OUT}/broken.yaml"

check "chart CRDs equal crds/generated" "${PYTHON}" - "${OUT}/chart.yaml" crds/generated/*.yaml <<'PY'
import sys, yaml
chart = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "CustomResourceDefinition"]
generated = [yaml.safe_load(open(p)) for p in sys.argv[2:]]
def norm(d):
    d = dict(d)
    d["metadata"] = {"name": d["metadata"]["name"]}
    return d
by_name = {d["metadata"]["name"]: norm(d) for d in chart}
assert len(by_name) == len(generated), f"chart has {sorted(by_name)}, generated {len(generated)}"
for g in generated:
    name = g["metadata"]["name"]
    assert by_name.get(name) == norm(g), f"{name}: chart CRD differs from crds/generated"
PY

check "CRD schemas are structural (what the API server demands of a CRD)" \
    "${PYTHON}" scripts/lib/structural.py crds/generated/*.yaml
broken_crd_refused() {
    "${PYTHON}" - crds/generated/actorclusters.actors.sigx.dev.yaml "${OUT}/broken-crd.yaml" <<'PY'
import sys, yaml
crd = yaml.safe_load(open(sys.argv[1]))
spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
del spec["properties"]["meshPort"]["type"]                       # an untyped field
spec["properties"]["calls"]["anyOf"] = [{"type": "object"}]      # a type inside anyOf
yaml.safe_dump(crd, open(sys.argv[2], "w"))
PY
    ! "${PYTHON}" scripts/lib/structural.py "${OUT}/broken-crd.yaml" >"${OUT}/structural.log" &&
        grep -q "meshPort: type is missing" "${OUT}/structural.log" &&
        grep -q "anyOf\[0\]: type is not allowed" "${OUT}/structural.log"
}
check "structural check refuses an untyped field and a typed anyOf (canary)" broken_crd_refused
check "example CRs match the CRD schemas (strict fields, patterns, bounds)" \
    "${PYTHON}" scripts/lib/validate_crs.py crds/generated/*.yaml -- examples/k8s/*.yaml
cat >"${OUT}/typo.yaml" <<'YAML'
apiVersion: actors.sigx.dev/v1alpha1
kind: ActorCluster
metadata: {name: typo}
spec:
  sidecar: {image: s}
  membership: {heartbeatSecond: 5}
---
apiVersion: actors.sigx.dev/v1alpha1
kind: ActorRole
metadata: {name: bad-type}
spec:
  clusterRef: {name: typo}
  actors: [9lives]
  template: {spec: {containers: [{name: app, image: a}]}}
YAML
typo_refused() {
    ! "${PYTHON}" scripts/lib/validate_crs.py crds/generated/*.yaml -- "${OUT}/typo.yaml" >"${OUT}/typo.log" &&
        grep -q "heartbeatSecond" "${OUT}/typo.log" && grep -q "9lives" "${OUT}/typo.log"
}
check "CR schema check refuses a misspelt field and a bad type name (canary)" typo_refused

# Kubernetes lets the operator create a Role only with permissions it holds itself (RBAC
# escalation prevention): every rule it renders for the sidecars must be covered by its own
# ClusterRole, or reconciling a cluster fails with 403 in a real cluster.
check "operator ClusterRole covers the sidecar Role it grants" "${PYTHON}" - "${OUT}/chart.yaml" "${OUT}/rendered.yaml" <<'PY'
import sys, yaml
chart = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
rendered = [d for d in yaml.safe_load_all(open(sys.argv[2])) if d]
held = [r for d in chart if d["kind"] == "ClusterRole" for r in d["rules"]]
granted = [r for d in rendered if d["kind"] == "Role" for r in d["rules"]]
assert granted, "no Role rendered"
def covered(group, resource, verb):
    return any(group in r.get("apiGroups", []) and resource in r.get("resources", [])
               and (verb in r["verbs"] or "*" in r["verbs"]) for r in held)
missing = [(g, res, v) for r in granted for g in r["apiGroups"] for res in r["resources"]
           for v in r["verbs"] if not covered(g, res, v)]
assert not missing, f"operator cannot grant: {missing}"
PY

echo "check-manifests: ${passed} passed, ${failed} failed"
[[ "${failed}" -eq 0 ]]
