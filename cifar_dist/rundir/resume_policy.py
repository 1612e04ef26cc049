"""What a re-run into an existing run dir may change, checked before Hydra writes anything.

A run dir's checkpoints, ``metrics.json`` and ``.hydra/`` describe one
experiment. Re-running into it resumes that experiment, so the settings that
define it must stay as they were (``.hydra/config.yaml`` of the run that
wrote the checkpoints). The rule is by group, not by a list of keys, so an
option added later is fixed unless it is named free here:

* every key of ``data``, ``model``, ``optimizer`` and ``trainer`` is fixed
  (the data set, its factory and kwargs, its split, augmentation and
  shuffling; the model; the optimizer; the training recipe: batch size, epoch
  policy, lr scaling, warmup, decay, schedule, label smoothing, lookahead,
  seed, precision, compression, ...),
* except the keys in ``FREE``: how long the run is and how long one
  invocation runs (``trainer.epochs``, ``max_epochs_per_run``), what is
  written (``verbose``, ``keep_checkpoints``, ``tensorboard``, ``plot``,
  ``save_model``), the final test's TTA, how often it validates, how fast it
  runs (threads, ``onednn``, ``steps_per_execution``, ``jit_compile``,
  ``deterministic``), how a resume is decided (``resume``,
  ``resume_despite_changes``) and where the data is read from (``data.path``,
  the cache, downloads, prefetch: that the data behind it is the same is
  checked by its fingerprint, ``rundir/fingerprint.py``);
* the engine (``engine.name``, ``engine.keras``: a run's checkpoints are of
  one Keras; a config saved before engines existed counts as horovod, 2;
  ``engine=auto`` keeps the engine the checkpoints were trained on,
  ``training/engines/choice.py``);
* every other group (the launcher, ranks included: the run then continues
  with that world size's scaled lr and epoch count, as docs/launchers.md
  describes; tracking; task) may change.

Refused, in one line listing every difference, before Hydra overwrites
``.hydra/config.yaml``/``overrides.yaml`` (``guard_run_dir`` in
``cifar_dist/rundir/guard.py`` calls this from Hydra's ``on_run_start``, and
for every point of a sweep before it starts). Also refused there:
``trainer.resume=false`` over checkpoints, and training again into a
finished run whose checkpoints are gone (that would silently replace its
saved model).

No other task writes over a training run's record: ``task=evaluate`` with
``hydra.run.dir`` at a training run's dir (its checkpoints, saved model or
``.hydra/`` of a training job) is refused the same way, before Hydra replaces
that run's ``.hydra/*.yaml`` with the evaluation's; the line says how to write
beside it (``refuse_other_task``). And a resume imports nothing from inside
its run dir: a ``_target_`` of the command's whose module lies there is refused
(``rundir/run_code.py``: a run dir is data, not code).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

from omegaconf import DictConfig, OmegaConf

from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.redaction import redact_config
from cifar_dist.config.override_syntax import shell_override
from cifar_dist.config.schema import engine_of
from cifar_dist.rundir.checkpoints import find_saved_model, list_checkpoints
from cifar_dist.rundir.fingerprint import check_resume, record
from cifar_dist.rundir.run_code import refuse_inside, targets
from cifar_dist.rundir.saved_config import load_saved
from cifar_dist.rundir.stack import stack_record

FIXED_GROUPS = ("data", "model", "optimizer", "trainer")
FREE = frozenset(
    (
        "data.path",
        "data.cache_dir",
        "data.url",
        "data.download",
        "data.download_timeout_s",
        "data.prefetch",
        "trainer.epochs",
        "trainer.max_epochs_per_run",
        "trainer.verbose",
        "trainer.keep_checkpoints",
        "trainer.checkpoint_interval_s",
        "trainer.accelerator",
        "trainer.compilation_cache",
        "trainer.execution",
        "data.placement",
        "trainer.tensorboard",
        "trainer.plot",
        "trainer.save_model",
        "trainer.tta",
        "trainer.validate_every",
        "trainer.intra_op_threads",
        "trainer.inter_op_threads",
        "trainer.onednn",
        "trainer.steps_per_execution",
        "trainer.jit_compile",
        "trainer.deterministic",
        "trainer.resume",
        "trainer.resume_despite_changes",
    )
)
# Recorded in the config but no setting of the job: why engine=auto chose its engine, which cifar_dist writes and
# which changes with the run dir (once it holds checkpoints, engine=auto keeps their engine and says so).
NOTES = frozenset(("engine.why",))
SAVED_CONFIG = Path(".hydra") / "config.yaml"


class ResumeConflict(CifarDistError):
    """The re-run would continue a run dir's experiment with other settings."""


def _flat(node: Any, prefix: str = "") -> Dict[str, Any]:
    if isinstance(node, dict):
        out: Dict[str, Any] = {}
        for key, value in node.items():
            out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: node}


def _plain(cfg: DictConfig) -> Dict[str, Any]:
    """The config as plain data (enums as names), interpolations resolved where they can be."""
    try:
        return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    except Exception:  # an interpolation that no longer resolves: compare what is written
        return OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)


def all_settings(cfg: DictConfig) -> Dict[str, Any]:
    """Every setting of ``cfg`` by dotted name (``hydra`` excluded before resolving: its
    ``${hydra:...}`` values resolve only inside a running app; ``NOTES`` excluded), secrets masked: the saved
    ``.hydra/config.yaml`` holds them masked (``saved_config.py``), so the new config is compared masked too."""
    flat = _flat(redact_config(_plain(OmegaConf.create({k: v for k, v in cfg.items() if k != "hydra"}))))
    return {k: v for k, v in flat.items() if k not in NOTES}


