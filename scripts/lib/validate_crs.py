"""Validates custom resources against the openAPIV3Schema of their CRDs, the way the API server
would with strict field validation (kubectl's default): unknown fields are errors, not silently
pruned; patterns, bounds, enums and required fields hold. CEL rules are not evaluated here (see
crds/tests/cel.rs). Usage: validate_crs.py CRD.yaml... -- CR.yaml...
Exits non-zero and names each problem when any object does not validate."""

import copy
import sys

import jsonschema
import yaml


def strict(schema):
    """openAPIV3Schema -> JSON Schema: nullable, int-or-string, no unknown fields."""
    s = copy.deepcopy(schema)

    def walk(node, root=False):
        if not isinstance(node, dict):
            return
        if node.get("x-kubernetes-int-or-string"):
            node.pop("type", None)
            node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        if node.get("nullable") and "type" in node:
            node["type"] = [node["type"], "null"]
        if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            node.setdefault("additionalProperties", False)
            if root:
                # The API server serves these itself; a manifest may carry them.
                for key in ("apiVersion", "kind", "metadata"):
                    node["properties"].setdefault(key, {})
        for key in ("properties", "patternProperties"):
            for child in node.get(key, {}).values():
                walk(child)
        for key in ("items", "additionalProperties", "not"):
            walk(node.get(key))
        for key in ("allOf", "anyOf", "oneOf"):
            for child in node.get(key, []):
                walk(child)

    walk(s, root=True)
    return s


def main(argv):
    sep = argv.index("--")
    schemas = {}
    for path in argv[:sep]:
        crd = yaml.safe_load(open(path))
        for version in crd["spec"]["versions"]:
            key = (f'{crd["spec"]["group"]}/{version["name"]}', crd["spec"]["names"]["kind"])
            schemas[key] = strict(version["schema"]["openAPIV3Schema"])
    problems = 0
    checked = 0
    for path in argv[sep + 1 :]:
        for doc in yaml.safe_load_all(open(path)):
            if not doc:
                continue
            key = (doc.get("apiVersion"), doc.get("kind"))
            if key not in schemas:
                print(f"{path}: no CRD for {key}")
                problems += 1
                continue
            checked += 1
            validator = jsonschema.Draft7Validator(schemas[key])
            for error in sorted(validator.iter_errors(doc), key=lambda e: list(e.path)):
                where = ".".join(str(p) for p in error.path) or "<root>"
                print(f"{path}: {doc['kind']}/{doc['metadata']['name']}: {where}: {error.message}")
                problems += 1
    print(f"validate_crs: {checked} object(s), {problems} problem(s)")
    return 1 if problems or not checked else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
