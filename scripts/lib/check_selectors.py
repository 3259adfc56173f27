"""Checks that the chart's optional monitoring, network and flow-control objects aim at what the
operator really renders. kubernetes-validate checks each object's shape (and knows nothing of the
Prometheus Operator's kinds); this checks what the shapes mean: that a selector selects, that a
named port exists, that a FlowSchema's subjects are the accounts the sidecars run as.

Usage: check_selectors.py CHART.yaml RENDERED.yaml OPERATOR_ROUTES.rs SIDECAR_ROUTES.rs

CHART.yaml is `helm template` with serviceMonitor, podMonitor, networkPolicy (with a sidecar
policy for the rendered cluster) and flowSchema (for the rendered namespace) on; RENDERED.yaml
is what the operator renders for examples/k8s (operator/tests/render_examples.rs); the two .rs
files hold the HTTP routes of the operator's metrics server and of the sidecar's health server,
whose `"/path" =>` arms the scrape paths must name.

Each of ServiceMonitor, PodMonitor, NetworkPolicy (operator and sidecars) and FlowSchema must be
present and right; exits non-zero naming every problem."""

import re
import sys

import yaml

SIDECAR_CONTAINER = "sigx-sidecar"  # operator/src/render/role.rs SIDECAR_CONTAINER
CLUSTER_LABEL = "actors.sigx.dev/cluster"  # crds/src/common.rs labels::CLUSTER
# Built-in priority levels a chart FlowSchema may name (the operator's leader Lease goes to the
# level the control plane's own leader elections use).
BUILTIN_LEVELS = {"leader-election"}
# The built-in FlowSchema that sends every ServiceAccount's requests to workload-low.
SERVICE_ACCOUNTS_PRECEDENCE = 9000
RECOMMENDED_LABELS = ["name", "instance", "version", "managed-by", "part-of", "component"]

problems = []


def problem(msg):
    problems.append(msg)


def load(path):
    return [d for d in yaml.safe_load_all(open(path)) if d]


def selects(selector, labels):
    """metav1.LabelSelector semantics: every matchLabels pair and every expression must hold;
    an empty selector selects everything (as a NetworkPolicy's podSelector {} does)."""
    selector = selector or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"unknown selector operator {op}")
    return True


def ns_admits(namespace_selector, own_namespace, namespace):
    """The Prometheus Operator's namespaceSelector: any, matchNames, or (absent) its own."""
    namespace_selector = namespace_selector or {}
    if namespace_selector.get("any"):
        return True
    names = namespace_selector.get("matchNames")
    return namespace in (names if names else [own_namespace])


def routes(path):
    """The `"/path" =>` (or `"/a" | "/b" =>`) arms of a Rust match on the request path."""
    text = open(path).read()
    return set(re.findall(r'"(/[a-z]*)"\s*(?:=>|\|)', text))


class Pod:
    """A Deployment's pod template, as the pods it creates will be."""

    def __init__(self, deployment):
        self.namespace = deployment["metadata"]["namespace"]
        self.name = deployment["metadata"]["name"]
        template = deployment["spec"]["template"]
        self.labels = template["metadata"].get("labels") or {}
        spec = template["spec"]
        self.containers = (spec.get("initContainers") or []) + spec["containers"]
        self.service_account = spec.get("serviceAccountName") or "default"

    def container(self, name):
        return next((c for c in self.containers if c["name"] == name), None)

    def port(self, ref):
        """The container port a named or numbered reference resolves to (first container)."""
        for c in self.containers:
            for p in c.get("ports") or []:
                if ref in (p.get("name"), p["containerPort"]):
                    return c, p
        return None, None

    def __repr__(self):
        return f"pod of {self.namespace}/{self.name}"


def of_kind(docs, kind):
    return [d for d in docs if d.get("kind") == kind]


def check_labels(chart):
    new_kinds = ["Service", "ServiceMonitor", "PodMonitor", "NetworkPolicy", "FlowSchema",
                 "PriorityLevelConfiguration"]
    for d in chart:
        if d["kind"] in new_kinds:
            labels = d["metadata"].get("labels") or {}
            missing = [k for k in RECOMMENDED_LABELS if f"app.kubernetes.io/{k}" not in labels]
            if missing:
                problem(f"{d['kind']} {d['metadata']['name']}: no app.kubernetes.io/ label(s) {missing}")


