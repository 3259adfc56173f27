#!/usr/bin/env bash
# Checks every manifest sigx ships or renders against the Kubernetes schemas:
#   - `helm lint --strict` of charts/sigx (default and non-default values);
#   - `helm template` output, the generated CRDs, and the manifests the operator's render
#     functions produce for examples/k8s, through `kubernetes-validate --strict` for
#     Kubernetes ${K8S_VERSION} (default 1.37.0; `make check-manifests` also runs 1.34.0, the
#     oldest release the chart's kubeVersion admits), rendered and linted for that release;
#   - canaries that prove the checkers are not vacuous: a deliberately broken Deployment must
#     fail kubernetes-validate, and a value of the wrong type must be refused by the chart's
#     values.schema.json;
#   - the chart's CRDs are the generated ones (modulo Helm labels/annotations);
#   - the CRD schemas are structural (scripts/lib/structural.py);
#   - the example CRs match the CRD schemas with strict field validation (scripts/lib/validate_crs.py);
#   - the operator's ClusterRole (and, with rbac.scope=namespace, its Role) covers the Lease Role it grants the sidecars;
#   - the platform options (serviceMonitor, podMonitor, networkPolicy, flowSchema) are off by
#     default; on, the built-in kinds pass kubernetes-validate, and scripts/lib/check_selectors.py
#     checks that their selectors, ports and subjects aim at what the operator renders (with
#     canaries: a wrong selector, port or namespace must be refused), and values.schema.json
#     refuses a wrong type for each.
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

check "helm lint --strict (defaults)" "${HELM}" lint --strict --kube-version "${K8S_VERSION}" "${CHART}"
check "helm lint --strict (non-default values)" "${HELM}" lint --strict --kube-version "${K8S_VERSION}" "${CHART}" "${ALT_VALUES[@]}"
check "helm template (defaults)" \
    sh -c "'${HELM}' template sigx '${CHART}' --kube-version '${K8S_VERSION}' --namespace sigx-system > '${OUT}/chart.yaml'"
check "helm template (non-default values)" \
    sh -c "'${HELM}' template sigx '${CHART}' --kube-version '${K8S_VERSION}' --namespace sigx-system $(printf "'%s' " "${ALT_VALUES[@]}") > '${OUT}/chart-alt.yaml'"
# rbac.scope=namespace: Roles and RoleBindings only, in watchNamespace and the release namespace.
NS_VALUES=(--set rbac.scope=namespace --set watchNamespace=apps)
namespaced_rbac() {
    "${HELM}" template sigx "${CHART}" --kube-version "${K8S_VERSION}" --namespace sigx-system "${NS_VALUES[@]}" >"${OUT}/chart-ns.yaml" &&
        ! grep -Eq '^kind: (ClusterRole|ClusterRoleBinding)$' "${OUT}/chart-ns.yaml" &&
        [[ "$(grep -c '^kind: Role$' "${OUT}/chart-ns.yaml")" == 2 ]] &&
        [[ "$(grep -c '^kind: RoleBinding$' "${OUT}/chart-ns.yaml")" == 2 ]]
}
check "helm template (rbac.scope=namespace renders Roles only)" namespaced_rbac
check "helm lint --strict (rbac.scope=namespace)" "${HELM}" lint --strict --kube-version "${K8S_VERSION}" "${CHART}" "${NS_VALUES[@]}"
no_namespace_refused() {
    ! "${HELM}" template sigx "${CHART}" --kube-version "${K8S_VERSION}" --set rbac.scope=namespace >/dev/null 2>"${OUT}/ns.log" &&
        grep -q "set watchNamespace" "${OUT}/ns.log"
}
check "rbac.scope=namespace without watchNamespace is refused, saying what to set (canary)" no_namespace_refused
check "values.schema.json refuses an unknown rbac.scope (canary)" \
    refuses "${HELM}" template sigx "${CHART}" --kube-version "${K8S_VERSION}" --set rbac.scope=tenant
