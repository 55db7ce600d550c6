"""Regenerate the schema copies in this directory from the staged originals (a dev tool, not shipped).

    python src/multiworker/schemas/extract.py /work/shared/data/schemas

- tfjob.schema.json: the TFJob CRD's openAPIV3Schema (kubeflow/training-operator v1.9.0,
  manifests/base/crds/kubeflow.org_tfjobs.yaml), pruned to the fields multiworker writes, without
  descriptions, with `additionalProperties: false` on every object (what `kubectl apply
  --validate=strict` enforces).
- jobset.schema.json: the JobSet CRD's openAPIV3Schema (kubernetes-sigs/jobset v0.12.0,
  config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml, staged in schemas/jobset/), pruned the
  same way to the fields multiworker writes.
- vertex_customjob.schema.json: GoogleCloudAiplatformV1CustomJob and the schemas it refers to, from
  the aiplatform v1 discovery document (revision 20260815), as JSON Schema: int64 fields (strings
  in proto JSON) also accept integers; unknown keys are rejected; required fields as the API
  reference documents them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent

# The TFJob fields kept: nested dicts of property names; True keeps a subtree whole.
TFJOB_KEEP = {
    "apiVersion": True,
    "kind": True,
    "metadata": True,
    "spec": {
        "runPolicy": {"activeDeadlineSeconds": True, "backoffLimit": True, "cleanPodPolicy": True,
                      "ttlSecondsAfterFinished": True, "suspend": True},
        "successPolicy": True,
        "tfReplicaSpecs": {
            "*": {
                "replicas": True,
                "restartPolicy": True,
                "template": {
                    "metadata": True,
                    "spec": {
                        "containers": {"[]": {"name": True, "image": True, "command": True, "args": True,
                                              "env": True, "resources": True, "workingDir": True}},
                        "nodeSelector": True,
                        "terminationGracePeriodSeconds": True,
                    },
                },
            }
        },
    },
}
_POD_TEMPLATE = {
    "metadata": True,
    "spec": {
        "restartPolicy": True,
        "containers": {"[]": {"name": True, "image": True, "command": True, "args": True, "env": True,
                              "resources": True, "workingDir": True, "ports": True}},
        "nodeSelector": True,
        "terminationGracePeriodSeconds": True,
    },
}
JOBSET_KEEP = {
    "apiVersion": True,
    "kind": True,
    "metadata": True,
    "spec": {
        "network": True,
        "failurePolicy": True,
        "successPolicy": True,
        "startupPolicy": True,
        "suspend": True,
        "ttlSecondsAfterFinished": True,
        "replicatedJobs": {"[]": {
            "name": True,
            "replicas": True,
            "template": {
                "metadata": True,
                "spec": {
                    "parallelism": True, "completions": True, "completionMode": True, "backoffLimit": True,
                    "activeDeadlineSeconds": True, "podFailurePolicy": True, "successPolicy": True,
                    "template": _POD_TEMPLATE,
                },
            },
        }},
    },
}
VERTEX_REQUIRED = {
    "GoogleCloudAiplatformV1CustomJob": ["displayName", "jobSpec"],
    "GoogleCloudAiplatformV1CustomJobSpec": ["workerPoolSpecs"],
    "GoogleCloudAiplatformV1ContainerSpec": ["imageUri"],
    "GoogleCloudAiplatformV1PythonPackageSpec": ["executorImageUri", "packageUris", "pythonModule"],
    "GoogleCloudAiplatformV1EnvVar": ["name", "value"],
    "GoogleCloudAiplatformV1GcsDestination": ["outputUriPrefix"],
}


def _strip(node):
    """Drop descriptions; close every object that lists its properties."""
    if isinstance(node, dict):
        out = {k: _strip(v) for k, v in node.items() if k != "description"}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def _prune(node: dict, keep) -> dict:
    if keep is True:
        return _strip(node)
    node = dict(node)
    if "[]" in keep:
        node["items"] = _prune(node["items"], keep["[]"])
        return _strip(node)
    if "*" in keep:
        node["additionalProperties"] = _prune(node["additionalProperties"], keep["*"])
        return _strip({k: v for k, v in node.items() if k != "additionalProperties"}) | {
            "additionalProperties": node["additionalProperties"]}
    props = {k: _prune(v, keep[k]) for k, v in node["properties"].items() if k in keep}
    node["properties"] = props
    if "required" in node:
        node["required"] = [r for r in node["required"] if r in props]
    return _strip({k: v for k, v in node.items() if k != "properties"}) | {"properties": props,
                                                                           "additionalProperties": False}


def _crd_schema(crd_path: Path, version: str, keep: dict, api_version: str, kind: str, required: list[str],
                title: str) -> dict:
    crd = yaml.safe_load(crd_path.read_text())
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    schema = _prune(served["schema"]["openAPIV3Schema"], keep)
    schema["properties"]["apiVersion"]["const"] = api_version
    schema["properties"]["kind"]["const"] = kind
    schema["required"] = required
    return {"$schema": "http://json-schema.org/draft-07/schema#", "title": title, **schema}


def tfjob_schema(crd_path: Path) -> dict:
    return _crd_schema(crd_path, "v1", TFJOB_KEEP, "kubeflow.org/v1", "TFJob", ["apiVersion", "kind", "spec"],
                       "Kubeflow TFJob kubeflow.org/v1 (training-operator v1.9.0 CRD, pruned)")


def jobset_schema(crd_path: Path) -> dict:
    return _crd_schema(crd_path, "v1alpha2", JOBSET_KEEP, "jobset.x-k8s.io/v1alpha2", "JobSet",
                       ["apiVersion", "kind", "metadata", "spec"],
                       "JobSet jobset.x-k8s.io/v1alpha2 (kubernetes-sigs/jobset v0.12.0 CRD, pruned)")


def _vertex_node(node):
    if isinstance(node, dict):
        if "$ref" in node:
            return {"$ref": f"#/definitions/{node['$ref']}"}
        out = {k: _vertex_node(v) for k, v in node.items()
               if k not in ("description", "id", "enumDescriptions", "enumDeprecated", "readOnly", "format")}
        if node.get("format") in ("int64", "uint64"):
            out["type"] = ["string", "integer"]
            out["pattern"] = "^-?[0-9]+$"
        if out.get("type") == "any":
            out.pop("type")
        if "properties" in out:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_vertex_node(v) for v in node]
    return node


def vertex_schema(discovery_path: Path) -> dict:
    doc = json.loads(discovery_path.read_text())
    definitions = {name: _vertex_node(schema) for name, schema in doc["schemas"].items()}
    for name, required in VERTEX_REQUIRED.items():
        definitions[name]["required"] = required
    return {"$schema": "http://json-schema.org/draft-07/schema#",
            "title": f"Vertex AI CustomJob (aiplatform v1 discovery revision {doc.get('revision')})",
            "$ref": "#/definitions/GoogleCloudAiplatformV1CustomJob", "definitions": definitions}


def main(source: str) -> None:
    src = Path(source)
    (HERE / "tfjob.schema.json").write_text(json.dumps(tfjob_schema(src / "kubeflow.org_tfjobs.yaml"), indent=1) + "\n")
    (HERE / "jobset.schema.json").write_text(
        json.dumps(jobset_schema(src / "jobset" / "jobset.x-k8s.io_jobsets.yaml"), indent=1) + "\n")
    (HERE / "vertex_customjob.schema.json").write_text(
        json.dumps(vertex_schema(src / "vertexai_v1_customjob_schemas.json"), indent=1) + "\n")


if __name__ == "__main__":
    # Default: ../shared/data/schemas beside the checkout (src/multiworker/schemas -> repo -> its parent).
    main(sys.argv[1] if len(sys.argv) > 1 else str(HERE.parents[3] / "shared" / "data" / "schemas"))