def check_service_monitor(chart, operator_pods, operator_routes):
    monitors = of_kind(chart, "ServiceMonitor")
    if not monitors:
        problem("ServiceMonitor: none rendered")
    for sm in monitors:
        name, ns = sm["metadata"]["name"], sm["metadata"]["namespace"]
        services = [s for s in of_kind(chart, "Service")
                    if ns_admits(sm["spec"].get("namespaceSelector"), ns, s["metadata"]["namespace"])
                    and selects(sm["spec"]["selector"], s["metadata"].get("labels") or {})]
        if not services:
            problem(f"ServiceMonitor {name}: its selector and namespaceSelector select no Service of the chart")
        for svc in services:
            svc_name = svc["metadata"]["name"]
            port_names = {p.get("name") for p in svc["spec"]["ports"]}
            for ep in sm["spec"]["endpoints"]:
                if ep.get("port") not in port_names:
                    problem(f"ServiceMonitor {name}: endpoint port {ep.get('port')!r} is not a port of "
                            f"Service {svc_name} ({sorted(port_names)})")
            backing = [p for p in operator_pods if p.namespace == svc["metadata"]["namespace"]
                       and selects({"matchLabels": svc["spec"]["selector"]}, p.labels)]
            if not backing:
                problem(f"Service {svc_name}: its selector selects no operator pod")
            for pod in backing:
                for sp in svc["spec"]["ports"]:
                    _, cp = pod.port(sp.get("targetPort", sp["port"]))
                    if cp is None:
                        problem(f"Service {svc_name}: targetPort {sp.get('targetPort')!r} is no port of the {pod}")
        for ep in sm["spec"]["endpoints"]:
            if ep.get("path", "/metrics") not in operator_routes:
                problem(f"ServiceMonitor {name}: path {ep.get('path')!r} is not served by the operator "
                        f"({sorted(operator_routes)})")


def check_pod_monitor(chart, sidecar_pods, operator_pods, sidecar_routes):
    monitors = of_kind(chart, "PodMonitor")
    if not monitors:
        problem("PodMonitor: none rendered")
    for pm in monitors:
        name, ns = pm["metadata"]["name"], pm["metadata"]["namespace"]
        spec = pm["spec"]
        for pod in sidecar_pods:
            if not ns_admits(spec.get("namespaceSelector"), ns, pod.namespace):
                problem(f"PodMonitor {name}: its namespaceSelector does not admit namespace "
                        f"{pod.namespace} of the {pod}")
            if not selects(spec["selector"], pod.labels):
                problem(f"PodMonitor {name}: its selector does not select the {pod} "
                        f"(labels {pod.labels})")
                continue
            sidecar = pod.container(SIDECAR_CONTAINER)
            by_name = {p.get("name"): p for p in sidecar.get("ports") or []}
            env = {e["name"]: e.get("value") for e in sidecar.get("env") or []}
            health_port = int(env["SIGX_HEALTH_ADDR"].rsplit(":", 1)[1])
            for ep in spec["podMetricsEndpoints"]:
                port = by_name.get(ep.get("port"))
                if port is None:
                    problem(f"PodMonitor {name}: port {ep.get('port')!r} is not a port of the sidecar "
                            f"of the {pod} ({sorted(by_name)})")
                elif port["containerPort"] != health_port:
                    problem(f"PodMonitor {name}: port {ep.get('port')!r} is {port['containerPort']}, but "
                            f"the sidecar serves /metrics on SIGX_HEALTH_ADDR {env['SIGX_HEALTH_ADDR']}")
                if ep.get("path", "/metrics") not in sidecar_routes:
                    problem(f"PodMonitor {name}: path {ep.get('path')!r} is not served by the sidecar "
                            f"({sorted(sidecar_routes)})")
        for pod in operator_pods:
            if selects(spec["selector"], pod.labels):
                problem(f"PodMonitor {name}: its selector also selects the {pod}, which has no sidecar")


def policies_for(chart, pod):
    return [p for p in of_kind(chart, "NetworkPolicy")
            if p["metadata"]["namespace"] == pod.namespace and selects(p["spec"]["podSelector"], pod.labels)]