no_crds() {
    "${HELM}" template sigx "${CHART}" --kube-version "${K8S_VERSION}" --set crds.install=false >"${OUT}/chart-nocrds.yaml" &&
        grep -q '^kind: Deployment' "${OUT}/chart-nocrds.yaml" &&
        ! grep -q '^kind: CustomResourceDefinition' "${OUT}/chart-nocrds.yaml"
}
check "helm template (crds.install=false renders no CRD)" no_crds
check "values.schema.json refuses a wrong type (canary)" \
    refuses "${HELM}" template sigx "${CHART}" --kube-version "${K8S_VERSION}" --set replicaCount=many
check "values.schema.json refuses an unknown key (canary)" \
    refuses "${HELM}" template sigx "${CHART}" --kube-version "${K8S_VERSION}" --set replicas=2

check "render example manifests (cargo test -p sigx-operator --test render_examples)" \
    env SIGX_RENDER_OUT="${OUT}" cargo test -q -p sigx-operator --test render_examples

check "kubernetes-validate ${K8S_VERSION}: chart (defaults)" "${VALIDATE[@]}" "${OUT}/chart.yaml"
check "kubernetes-validate ${K8S_VERSION}: chart (non-default values)" "${VALIDATE[@]}" "${OUT}/chart-alt.yaml"
check "kubernetes-validate ${K8S_VERSION}: chart (rbac.scope=namespace)" "${VALIDATE[@]}" "${OUT}/chart-ns.yaml"
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
# covers_sidecar_role CHART KIND [NAMESPACE]: the rules of the chart's KIND (in NAMESPACE) cover it.
covers_sidecar_role() {
    "${PYTHON}" - "$1" "${OUT}/rendered.yaml" "$2" "${3:-}" <<'PY'
import sys, yaml
chart = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
rendered = [d for d in yaml.safe_load_all(open(sys.argv[2])) if d]
kind, namespace = sys.argv[3], sys.argv[4]
held = [r for d in chart if d["kind"] == kind
        and d["metadata"].get("namespace", "") == namespace for r in d["rules"]]
assert held, f"no {kind} in {namespace or 'the cluster'}"
granted = [r for d in rendered if d["kind"] == "Role" for r in d["rules"]]
assert granted, "no Role rendered"
def covered(group, resource, verb):
    return any(group in r.get("apiGroups", []) and resource in r.get("resources", [])
               and (verb in r["verbs"] or "*" in r["verbs"]) for r in held)
missing = [(g, res, v) for r in granted for g in r["apiGroups"] for res in r["resources"]
           for v in r["verbs"] if not covered(g, res, v)]
assert not missing, f"operator cannot grant: {missing}"
PY
}
check "operator ClusterRole covers the sidecar Role it grants" covers_sidecar_role "${OUT}/chart.yaml" ClusterRole
check "operator Role in watchNamespace (rbac.scope=namespace) covers the sidecar Role it grants" \
    covers_sidecar_role "${OUT}/chart-ns.yaml" Role apps

# The platform options (issue 20), all on. The sidecar NetworkPolicy and the FlowSchema name the
# namespace and ActorCluster of the rendered examples (sigx-demo, render_examples.rs; demo,
# examples/k8s/cluster.yaml), so check_selectors.py can hold them against the real pods.
ON_VALUES=(--set serviceMonitor.enabled=true --set serviceMonitor.interval=30s
    --set 'serviceMonitor.labels.release=prometheus' --set podMonitor.enabled=true
    --set networkPolicy.enabled=true
    --set 'networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\.io/metadata\.name=monitoring'
    --set 'networkPolicy.sidecars.clusters[0].namespace=sigx-demo'
    --set 'networkPolicy.sidecars.clusters[0].name=demo'
    --set 'networkPolicy.sidecars.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\.io/metadata\.name=monitoring'
    --set 'networkPolicy.sidecars.extraIngress[0].ports[0].port=8080'
    --set flowSchema.enabled=true --set 'flowSchema.namespaces={sigx-demo}')
OPTION_KINDS='^kind: (Service|ServiceMonitor|PodMonitor|NetworkPolicy|FlowSchema|PriorityLevelConfiguration)$'
ROUTES=(operator/src/server.rs sidecar/src/health.rs)

