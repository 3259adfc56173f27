"""Checks the rules the API server applies to a CRD schema before it accepts the CRD (a
"structural schema", plus list-type and default rules), which kubernetes-validate does not:
  - every node specifies a `type`, unless it is x-kubernetes-int-or-string or
    x-kubernetes-preserve-unknown-fields (or the root of the schema);
  - arrays have `items`; `properties` and `additionalProperties` are not both set;
  - no `$ref`, `definitions`, `dependencies`, `additionalItems`, `patternProperties`, `id`;
  - inside allOf/anyOf/oneOf/not: no `type`, `description`, `default`, `nullable`,
    `additionalProperties`, x-kubernetes-* (value validations only);
  - x-kubernetes-list-type `set`: scalar items; `map`: object items whose map keys are
    required or defaulted, and `x-kubernetes-list-map-keys` only with `map`;
  - defaults are not set under metadata, and CEL rules carry a `rule`.
Usage: structural.py CRD.yaml...   Exits non-zero naming each violation."""

import sys

import yaml

FORBIDDEN = {"$ref", "definitions", "dependencies", "additionalItems", "patternProperties", "id"}
NOT_IN_JUNCTORS = {"type", "description", "default", "nullable", "additionalProperties",
                   "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource",
                   "x-kubernetes-int-or-string", "x-kubernetes-list-type", "x-kubernetes-map-type"}
SCALARS = {"string", "integer", "number", "boolean"}


def check(node, path, problems, in_junctor=False, root=False):
    if not isinstance(node, dict):
        problems.append(f"{path}: not a schema object")
        return
    for key in FORBIDDEN & node.keys():
        problems.append(f"{path}: {key} is not allowed in a structural schema")
    if in_junctor:
        for key in NOT_IN_JUNCTORS & node.keys():
            problems.append(f"{path}: {key} is not allowed inside allOf/anyOf/oneOf/not")
    elif not root and "type" not in node and not (
        node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
    ):
        problems.append(f"{path}: type is missing")
    if node.get("type") == "array" and "items" not in node:
        problems.append(f"{path}: an array needs items")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties are exclusive")
    list_type = node.get("x-kubernetes-list-type")
    items = node.get("items") if isinstance(node.get("items"), dict) else {}
    if list_type == "set" and items.get("type") not in SCALARS:
        problems.append(f"{path}: a set lists scalars, not {items.get('type')}")
    if list_type == "map":
        keys = node.get("x-kubernetes-list-map-keys") or []
        if items.get("type") != "object" or not keys:
            problems.append(f"{path}: a map list needs object items and map keys")
        for key in keys:
            prop = items.get("properties", {}).get(key)
            if prop is None:
                problems.append(f"{path}: map key {key} is not a property of the items")
            elif key not in items.get("required", []) and "default" not in prop:
                problems.append(f"{path}: map key {key} must be required or defaulted")
    elif "x-kubernetes-list-map-keys" in node:
        problems.append(f"{path}: x-kubernetes-list-map-keys without list-type map")
    for rule in node.get("x-kubernetes-validations", []):
        if not rule.get("rule"):
            problems.append(f"{path}: a validation without a rule")
    for name, child in node.get("properties", {}).items():
        if root and name == "metadata" and "default" in str(child):
            problems.append(f"{path}.metadata: defaults under metadata are not allowed")
        check(child, f"{path}.{name}", problems, in_junctor)
    if isinstance(node.get("items"), dict):
        check(node["items"], f"{path}[]", problems, in_junctor)
    if isinstance(node.get("additionalProperties"), dict):
        check(node["additionalProperties"], f"{path}{{}}", problems, in_junctor)
    for key in ("allOf", "anyOf", "oneOf"):
        for i, child in enumerate(node.get(key, [])):
            check(child, f"{path}.{key}[{i}]", problems, True)
    if isinstance(node.get("not"), dict):
        check(node["not"], f"{path}.not", problems, True)


def main(paths):
    problems = []
    for path in paths:
        crd = yaml.safe_load(open(path))
        for version in crd["spec"]["versions"]:
            schema = version["schema"]["openAPIV3Schema"]
            check(schema, f"{crd['metadata']['name']}/{version['name']}", problems, root=True)
    for p in problems:
        print(p)
    print(f"structural: {len(paths)} CRD file(s), {len(problems)} problem(s)")
    return 1 if problems or not paths else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