def rules_for_port(policy, pod, port):
    """The ingress rules of `policy` that open the container port `port` of `pod`."""
    out = []
    for rule in policy["spec"].get("ingress") or []:
        for p in rule.get("ports") or []:
            _, cp = pod.port(p.get("port"))
            if cp is port:
                out.append(rule)
    return out


def check_network_policies(chart, sidecar_pods, operator_pods):
    for pod in operator_pods + sidecar_pods:
        policies = policies_for(chart, pod)
        if not policies:
            problem(f"NetworkPolicy: none selects the {pod}")
        for policy in policies:
            for rule in policy["spec"].get("ingress") or []:
                for p in rule.get("ports") or []:
                    # A named port must be a container port of the pod to mean anything; a
                    # number need not be declared (an app may listen without declaring it).
                    if isinstance(p.get("port"), str) and pod.port(p["port"])[1] is None:
                        problem(f"NetworkPolicy {policy['metadata']['name']}: port {p.get('port')!r} is "
                                f"no port of the {pod}")
    for pod in operator_pods:
        _, metrics = pod.port("http-metrics")
        if metrics and not any(rules_for_port(p, pod, metrics) for p in policies_for(chart, pod)):
            problem(f"NetworkPolicy: nothing opens the metrics port of the {pod}")
    for pod in sidecar_pods:
        sidecar = pod.container(SIDECAR_CONTAINER)
        ports = {p["name"]: p for p in sidecar["ports"]}
        policies = policies_for(chart, pod)
        mesh_rules = [r for p in policies for r in rules_for_port(p, pod, ports["mesh"])]
        if policies and not mesh_rules:
            problem(f"NetworkPolicy: nothing opens the mesh port of the {pod}")
        if policies and not any(rules_for_port(p, pod, ports["health"]) for p in policies):
            problem(f"NetworkPolicy: nothing opens the health (metrics) port of the {pod}")
        peers = [d for d in sidecar_pods if d.namespace == pod.namespace
                 and d.labels.get(CLUSTER_LABEL) == pod.labels.get(CLUSTER_LABEL)]
        stranger = dict(pod.labels, **{CLUSTER_LABEL: "another-cluster"})
        for rule in mesh_rules:
            sources = rule.get("from")
            if not sources:
                problem(f"NetworkPolicy: the mesh port of the {pod} is open to any source")
                continue
            for peer in sources:
                if "namespaceSelector" in peer or "ipBlock" in peer:
                    problem(f"NetworkPolicy: a mesh peer of the {pod} reaches outside its namespace: {peer}")
            for other in peers:
                if not any(selects(s.get("podSelector"), other.labels) for s in sources if "podSelector" in s):
                    problem(f"NetworkPolicy: the mesh port of the {pod} is closed to the {other} of the same cluster")
            if any(selects(s.get("podSelector"), stranger) for s in sources if "podSelector" in s):
                problem(f"NetworkPolicy: the mesh port of the {pod} is open to pods of another cluster")


def covers(values, value):
    return "*" in values or value in values


def check_leader_flow_schema(fs, operator_pods):
    """The operator's leader-Lease FlowSchema: the operator's own account, Lease verbs, its own
    namespace (where the election Lease lives), and nothing else."""
    name, spec = fs["metadata"]["name"], fs["spec"]
    if not spec["matchingPrecedence"] < SERVICE_ACCOUNTS_PRECEDENCE:
        problem(f"FlowSchema {name}: matchingPrecedence {spec['matchingPrecedence']} does not win over "
                f"the built-in service-accounts ({SERVICE_ACCOUNTS_PRECEDENCE})")
    for pod in operator_pods:
        rules = [r for r in spec["rules"]
                 if any(s["kind"] == "ServiceAccount" and s["serviceAccount"]["namespace"] == pod.namespace
                        and s["serviceAccount"]["name"] == pod.service_account for s in r["subjects"])]
        if not rules:
            problem(f"FlowSchema {name}: no subject matches ServiceAccount "
                    f"{pod.namespace}/{pod.service_account} of the {pod}")
        for verb in ("get", "create", "update"):
            if not any(rr["apiGroups"] == ["coordination.k8s.io"] and rr["resources"] == ["leases"]
                       and verb in rr["verbs"] and rr.get("namespaces") == [pod.namespace]
                       for r in rules for rr in r.get("resourceRules") or []):
                problem(f"FlowSchema {name}: {verb} of the leader Lease in {pod.namespace} "
                        f"by the {pod} does not match (or the rule matches more than Leases there)")


