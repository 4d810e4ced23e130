"""Validate rendered custom resources against their CustomResourceDefinitions, strictly.

kubernetes-validate has no schemas for custom resources (KServe's ServingRuntime and
InferenceService, the Prometheus Operator's PodMonitor); this checks them against the
``openAPIV3Schema`` of the CRDs themselves, with unknown fields rejected wherever the schema
lists properties and does not preserve unknown fields (the API server would prune them
silently). Not run in CI, which has no CRDs (they are megabytes); run it with the CRDs of the
cluster you deploy to:

    kubectl get crd inferenceservices.serving.kserve.io servingruntimes.serving.kserve.io \\
        -o yaml > /tmp/crds.yaml      # a List; CRD files from the projects' repositories work too
    kubectl kustomize deploy/kubernetes/kserve > /tmp/kserve.yaml
    .venv/bin/python deploy/kubernetes/check_crds.py /tmp/kserve.yaml /tmp/crds.yaml

Exit 1 if any object has errors or no CRD was given for one of its kinds.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

import jsonschema
import yaml


def _strict(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` wherever properties are listed."""
    if isinstance(schema, dict):
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        for value in schema.values():
            _strict(value)
    elif isinstance(schema, list):
        for value in schema:
            _strict(value)
    return schema


def _documents(path: str) -> Iterator[dict]:
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if doc and doc.get("kind") == "List":
                yield from doc.get("items", [])
            elif doc:
                yield doc


def crd_schemas(paths: list[str]) -> dict[tuple[str, str], dict]:
    """``{(apiVersion, kind): strict schema}`` of every CRD version in ``paths``."""
    schemas = {}
    for path in paths:
        for crd in _documents(path):
            if crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                schema = _strict(version["schema"]["openAPIV3Schema"])
                schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rendered", help="rendered manifests (kubectl kustomize ... > FILE)")
    parser.add_argument("crds", nargs="+", help="files holding the CustomResourceDefinitions")
    args = parser.parse_args(argv)
    schemas = crd_schemas(args.crds)
    failed = False
    for obj in _documents(args.rendered):
        key = (obj["apiVersion"], obj["kind"])
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        group = obj["apiVersion"].rpartition("/")[0]
        if "." not in group or group.endswith(".k8s.io"):
            continue  # a built-in kind (v1, apps/v1, networking.k8s.io/v1): kubernetes-validate's
        if key not in schemas:
            print(f"ERROR {name}: no CRD for {key[0]} {key[1]} in {args.crds}")
            failed = True
            continue
        errors = list(jsonschema.Draft7Validator(schemas[key]).iter_errors(obj))
        for error in errors:
            print(f"ERROR {name}: {'.'.join(map(str, error.path))}: {error.message}")
        print(f"{'FAIL' if errors else 'ok  '} {name} against its CRD ({key[0]})")
        failed |= bool(errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