off_by_default() { grep -q '^kind: Deployment' "${OUT}/chart.yaml" && ! grep -Eq "${OPTION_KINDS}" "${OUT}/chart.yaml"; }
check "platform options are off by default" off_by_default
check "helm lint --strict (platform options on)" "${HELM}" lint --strict --kube-version "${K8S_VERSION}" "${CHART}" "${ON_VALUES[@]}"
# render_on FILE [ARGS]: the chart with every option on (and ARGS) into FILE.
render_on() {
    local file="$1"
    shift
    "${HELM}" template sigx "${CHART}" --kube-version "${K8S_VERSION}" --namespace sigx-system "${ON_VALUES[@]}" "$@" >"${file}"
}
check "helm template (platform options on)" render_on "${OUT}/chart-on.yaml"
# kubernetes-validate knows only the built-in kinds (it warns and passes on others), so the
# Prometheus Operator's kinds go to check_selectors.py alone, and a kind without a schema fails.
split_on() {
    "${PYTHON}" - "${OUT}/chart-on.yaml" "${OUT}/chart-on-builtin.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
monitoring = sorted(d["kind"] for d in docs if d["apiVersion"] == "monitoring.coreos.com/v1")
assert monitoring == ["PodMonitor", "ServiceMonitor"], monitoring
yaml.safe_dump_all([d for d in docs if d["apiVersion"] != "monitoring.coreos.com/v1"], open(sys.argv[2], "w"))
PY
}
check "platform options render a ServiceMonitor and a PodMonitor, split from the built-in kinds" split_on
check "kubernetes-validate ${K8S_VERSION}: chart (platform options on, built-in kinds)" \
    "${VALIDATE[@]}" "${OUT}/chart-on-builtin.yaml"
# unknown_kinds FILE: the kinds kubernetes-validate has no schema for (it says so, and passes).
unknown_kinds() {
    "${ROOT}/.tools/venv/bin/kubernetes-validate" -k "${K8S_VERSION}" --strict "$1" 2>&1 |
        grep -io "couldn't find schema for kind [A-Za-z]*" || true
}
every_kind_known() { [[ -z "$(unknown_kinds "${OUT}/chart-on-builtin.yaml")" ]]; }
check "kubernetes-validate ${K8S_VERSION} has a schema for every built-in kind the options render" every_kind_known
monitors_unknown() { [[ "$(unknown_kinds "${OUT}/chart-on.yaml" | sort | awk '{print $NF}' | xargs)" == "PodMonitor ServiceMonitor" ]]; }
check "kubernetes-validate ${K8S_VERSION} reports the Prometheus Operator kinds as unknown (canary)" monitors_unknown
check "selectors, ports and subjects of the platform options match the rendered pods" \
    "${PYTHON}" scripts/lib/check_selectors.py "${OUT}/chart-on.yaml" "${OUT}/rendered.yaml" "${ROUTES[@]}"

# Canaries: check_selectors.py must refuse a render with one thing wrong. mutated EDIT writes the
# all-on render with EDIT applied (a Python statement; k(kind, name) is the first such object).
mutated() {
    "${PYTHON}" - "${OUT}/chart-on.yaml" "${OUT}/mutated.yaml" "$1" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
def k(kind, name=None):
    return next(d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"]))
exec(sys.argv[3])
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))
PY
}
# selectors_refuse FILE EXPECTED: check_selectors.py fails on FILE, saying EXPECTED.
selectors_refuse() {
    ! "${PYTHON}" scripts/lib/check_selectors.py "$1" "${OUT}/rendered.yaml" "${ROUTES[@]}" >"${OUT}/selectors.log" &&
        grep -qF "$2" "${OUT}/selectors.log"
}
canary() { mutated "$1" && selectors_refuse "${OUT}/mutated.yaml" "$2"; }
check "selector check refuses a PodMonitor selecting other pods (canary)" canary \
    'k("PodMonitor")["spec"]["selector"]["matchLabels"]["app.kubernetes.io/managed-by"] = "sigx"' \
    "its selector does not select the pod of sigx-demo/web"