def check_flow_schema(chart, sidecar_pods, rendered, operator_pods):
    schemas = of_kind(chart, "FlowSchema")
    if not schemas:
        problem("FlowSchema: none rendered")
    levels = {p["metadata"]["name"]: p for p in of_kind(chart, "PriorityLevelConfiguration")}
    lease_rules = [r for role in of_kind(rendered, "Role") for r in role["rules"]]
    if not lease_rules:
        problem("FlowSchema: the render holds no sidecar Role to compare with")
    for fs in schemas:
        name, spec = fs["metadata"]["name"], fs["spec"]
        if spec["priorityLevelConfiguration"]["name"] in BUILTIN_LEVELS:
            check_leader_flow_schema(fs, operator_pods)
            continue
        level = levels.get(spec["priorityLevelConfiguration"]["name"])
        if level is None:
            problem(f"FlowSchema {name}: priority level {spec['priorityLevelConfiguration']['name']!r} is not rendered")
        elif level["spec"]["type"] != "Limited":
            problem(f"FlowSchema {name}: priority level {level['metadata']['name']} is not Limited")
        if not spec["matchingPrecedence"] < SERVICE_ACCOUNTS_PRECEDENCE:
            problem(f"FlowSchema {name}: matchingPrecedence {spec['matchingPrecedence']} does not win over "
                    f"the built-in service-accounts ({SERVICE_ACCOUNTS_PRECEDENCE})")
        for pod in sidecar_pods:
            def matches_subject(s):
                if s["kind"] == "ServiceAccount":
                    sa = s["serviceAccount"]
                    return sa["namespace"] == pod.namespace and sa["name"] in ("*", pod.service_account)
                if s["kind"] == "Group":
                    return s["group"]["name"] in ("system:serviceaccounts",
                                                  f"system:serviceaccounts:{pod.namespace}")
                return False

            rules = [r for r in spec["rules"] if any(matches_subject(s) for s in r["subjects"])]
            if not rules:
                problem(f"FlowSchema {name}: no subject matches ServiceAccount "
                        f"{pod.namespace}/{pod.service_account} of the {pod}")
                continue
            for lr in lease_rules:
                for group in lr["apiGroups"]:
                    for resource in lr["resources"]:
                        for verb in lr["verbs"]:
                            if not any(covers(rr["apiGroups"], group) and covers(rr["resources"], resource)
                                       and covers(rr["verbs"], verb)
                                       and covers(rr.get("namespaces") or [], pod.namespace)
                                       for r in rules for rr in r.get("resourceRules") or []):
                                problem(f"FlowSchema {name}: {verb} {group}/{resource} in {pod.namespace} "
                                        f"by the {pod} does not match")


def main(argv):
    chart_path, rendered_path, operator_src, sidecar_src = argv
    chart, rendered = load(chart_path), load(rendered_path)
    operator_pods = [Pod(d) for d in of_kind(chart, "Deployment")]
    sidecar_pods = [p for p in map(Pod, of_kind(rendered, "Deployment")) if p.container(SIDECAR_CONTAINER)]
    if not operator_pods or not sidecar_pods:
        problem(f"nothing to check: {len(operator_pods)} operator and {len(sidecar_pods)} sidecar Deployments")
    operator_routes, sidecar_routes = routes(operator_src), routes(sidecar_src)
    if "/metrics" not in operator_routes or "/metrics" not in sidecar_routes:
        problem(f"route parsing found {sorted(operator_routes)} and {sorted(sidecar_routes)}: no /metrics")
    check_labels(chart)
    check_service_monitor(chart, operator_pods, operator_routes)
    check_pod_monitor(chart, sidecar_pods, operator_pods, sidecar_routes)
    check_network_policies(chart, sidecar_pods, operator_pods)
    check_flow_schema(chart, sidecar_pods, rendered, operator_pods)
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"ok: {len(operator_pods)} operator and {len(sidecar_pods)} sidecar pod templates")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
