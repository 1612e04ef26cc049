"""Scoring on Batch AI (``task=evaluate``): what ``evaluate.model`` and
``evaluate.input`` mean when the job runs on the nodes, not here.

``evaluate.model`` may be

(a) a local run dir of an earlier Batch AI training launch (it holds the
    ``job.json`` the launcher wrote): the nodes read that job's outputs where
    training saved them, on the share (its saved model, else its newest
    checkpoint); nothing is uploaded;
(b) a path on the share as the nodes see it,
    ``$AZ_BATCHAI_JOB_MOUNT_ROOT/<share>/<path>`` (without braces: OmegaConf
    would take ``${...}`` for an interpolation; ``${oc.env:AZ_BATCHAI_JOB_MOUNT_ROOT}/...``
    works too), a .h5 file or a run dir;
(c) a local model file, or a local run dir that did not run on Batch AI (its
    saved model, else its newest checkpoint): uploaded with the job,
    content-addressed under ``<experiment>/models/<hash>/``.

``evaluate.input`` stays ``test``/``train`` (the data group, on the node), or
is a share path as in (b), or a local file or folder, uploaded under
``<experiment>/inputs/<hash>/``. In the config the nodes compose, every such
value becomes ``${oc.env:AZ_BATCHAI_JOB_MOUNT_ROOT}/<share>/<path>``, which
OmegaConf resolves on the node, where Batch AI sets the variable. Paths the
nodes will read and nobody uploads are checked on the share before the job is
submitted, so a wrong path fails in one line here, not minutes later there.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf, open_dict

from cifar_dist.evaluation.inputs import EvaluationInputError, resolve_model_path
from cifar_dist.launchers.base import LaunchError
from cifar_dist.launchers.batchai.config import Settings
from cifar_dist.launchers.batchai.monitor import LOCAL_SUBDIR
from cifar_dist.rundir.checkpoints import SAVED_MODEL_NAME

# Resolved by OmegaConf on the node (Batch AI sets the variable there).
NODE_MOUNT_ROOT = "${oc.env:AZ_BATCHAI_JOB_MOUNT_ROOT}"
_NODE_PATH = re.compile(
    r"^(?:\$AZ_BATCHAI_JOB_MOUNT_ROOT|\$\{oc\.env:AZ_BATCHAI_JOB_MOUNT_ROOT\})/+(?P<mount>[^/]+)(?:/+(?P<rel>.*?))?/*$"
)
MODEL_SUFFIXES = (".h5", ".hdf5", ".keras")
SAVED_MODELS = tuple(f"saved_models/{SAVED_MODEL_NAME}{suffix}" for suffix in (".h5", ".keras"))  # checkpoints.py
_CHECKPOINT = re.compile(r"^checkpoints/checkpoint-\d{3,}\.(h5|keras)$")


def is_evaluate(cfg: DictConfig) -> bool:
    task = cfg.get("task")
    return task is not None and task.get("name") == "evaluate"


@dataclass(frozen=True)
class ShareInput:
    """One thing the scoring job reads, as a path on the share."""

    key: str  # evaluate.model / evaluate.input
    share: str
    path: str  # below the share root
    is_dir: bool
    origin: str  # what the user gave, in words, for logs and errors
    uploads: Dict[str, Path] = field(default_factory=dict)  # share path -> local file (empty: already there)

    @property
    def node_value(self) -> str:
        return f"{NODE_MOUNT_ROOT}/{self.share}/{self.path}"

    @property
    def shown(self) -> str:
        return f"$AZ_BATCHAI_JOB_MOUNT_ROOT/{self.share}/{self.path}"


@dataclass(frozen=True)
class ScoringPlan:
    model: ShareInput
    input: Optional[ShareInput]

    @property
    def items(self) -> List[ShareInput]:
        return [i for i in (self.model, self.input) if i is not None]

    @property
    def uploads(self) -> Dict[str, Path]:
        out: Dict[str, Path] = {}
        for item in self.items:
            out.update(item.uploads)
        return out

    def node_values(self) -> Dict[str, str]:
        """evaluate.<key> -> the value the nodes get."""
        return {item.key.split(".", 1)[1]: item.node_value for item in self.items}


def plan_scoring(cfg: DictConfig, settings: Settings, cwd: Path) -> Optional[ScoringPlan]:
    """Where the scoring job finds its model (and its images); None for other tasks."""
    if not is_evaluate(cfg):
        return None
    raw = OmegaConf.to_container(cfg.evaluate, resolve=False) if cfg.get("evaluate") is not None else {}
    model = raw.get("model")
    if not isinstance(model, str) or model in ("", "???"):
        raise LaunchError(
            "task=evaluate needs evaluate.model: a local run dir or .h5 file, or a path on the share "
            "($AZ_BATCHAI_JOB_MOUNT_ROOT/<share>/<path>)"
        )
    images = str(raw.get("input", "test"))
    return ScoringPlan(
        model=_model(model, settings, cwd),
        input=None if images in ("test", "train") else _images(images, settings, cwd),
    )


def apply_to_node_config(cfg: DictConfig, plan: Optional[ScoringPlan]) -> DictConfig:
    """A copy of ``cfg`` whose evaluate.* values are the node-side paths."""
    if plan is None:
        return cfg

    out = cfg.copy()
    with open_dict(out):
        for key, value in plan.node_values().items():
            out.evaluate[key] = value
    return out


# --- evaluate.model -------------------------------------------------------------------------


def _model(value: str, settings: Settings, cwd: Path) -> ShareInput:
    key, share = "evaluate.model", settings.conf.share
    node = _node_path(key, value, share)
    if node is not None:
        return ShareInput(key, share, node, not node.endswith(MODEL_SUFFIXES), f"{key}={value}")
    path = _local(value, cwd)
    if path.is_dir() and (path / "job.json").is_file() and (path / LOCAL_SUBDIR).is_dir():
        return ShareInput(key, share, _trained_on_batchai(path, settings), True, f"the Batch AI training run {path}")
    if path.is_dir():
        try:
            path = resolve_model_path(str(path))
        except EvaluationInputError as exc:
            raise LaunchError(str(exc)) from None
        origin = f"{path} (from a local run dir, uploaded)"
    elif path.is_file():
        origin = f"{path} (uploaded)"
    else:
        raise LaunchError(
            f"evaluate.model={value}: no such local file or run dir; give a local run dir or .h5 file, "
            f"or a path on the share as the nodes see it: $AZ_BATCHAI_JOB_MOUNT_ROOT/{share}/<path>"
        )
    remote = f"{settings.share_dir}/models/{_digest([path])}/{path.name}"
    return ShareInput(key, share, remote, False, origin, {remote: path})


def _trained_on_batchai(run_dir: Path, settings: Settings) -> str:
    """The share path of the outputs of the training job that ``run_dir``'s job.json describes."""
    where = f"{run_dir / 'job.json'}"
    try:
        props = json.loads((run_dir / "job.json").read_text("utf-8"))["properties"]
        args = shlex.split(props["horovodSettings"]["commandLineArgs"])
        node_run_dir = args[args.index("--run-dir") + 1]
        mounts = props["mountVolumes"]["azureFileShares"]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        raise LaunchError(
            f"{where} is not a job.json written by cifar_dist's Batch AI launcher (no --run-dir, no share mount); "
            "point evaluate.model at its saved model file instead"
        ) from None
    match = _NODE_PATH.match(node_run_dir)
    mount = next((m for m in mounts if match and m.get("relativeMountPath") == match["mount"]), None)
    if match is None or mount is None or not match["rel"]:
        raise LaunchError(
            f"{where}: its --run-dir {node_run_dir} is not on a share the job mounted; "
            "score its saved model file instead"
        )
    trained_share = str(mount.get("azureFileUrl", "")).rstrip("/").rsplit("/", 1)[-1]
    trained_account = mount.get("accountName")
    if (trained_account, trained_share) != (settings.storage_account, settings.conf.share):
        raise LaunchError(
            f"{run_dir} was trained on share {trained_share} of storage account {trained_account}, but this job "
            f"mounts {settings.conf.share} of {settings.storage_account}; score it with "
            f"launcher.storage_account={trained_account} launcher.share={trained_share}"
        )
    return _clean(match["rel"], "evaluate.model")