check "selector check refuses a PodMonitor port the sidecar does not have (canary)" canary \
    'k("PodMonitor")["spec"]["podMetricsEndpoints"][0]["port"] = "metrics"' \
    "port 'metrics' is not a port of the sidecar"
check "selector check refuses a PodMonitor that also selects the operator (canary)" canary \
    'k("PodMonitor")["spec"]["selector"] = {}' "also selects the pod of sigx-system"
check "selector check refuses a ServiceMonitor selecting no Service (canary)" canary \
    'k("ServiceMonitor")["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "sidecar"' \
    "select no Service of the chart"
check "selector check refuses a ServiceMonitor port the Service does not have (canary)" canary \
    'k("ServiceMonitor")["spec"]["endpoints"][0]["port"] = "metrics"' "is not a port of Service"
check "selector check refuses a sidecar NetworkPolicy closing the mesh to its own cluster (canary)" canary \
    'k("NetworkPolicy", "demo-sigx-sidecars")["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["actors.sigx.dev/cluster"] = "other"' \
    "is closed to the pod of sigx-demo/engine of the same cluster"
check "selector check refuses a NetworkPolicy port the pods do not have (canary)" canary \
    'k("NetworkPolicy", "demo-sigx-sidecars")["spec"]["ingress"][0]["ports"][0]["port"] = "meshh"' \
    "port 'meshh' is no port of the pod"
check "selector check refuses a new object without the app.kubernetes.io labels (canary)" canary \
    'del k("FlowSchema")["metadata"]["labels"]["app.kubernetes.io/part-of"]' \
    "no app.kubernetes.io/ label(s) ['part-of']"
elsewhere_refused() {
    render_on "${OUT}/chart-elsewhere.yaml" --set 'flowSchema.namespaces={elsewhere}' \
        --set 'podMonitor.namespaces={elsewhere}' &&
        selectors_refuse "${OUT}/chart-elsewhere.yaml" "no subject matches ServiceAccount sigx-demo/demo-sigx" &&
        grep -qF "does not admit namespace sigx-demo" "${OUT}/selectors.log"
}
check "selector check refuses a FlowSchema and a PodMonitor for another namespace (canary)" elsewhere_refused
check "selector check refuses an operator-leader FlowSchema wider than its Lease namespace (canary)" canary \
    'k("FlowSchema", "sigx-operator-leader")["spec"]["rules"][0]["resourceRules"][0]["namespaces"] = ["*"]' \
    "of the leader Lease in sigx-system"

# helm_refuses EXPECTED ARGS: `helm template` with ARGS fails, saying EXPECTED (so the schema,
# not some other error, refused it).
helm_refuses() {
    local expected="$1"
    shift
    ! "${HELM}" template sigx "${CHART}" --kube-version "${K8S_VERSION}" "$@" >"${OUT}/refused.log" 2>&1 &&
        grep -qF "${expected}" "${OUT}/refused.log"
}
for option in serviceMonitor.enabled podMonitor.enabled networkPolicy.enabled flowSchema.enabled; do
    check "values.schema.json refuses a wrong type for ${option} (canary)" \
        helm_refuses "${option}: Invalid type. Expected: boolean, given: string" --set "${option}=yes"
done
check "values.schema.json refuses a wrong type for podMonitor.namespaces (canary)" \
    helm_refuses "podMonitor.namespaces: Invalid type. Expected: array" --set podMonitor.namespaces=apps
check "values.schema.json refuses a wrong type for networkPolicy.sidecars.clusters (canary)" \
    helm_refuses "networkPolicy.sidecars.clusters: Invalid type. Expected: array" \
    --set networkPolicy.sidecars.clusters=demo
check "values.schema.json refuses a flowSchema precedence that loses to service-accounts (canary)" \
    helm_refuses "flowSchema.matchingPrecedence: Must be less than or equal to 8999" \
    --set flowSchema.matchingPrecedence=9000
check "flowSchema without namespaces (and no watchNamespace) is refused" \
    helm_refuses "flowSchema.enabled needs flowSchema.namespaces" --set flowSchema.enabled=true

echo "check-manifests: ${passed} passed, ${failed} failed"
[[ "${failed}" -eq 0 ]]