def fixed_settings(cfg: DictConfig) -> Dict[str, Any]:
    """The settings of ``cfg`` that a resume must keep, by dotted name."""
    return {
        k: v
        for k, v in all_settings(cfg).items()
        if k not in FREE and any(k == g or k.startswith(g + ".") for g in FIXED_GROUPS)
    }


def changed(old: Dict[str, Any], now: Dict[str, Any], was: str = "was ", now_label: str = "now ") -> List[str]:
    """``name (was X, now Y)`` for each setting that differs (keys one side lacks count too)."""
    return [
        f"{k} ({was}{old.get(k, 'unset')}, {now_label}{now.get(k, 'unset')})"
        for k in sorted(set(old) | set(now))
        if old.get(k) != now.get(k)
    ]


def differences(saved: DictConfig, new: DictConfig) -> List[str]:
    """The fixed settings that differ, as ``changed`` says them (and the engine: which one, and the built-in
    models' Keras, which decides the checkpoints' format)."""
    old_engine, new_engine = _engine_settings(saved), _engine_settings(new)
    if old_engine["engine.name"] != new_engine["engine.name"]:  # each engine's own Keras follows: name only that
        old_engine.pop("engine.keras"), new_engine.pop("engine.keras")  # (the user may never have set it)
    return changed(fixed_settings(saved), fixed_settings(new)) + changed(old_engine, new_engine)


def _engine_settings(cfg: DictConfig) -> Dict[str, Any]:
    """The engine's name and Keras (not ``why`` engine=auto chose it: a resume keeps the engine, engines/choice.py)."""
    engine = engine_of(cfg)
    return {"engine.name": engine.name, "engine.keras": engine.keras}


def check_rerun(run_dir: Path, cfg: DictConfig) -> None:
    """Refuse a training re-run into ``run_dir`` that would not continue its experiment unchanged, and any other
    task into a training run's dir (``refuse_other_task``)."""
    if not is_training(cfg):
        refuse_other_task(run_dir, cfg)
        return
    checkpoints = list_checkpoints(run_dir / "checkpoints")
    saved_model = find_saved_model(run_dir)
    resume = str(cfg.trainer.resume).lower()
    if not checkpoints:
        if saved_model is not None:
            raise ResumeConflict(
                f"{run_dir} holds a finished run ({saved_model.relative_to(run_dir)}) but no checkpoints to resume "
                "from; choose a new hydra.run.dir (or move saved_models/ aside to train here from scratch)"
            )
        return
    if resume == "false":
        raise ResumeConflict(
            f"{run_dir / 'checkpoints'} already holds checkpoints; resume with trainer.resume=true "
            "or start a new run dir (hydra.run.dir=...)"
        )
    saved = run_dir / SAVED_CONFIG
    differing = differences(load_saved(saved), cfg) if saved.is_file() else []  # none: written by hand
    if differing:
        raise ResumeConflict(
            f"{run_dir} holds checkpoints of another experiment; a resume must keep its settings, but these "
            f"differ: {'; '.join(differing)}. Re-run with the old values, or choose a new hydra.run.dir "
            "(trainer.epochs, data.path, the launcher, ranks and speed settings may change)"
        )
    refuse_inside(targets({k: v for k, v in cfg.items() if k != "hydra"}), run_dir, "the command")
    check_resume(run_dir, cfg)


def trained_in(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a training run's record: checkpoints, a saved model, or the ``.hydra/`` of a
    training job (a config saved before tasks existed was a training job's)."""
    if list_checkpoints(run_dir / "checkpoints") or find_saved_model(run_dir) is not None:
        return True
    try:
        saved = OmegaConf.load(run_dir / SAVED_CONFIG) if (run_dir / SAVED_CONFIG).is_file() else None
    except Exception:  # noqa: BLE001 -- unreadable: nothing of it to keep from the other checks
        return False
    return saved is not None and str(OmegaConf.select(saved, "task.name", default="train")) == "train"


def refuse_other_task(run_dir: Path, cfg: DictConfig) -> None:
    """Refuse a job that does not train (``task=evaluate``) into a training run's dir: Hydra would replace the
    run's ``.hydra/*.yaml`` with the job's own, and the run could no longer be resumed or scored on its data."""
    if trained_in(run_dir):
        task = OmegaConf.select(cfg, "task.name", default="?")
        beside = shell_override("hydra.run.dir", run_dir.with_name(f"{run_dir.name}-{task}"))
        raise ResumeConflict(
            f"{run_dir} holds a training run, and task={task} into it would replace that run's record (.hydra/) "
            f"with its own; leave hydra.run.dir out (a new run dir) or write beside it: {beside}"
        )


def is_training(cfg: DictConfig) -> bool:
    return cfg.get("task") is not None and cfg.task.get("name") == "train"


def record_start(run_dir: Path, cfg: DictConfig) -> None:
    """Once the re-run is allowed: record the code, the data and the stack a training run starts (or resumes)
    with."""
    if is_training(cfg):
        resuming = bool(list_checkpoints(run_dir / "checkpoints"))
        record(run_dir, cfg, resuming, kept=stack_record(run_dir, cfg, resuming))
