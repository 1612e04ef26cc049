"""Offline validation of a job (and a cluster) against Batch AI's published schemas.

The schemas refer to the ARM template-expression definition on
schema.management.azure.com; a local stand-in is registered with
``referencing`` so validation never touches the network. On top of the
published schemas (which require almost nothing) the launcher's own contract
is checked: the fields a job or cluster sent by this launcher must always carry.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any, Dict, List

from cifar_dist.launchers.base import LaunchError

SCHEMA_FILE = "horovod-2018-05-01.json"
CLUSTER_SCHEMA_FILE = "cluster-2018-05-01.json"
HOROVOD_SCHEMA_URI = "urn:cifar-dist:batchai:2018-05-01:horovod.json"
CLUSTER_SCHEMA_URI = "urn:cifar-dist:batchai:2018-05-01:cluster.json"
EXPRESSION_URI = "https://schema.management.azure.com/schemas/2015-01-01/deploymentTemplate.json"
# deploymentTemplate.json#/definitions/expression: a template-language string, "[...]".
_EXPRESSION_STAND_IN = {
    "definitions": {
        "expression": {
            "type": "string",
            "pattern": "^\\[([^\\[].*)?\\]$",
            "description": "Deployment template expression (local stand-in for the ARM definition).",
        }
    }
}
_ISO8601_DURATION = r"^P(?!$)(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+(\.\d+)?S)?)?$"

# What every job this launcher sends must carry, beyond the published schema.
_LAUNCHER_CONTRACT: Dict[str, Any] = {
    "type": "object",
    "required": ["$schema", "properties"],
    "allOf": [{"$ref": HOROVOD_SCHEMA_URI}],
    "properties": {
        "properties": {
            "type": "object",
            "required": [
                "cluster",
                "nodeCount",
                "horovodSettings",
                "stdOutErrPathPrefix",
                "mountVolumes",
                "jobPreparation",
                "containerSettings",
                "constraints",
            ],
            "properties": {
                "nodeCount": {"minimum": 1},
                "horovodSettings": {"required": ["pythonScriptFilePath", "commandLineArgs", "processCount"]},
                "mountVolumes": {"required": ["azureFileShares"]},
                "constraints": {
                    "required": ["maxWallClockTime"],
                    "properties": {"maxWallClockTime": {"pattern": _ISO8601_DURATION}},
                },
            },
        }
    },
}


# What every cluster this launcher creates must carry (cluster.json requires nothing).
_CLUSTER_CONTRACT: Dict[str, Any] = {
    "type": "object",
    "required": ["$schema", "properties"],
    "allOf": [{"$ref": CLUSTER_SCHEMA_URI}],
    "properties": {
        "properties": {
            "type": "object",
            "required": ["vmSize", "vmPriority", "scaleSettings", "userAccountSettings"],
            "properties": {
                "scaleSettings": {"required": ["manual"]},
                "userAccountSettings": {"required": ["adminUserName", "adminUserSshPublicKey"]},
            },
        }
    },
}


def load_schema(name: str = SCHEMA_FILE) -> Dict[str, Any]:
    """A schema shipped with the package (the Horovod job schema by default)."""
    text = resources.files("cifar_dist.launchers.batchai.schemas").joinpath(name).read_text("utf-8")
    return json.loads(text)


def _make_validator(contract: Dict[str, Any], schemas: Dict[str, Dict[str, Any]]):
    # jsonschema is only needed here (dry runs and before each submission).
    from jsonschema import Draft4Validator

    # lazy: jsonschema's registry (the azure extra)
    from referencing import Registry, Resource

    # lazy: jsonschema's registry (the azure extra)
    from referencing.jsonschema import DRAFT4

    registry = Registry().with_resources(
        [(uri, Resource(contents=doc, specification=DRAFT4)) for uri, doc in schemas.items()]
        + [(EXPRESSION_URI, Resource(contents=_EXPRESSION_STAND_IN, specification=DRAFT4))]
    )
    return Draft4Validator(contract, registry=registry)


@cache
def _validator(kind: str = "job"):
    if kind == "cluster":
        return _make_validator(_CLUSTER_CONTRACT, {CLUSTER_SCHEMA_URI: load_schema(CLUSTER_SCHEMA_FILE)})
    return _make_validator(_LAUNCHER_CONTRACT, {HOROVOD_SCHEMA_URI: load_schema()})


def _format(errors) -> List[str]:
    errors = sorted(errors, key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}" for e in errors]


def schema_errors(job_file: Dict[str, Any]) -> List[str]:
    """Every violation, as 'path: message' strings (empty when the job is valid)."""
    return _format(_validator("job").iter_errors(job_file))


def cluster_schema_errors(cluster_file: Dict[str, Any]) -> List[str]:
    """Every violation of the cluster schema and the launcher's cluster contract."""
    return _format(_validator("cluster").iter_errors(cluster_file))


def validate_job_file(job_file: Dict[str, Any]) -> None:
    """Raise a one-line LaunchError when the job does not match the Batch AI schema."""
    errors = schema_errors(job_file)
    if errors:
        raise LaunchError(
            "the Batch AI job does not match the 2018-05-01 Horovod job schema: "
            + "; ".join(errors)
            + " (a bug in cifar_dist's job builder, or a bad launcher.* value)"
        )


def validate_cluster_file(cluster_file: Dict[str, Any]) -> None:
    """Raise a one-line LaunchError when the cluster does not match the Batch AI schema."""
    errors = cluster_schema_errors(cluster_file)
    if errors:
        raise LaunchError(
            "the Batch AI cluster does not match the 2018-05-01 cluster schema: "
            + "; ".join(errors)
            + " (a bug in cifar_dist's cluster builder, or a bad launcher.vm_* value)"
        )
