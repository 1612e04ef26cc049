"""Checks on values that the config's types alone cannot express.

Run once per process: in the launching process before anything is written
(``rundir/preflight.py``, before Hydra creates the run dir; a sweep's points in
``sweep_checks.py``), in a rank where it composes its config (``app.py``), so
that a zero batch size fails in a second, not after mpirun has started N
processes or a cluster has been resized. A config that passed is marked
(``is_validated``): the steps after (the app, the trainer, the sweep's
``prepare_job``) are handed copies of it and trust the mark. The launcher's own
settings are its ``config_problems`` (``launchers/base.py``), checked here with the
rest. Every problem found is listed in one line; nothing is checked piecemeal
later. One thing is decided after the check: the engine ``engine=auto`` trains
on, chosen once the run dir's checkpoints can be read (``engines/choice.py``);
the chosen engine then gets the checks that depend on the engine
(``check_chosen_engine``), before anything is written too.
"""

from __future__ import annotations

import math
from typing import Any, Iterator, List, Tuple

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cifar_dist.common.engine_facts import AUTO, HOROVOD, engine_facts
from cifar_dist.common.errors import ConfigError  # noqa: F401  (raised here; callers catch it from here too)
from cifar_dist.common.omegaconf_internals import is_marked, mark
from cifar_dist.config.data_options import ignored_settings
from cifar_dist.config.launcher_object import launching_launcher
from cifar_dist.data import num_classes_of
from cifar_dist.data.custom import factory_problem
from cifar_dist.models.builder import model_node_problem
from cifar_dist.tracking.settings import handed_on_uri_problems

CIFAR_IMAGE_SHAPE = [32, 32, 3]
MAX_SEED = 2**31  # tf.keras.utils.set_random_seed takes < 2**32; seed + rank must fit
# The mark of a config that passed ``validate``: an OmegaConf flag, which copies keep (Hydra's job config is a
# deep copy of the one its callbacks saw) and no saved config shows.
VALIDATED = "cifar_dist_validated"


def _interpolations(node: Any, prefix: str = "") -> Iterator[Tuple[str, Any, Any]]:
    """(dotted path, container, key) of every interpolated value under ``node``."""
    keys = node.keys() if isinstance(node, DictConfig) else range(len(node))
    for key in keys:
        path = f"{prefix}.{key}" if isinstance(node, DictConfig) else f"{prefix}[{key}]"
        if OmegaConf.is_interpolation(node, key):
            yield path.lstrip("."), node, key
        elif not OmegaConf.is_missing(node, key) and isinstance(node[key], (DictConfig, ListConfig)):
            yield from _interpolations(node[key], path)


def unresolvable(cfg: DictConfig) -> List[str]:
    """Interpolations (``${oc.env:NAME}`` of an unset variable, a typo'd ``${...}``) that cannot be resolved."""
    found = []
    for path, node, key in _interpolations(cfg):
        if path == "hydra" or path.startswith("hydra."):
            continue  # Hydra's own node (present when called from a Hydra callback): Hydra resolves it
        try:
            node[key]
        except OmegaConfBaseException as exc:
            detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raw = OmegaConf.to_container(node, resolve=False)[key]
            found.append(f"{path}={raw} cannot be resolved ({detail}); set that variable or give the value")
    return found


def _finite_positive(found: List[str], name: str, value: Any) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        found.append(f"{name}={value} must be a finite number > 0")


def _model_problems(m: DictConfig, data: DictConfig) -> List[str]:
    found = []
    known = num_classes_of(data)  # None for folder/custom: the trainer checks once the data is read
    asked = m.get("num_classes")
    if asked is not None and known is not None and asked != known:
        found.append(
            f"model.num_classes={asked} must be {known} (data={data.name} has {known} classes; "
            "leave it unset to take it from the data)"
        )
    elif asked is not None and asked < 2:
        found.append(f"model.num_classes={asked} must be >= 2 (leave it unset to take it from the data)")
    if "input_shape" in m and list(m.input_shape) != CIFAR_IMAGE_SHAPE:
        found.append(f"model.input_shape={list(m.input_shape)} must be {CIFAR_IMAGE_SHAPE} (CIFAR-10's images)")
    if "dense_units" in m and m.dense_units < 1:
        found.append(f"model.dense_units={m.dense_units} must be >= 1")
    for key in ("conv_dropout", "dense_dropout"):
        if key in m and not 0 <= m[key] < 1:
            found.append(f"model.{key}={m[key]} must be in [0, 1) (the fraction of units dropped)")
    arguments = model_node_problem(m)  # a key its builder does not take (a user's model/<name>.yaml)
    return found + ([arguments] if arguments else [])