# --- evaluate.input -------------------------------------------------------------------------


def _images(value: str, settings: Settings, cwd: Path) -> ShareInput:
    key, share = "evaluate.input", settings.conf.share
    node = _node_path(key, value, share)
    if node is not None:
        is_dir = PurePosixPath(node).suffix == "" or node.endswith("cifar-10-batches-py")
        return ShareInput(key, share, node, is_dir, f"{key}={value}")
    if any(c in value for c in "*?["):
        raise LaunchError(
            f"evaluate.input={value}: globs are not expanded for Batch AI; put the files in one folder and "
            "give the folder (it is uploaded), or a path on the share"
        )
    path = _local(value, cwd)
    if path.is_file():
        files = {path.name: path}
    elif path.is_dir():
        files = {f"{path.name}/{f.relative_to(path).as_posix()}": f for f in sorted(path.rglob("*")) if f.is_file()}
        if not files:
            raise LaunchError(f"evaluate.input={value}: the folder is empty; give CIFAR batch files or 32x32 images")
    else:
        raise LaunchError(
            f"evaluate.input={value}: no such local file or folder; use test, train, a local file or folder "
            f"(uploaded), or a path on the share: $AZ_BATCHAI_JOB_MOUNT_ROOT/{share}/<path>"
        )
    base = f"{settings.share_dir}/inputs/{_digest(list(files.values()), names=list(files))}"
    uploads = {f"{base}/{rel}": local for rel, local in files.items()}
    return ShareInput(key, share, f"{base}/{path.name}", path.is_dir(), f"{path} (uploaded)", uploads)


