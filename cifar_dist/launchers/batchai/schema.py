"""Offline validation of a job against Batch AI's published Horovod job schema.

The schema refers to the ARM template-expression definition on
schema.management.azure.com; a local stand-in is registered with
``referencing`` so validation never touches the network. On top of the
published schema (which requires almost nothing) the launcher's own contract
is checked: the fields a job sent by this launcher must always carry.
"""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any, Dict, List

from cifar_dist.launchers.base import LaunchError

SCHEMA_FILE = "horovod-2018-05-01.json"
HOROVOD_SCHEMA_URI = "urn:cifar-dist:batchai:2018-05-01:horovod.json"
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


def load_schema() -> Dict[str, Any]:
    text = resources.files("cifar_dist.launchers.batchai.schemas").joinpath(SCHEMA_FILE).read_text("utf-8")
    return json.loads(text)


@lru_cache(maxsize=1)
def _validator():
    # jsonschema is only needed here (dry runs and before each submission).
    from jsonschema import Draft4Validator
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT4

    registry = Registry().with_resources(
        [
            (HOROVOD_SCHEMA_URI, Resource(contents=load_schema(), specification=DRAFT4)),
            (EXPRESSION_URI, Resource(contents=_EXPRESSION_STAND_IN, specification=DRAFT4)),
        ]
    )
    return Draft4Validator(_LAUNCHER_CONTRACT, registry=registry)


def schema_errors(job_file: Dict[str, Any]) -> List[str]:
    """Every violation, as 'path: message' strings (empty when the job is valid)."""
    errors = sorted(_validator().iter_errors(job_file), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}" for e in errors]


def validate_job_file(job_file: Dict[str, Any]) -> None:
    """Raise a one-line LaunchError when the job does not match the Batch AI schema."""
    errors = schema_errors(job_file)
    if errors:
        raise LaunchError(
            "the Batch AI job does not match the 2018-05-01 Horovod job schema: "
            + "; ".join(errors)
            + " (a bug in cifar_dist's job builder, or a bad launcher.* value)"
        )