def _optimizer_problems(o: DictConfig) -> List[str]:
    found = []
    _finite_positive(found, "optimizer.lr", o.lr)
    for key, value in o.items():
        if key != "lr" and isinstance(value, float) and not math.isfinite(value):
            found.append(f"optimizer.{key}={value} must be a finite number")
    if "decay" in o and o.decay < 0:
        found.append(f"optimizer.decay={o.decay} must be >= 0")
    return found


def _trainer_problems(t: DictConfig) -> List[str]:
    found = []
    if t.epochs < 1:
        found.append(f"trainer.epochs={t.epochs} must be >= 1")
    if t.batch_size < 1:
        found.append(f"trainer.batch_size={t.batch_size} must be >= 1")
    if not (math.isfinite(t.warmup_epochs) and t.warmup_epochs >= 0):
        found.append(f"trainer.warmup_epochs={t.warmup_epochs} must be >= 0")
    if str(t.resume).lower() not in ("auto", "true", "false"):
        found.append(f"trainer.resume={t.resume} must be auto, true or false")
    if not 0 <= t.seed < MAX_SEED:
        found.append(f"trainer.seed={t.seed} must be in [0, {MAX_SEED})")
    if t.keep_checkpoints < 0:
        found.append(f"trainer.keep_checkpoints={t.keep_checkpoints} must be >= 0 (0 keeps all)")
    if t.checkpoint_interval_s < 0:
        found.append(f"trainer.checkpoint_interval_s={t.checkpoint_interval_s} must be >= 0 (0: after every epoch)")
    if t.validate_every < 0:
        found.append(
            f"trainer.validate_every={t.validate_every} must be >= 0 (k: every k-th epoch and the last; "
            "0: the last only)"
        )
    if t.max_epochs_per_run < 0:
        found.append(f"trainer.max_epochs_per_run={t.max_epochs_per_run} must be >= 0 (0 = no limit)")
    if t.steps_per_execution < 1:
        found.append(f"trainer.steps_per_execution={t.steps_per_execution} must be >= 1 (1 = one step per call)")
    if t.intra_op_threads < 0 or t.inter_op_threads < 0:
        found.append("trainer.intra_op_threads/inter_op_threads must be >= 0 (0 = automatic)")
    _finite_positive(found, "trainer.lr_decay_factor", t.lr_decay_factor)
    if not 0 <= t.label_smoothing < 1:
        found.append(f"trainer.label_smoothing={t.label_smoothing} must be in [0, 1)")
    sched = t.lr_schedule
    if not 0 < sched.peak_fraction < 1:
        found.append(f"trainer.lr_schedule.peak_fraction={sched.peak_fraction} must be in (0, 1)")
    if sched.start_factor < 0 or sched.end_factor < 0:
        found.append("trainer.lr_schedule.start_factor/end_factor must be >= 0 (fractions of the peak lr)")
    if sched.kind != "none" and (t.warmup_epochs > 0 or t.lr_decay_epochs):
        found.append(
            "trainer.lr_schedule sets the lr at every step; drop trainer.warmup_epochs/lr_decay_epochs "
            "(its start_factor is the warmup)"
        )
    return found


def _task_problems(cfg: DictConfig) -> List[str]:
    found = []
    if cfg.get("task") is not None and cfg.task.get("name") == "evaluate":
        ev = cfg.get("evaluate")
        if ev is None or OmegaConf.is_missing(ev, "model"):
            found.append("task=evaluate needs evaluate.model=<a training run dir or a .h5 model file>")
        if ev is not None and ev.batch_size < 1:
            found.append(f"evaluate.batch_size={ev.batch_size} must be >= 1")
    return found


def _tracking_problems(cfg: DictConfig) -> List[str]:
    tracking = cfg.get("tracking")
    if tracking is not None and str(tracking.get("remote", "import")) not in ("import", "nodes"):
        return [f"tracking.remote={tracking.remote} must be import or nodes"]
    return []


def problems(cfg: DictConfig) -> List[str]:
    found = unresolvable(cfg)
    if found:  # the checks below would trip over the same values
        return found
    found += _trainer_problems(cfg.trainer)
    found += _optimizer_problems(cfg.optimizer)
    found += _model_problems(cfg.model, cfg.data)
    found += _tracking_problems(cfg)
    found += _data_problems(cfg.data, _packages_here(cfg))
    found += _engine_problems(cfg)
    return found + _task_problems(cfg)


def _packages_here(cfg: DictConfig) -> bool:
    """Whether the job runs with this environment's packages (not in one its launcher builds: Azure ML, Batch AI)."""
    launcher = launching_launcher(cfg)
    return not (launcher is not None and launcher.builds_own_environment)