# --- helpers --------------------------------------------------------------------------------


def _node_path(key: str, value: str, share: str) -> Optional[str]:
    """The share path of a node-side value, None for anything else."""
    match = _NODE_PATH.match(value.strip())
    if match is None:
        if value.strip().startswith("$"):
            raise LaunchError(
                f"{key}={value}: a path on the nodes must start with $AZ_BATCHAI_JOB_MOUNT_ROOT/{share}/ "
                "(the share this job mounts)"
            )
        return None
    if match["mount"] != share:
        raise LaunchError(
            f"{key}={value}: the job mounts only launcher.share={share}, at $AZ_BATCHAI_JOB_MOUNT_ROOT/{share}; "
            f"use a path below it (or launcher.share={match['mount']})"
        )
    if not match["rel"]:
        raise LaunchError(f"{key}={value} is the share itself; name a file or run dir on it")
    return _clean(match["rel"], key)


def _clean(rel: str, key: str) -> str:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise LaunchError(f"{key}: '..' is not allowed in a path on the share ({rel})")
    return "/".join(parts)


def _local(value: str, cwd: Path) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else Path(cwd) / path


def _digest(files: List[Path], names: Optional[List[str]] = None) -> str:
    digest = hashlib.sha256()
    for name, path in zip(names or [p.name for p in files], files):
        digest.update(name.encode() + b"\0")
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def missing_on_share(share: Any, item: ShareInput) -> Optional[str]:
    """Why the nodes would not find ``item`` on the share (None when they would)."""
    if item.uploads:
        return None
    if not item.is_dir:
        return None if share.exists(item.path) else "no such file on the share"
    files = list(share.walk(item.path))
    if item.key == "evaluate.model":
        if any(m in files for m in SAVED_MODELS) or any(_CHECKPOINT.match(f) for f in files):
            return None
        if not files:
            return "no such run dir on the share (did its training job run, and succeed?)"
        return f"it holds neither {SAVED_MODELS[0]} (.keras) nor checkpoints/checkpoint-NNN.h5 (.keras)"
    return None if files else "no such folder on the share (or it is empty)"
