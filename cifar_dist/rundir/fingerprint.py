"""What the code and the data were when a run started: a fingerprint a resume must match.

The resume policy (``resume_policy.py``) compares settings; the same settings
can still mean another experiment: the builder's source edited (another
activation, same shapes), or the image folder changed (a class folder renamed,
images added: labels permuted). At a run's first start (no checkpoints yet)
the run dir gets ``.cifar_dist_fingerprint.json``; a resume computes it again
and refuses a difference in one line, before Hydra writes anything, unless
``trainer.resume_despite_changes=true`` (then the new fingerprint is recorded).

What is fingerprinted is cheap and needs neither TensorFlow nor the images:

* ``builder``: sha256 of the source file of ``model._target_``'s module;
* ``data_factory``: the same for ``data._target_`` (``data=custom``);
* ``data_files`` (``data=folder``): the class names, the train/test image
  counts and a sha256 of the sorted list of (file path relative to
  ``data.path``, class) pairs of each split. ``data.path`` itself may change
  (the same folder moved); its contents may not.

A part that cannot be computed (a module not importable from here, a folder
not readable) is left out and not compared: the trainer reports those in its
own words.

What only the loaded data can tell (a factory's or an archive's class names
and image counts: ``data_loaded``) is added by the trainer once rank 0 has
the data (``check_loaded_data``, one call in ``training/trainer.py``): recorded
at a first start, compared on a resume, refused in the same one line on every
rank (rank 0 decides, Horovod broadcasts it).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from cifar_dist.atomic_files import write_json
from cifar_dist.data.batches import DataError
from cifar_dist.data.folder import split_tree
from cifar_dist.errors import CifarDistError
from cifar_dist.rundir.checkpoints import list_checkpoints

FINGERPRINT = ".cifar_dist_fingerprint.json"
OVERRIDE = "trainer.resume_despite_changes"


class FingerprintChanged(CifarDistError):
    """The code or the data differ from what the run dir's checkpoints were trained with."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def module_source_digest(target: Optional[str]) -> Optional[str]:
    """sha256 of the source file of the module that defines ``target`` (``pkg.mod.fn``), found without
    importing that module; None when it cannot be found."""
    if not target or "." not in str(target):
        return None
    try:
        spec = importlib.util.find_spec(str(target).rsplit(".", 1)[0])
        origin = Path(spec.origin) if spec is not None and spec.origin else None
        return _sha256(origin.read_bytes()) if origin is not None and origin.is_file() else None
    except (ImportError, ValueError, OSError):
        return None


def folder_digest(data_cfg: Any) -> Optional[Dict[str, Any]]:
    """Class names, counts and the file list of ``data=folder`` (relative to data.path); None if unreadable."""
    if data_cfg.get("path") is None:
        return None
    root = Path(str(data_cfg.path)).expanduser().absolute()
    try:
        train, test, names = split_tree(
            root, float(data_cfg.get("val_fraction", 0.2)), int(data_cfg.get("split_seed", 0))
        )
    except (DataError, OSError):
        return None

    def listing(files) -> str:
        return _sha256("\n".join(f"{Path(p).relative_to(root)}\t{c}" for p, c in sorted(files)).encode())

    return {
        "class_names": list(names),
        "train_images": len(train),
        "test_images": len(test),
        "train_files": listing(train),
        "test_files": listing(test),
    }


def fingerprint(cfg: Any) -> Dict[str, Any]:
    """The fingerprint of ``cfg``'s code and data (parts that cannot be computed left out)."""
    data = cfg.data
    parts = {
        "builder": module_source_digest(cfg.model.get("_target_")),
        "data_factory": module_source_digest(data.get("_target_")) if data.get("name") == "custom" else None,
        "data_files": folder_digest(data) if data.get("name") == "folder" else None,
    }
    return {k: v for k, v in parts.items() if v is not None}


def _flat(record: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def differences(old: Dict[str, Any], now: Dict[str, Any]) -> List[str]:
    """What differs, part by part (only parts both sides have)."""
    old_flat, now_flat = _flat(old), _flat(now)
    return [
        f"{k} (was {old_flat[k]}, now {now_flat[k]})"
        for k in sorted(set(old_flat) & set(now_flat))
        if old_flat[k] != now_flat[k]
    ]


def recorded(run_dir: Path) -> Optional[Dict[str, Any]]:
    try:
        return json.loads((Path(run_dir) / FINGERPRINT).read_text("utf-8"))
    except (OSError, ValueError):
        return None


def check_resume(run_dir: Path, cfg: Any) -> None:
    """Refuse resuming ``run_dir``'s checkpoints with other code or data, unless the override says so."""
    old = recorded(run_dir)
    if old is None or bool(cfg.trainer.get("resume_despite_changes", False)):
        return
    differing = differences(old, fingerprint(cfg))
    if differing:
        raise FingerprintChanged(_refusal(run_dir, differing))


def _refusal(run_dir: Path, differing: List[str]) -> str:
    return (
        f"{run_dir} holds checkpoints trained with other code or data: {'; '.join(differing)}. "
        f"Put the old code or data back, re-run with {OVERRIDE}=true to resume anyway, "
        "or choose a new hydra.run.dir"
    )


def loaded_data_problem(run_dir: Path, cfg: Any, data: Any, resuming: bool) -> str:
    """Rank 0: compare (on a resume) and record what the loaded ``data`` is; the refusal, or ""."""
    now = {
        "class_names": [str(n) for n in data.class_names],
        "train_images": int(data.train_size),
        "test_images": int(data.test_size),
    }
    old = recorded(Path(run_dir)) or {}
    accept = bool(cfg.trainer.get("resume_despite_changes", False))
    differing = differences({"data_loaded": old.get("data_loaded", {})}, {"data_loaded": now})
    if resuming and differing and not accept:
        return _refusal(run_dir, differing)
    if old.get("data_loaded") != now:
        write_json(Path(run_dir) / FINGERPRINT, {**old, "data_loaded": now})
    return ""


def check_loaded_data(run: Any, data: Any) -> None:
    """Every rank: refuse resuming with loaded data other than the run's (rank 0 decides; see the module doc)."""
    problem = ""
    if run.world.is_chief:
        resuming = bool(list_checkpoints(run.checkpoint_dir))
        problem = loaded_data_problem(run.output_dir, run.cfg, data, resuming)
    problem = run.engine.broadcast_object(problem)  # ENGINE: every rank learns rank 0's decision
    if problem:
        raise FingerprintChanged(problem)


def record(run_dir: Path, cfg: Any, resuming: bool) -> None:
    """Write the fingerprint at a first start, on a resume that accepted changes, or when an earlier run lacks it."""
    old = recorded(run_dir)
    if resuming and old is not None and not bool(cfg.trainer.get("resume_despite_changes", False)):
        return
    loaded = {"data_loaded": old["data_loaded"]} if resuming and old and "data_loaded" in old else {}
    write_json(Path(run_dir) / FINGERPRINT, {**fingerprint(cfg), **loaded})