def _engine_problems(cfg: DictConfig) -> List[str]:
    engine = cfg.get("engine")
    if engine is None:  # a run dir's config saved before engines existed: Horovod, Keras 2
        return []
    if engine.keras not in (2, 3) and not (engine.keras is None and engine.name == AUTO):  # (auto: the chosen's)
        return [f"engine.keras={engine.keras} must be 2 (tf.keras) or 3 (keras)"]
    facts = engine_facts(engine.name)
    if facts is None:
        return []
    found = []
    if engine.keras not in facts.keras_versions:  # (jax: Keras 3 only)
        versions = " or ".join(str(v) for v in facts.keras_versions)
        found.append(
            f"engine={facts.name} trains Keras {versions} models: engine.keras={engine.keras} cannot apply "
            f"(leave it at {facts.keras_versions[-1]}, or use engine=horovod for Keras 2)"
        )
    compression = str(getattr(cfg.trainer.compression, "value", cfg.trainer.compression))
    if facts.xla_only and compression != "none":
        found.append(
            f"trainer.compression={compression} is Horovod's gradient compression; engine={facts.name} reduces "
            "gradients inside XLA's step: use trainer.compression=none"
        )
    return found


def _data_problems(data: DictConfig, packages_here: bool = True) -> List[str]:
    found = [
        f"data.{key}={str(value).lower() if isinstance(value, bool) else value} is not read by data={data.name} "
        f"(only by {', '.join(f'data={r}' for r in readers)}): remove it, or choose a data option that reads it"
        for key, value, readers in ignored_settings(data)
    ]
    if data.name == "custom" and OmegaConf.is_missing(data, "_target_"):
        found.append("data=custom needs data._target_=<module.function returning DataStreams> (docs/data.md)")
    elif data.name == "custom" and data.get("_target_"):
        unimportable = factory_problem(str(data._target_), packages_here)  # its source, read without running it
        found += [unimportable] if unimportable else []
    a = data.augment
    for key in ("translate", "cutout"):
        if a[key] < 0:
            found.append(f"data.augment.{key}={a[key]} must be >= 0 pixels (0 = off)")
    for key in ("width_shift", "height_shift"):
        if not 0 <= a[key] < 1:
            found.append(f"data.augment.{key}={a[key]} must be in [0, 1) (a fraction of the image size)")
    return found


def _engine_name(cfg: DictConfig) -> str:
    return str((cfg.get("engine") or {}).get("name", HOROVOD.name))


def launcher_problems(cfg: DictConfig) -> List[str]:
    """The configured launcher's own bad settings (``Launcher.config_problems``) and what its processes cannot run
    (``_processes_problems``); none inside a rank."""
    launcher = launching_launcher(cfg)
    if launcher is None:
        return []
    found = launcher.config_problems() + launcher.engine_problems(_engine_name(cfg)) + _processes_problems(cfg)
    return found + ([] if launcher.runs_in_this_process else handed_on_uri_problems(cfg))


def _processes_problems(cfg: DictConfig) -> List[str]:
    """The settings the engine cannot run on the launcher's processes: ``trainer.jit_compile=true`` on several
    processes of an engine whose step XLA cannot compile with its gradient averaging (engine=tensorflow's MPI
    allreduce; the engine refused it only once every process had started)."""
    launcher = launching_launcher(cfg)
    facts = engine_facts(_engine_name(cfg))
    if launcher is None or facts is None or not bool(OmegaConf.select(cfg, "trainer.jit_compile", default=False)):
        return []
    processes = launcher.processes()
    if processes > 1 and not facts.jit_compiles_several:
        return [
            f"trainer.jit_compile=true cannot run on {processes} engine={facts.name} processes: XLA cannot compile "
            "the step's MPI allreduce; use trainer.jit_compile=false, or engine=jax (every step compiled by XLA)"
        ]
    return []


def is_validated(cfg: Any) -> bool:
    """Whether ``cfg`` (or the config it was copied from) passed ``validate`` in this process."""
    return isinstance(cfg, DictConfig) and is_marked(cfg, VALIDATED)


def validate(cfg: DictConfig) -> None:
    """Every bad value of ``cfg``, the launcher's settings included, as one ``ConfigError`` line; a config that
    passes is marked, and validating it (or a copy) again costs nothing."""
    if is_validated(cfg):
        return
    found = problems(cfg)
    if not unresolvable(cfg):  # a launcher built from unresolved values would only repeat them
        found += launcher_problems(cfg)
    if found:
        raise ConfigError("bad config: " + "; ".join(found))
    mark(cfg, VALIDATED)


def check_chosen_engine(cfg: DictConfig) -> None:
    """After ``engine=auto`` became an engine in a validated config: the checks that depend on the engine (its
    own, the launcher's ``engine_problems``, what its processes cannot run), in the line ``validate`` would have
    given."""
    found = _engine_problems(cfg)
    launcher = launching_launcher(cfg)
    if launcher is not None:
        found += launcher.engine_problems(_engine_name(cfg)) + _processes_problems(cfg)
    if found:
        raise ConfigError("bad config: " + "; ".join(found))
