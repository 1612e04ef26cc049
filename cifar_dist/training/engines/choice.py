"""``engine=auto``: which engine a job trains on, chosen once, where it is launched, before anything is written.

The rule (docs/engines.md, "Which engine runs"):

1. a re-run into a run dir with checkpoints keeps the engine that trained them
   (its saved ``.hydra/config.yaml``): a resume never changes engine;
2. where Horovod can run the job (installed here, or the launcher builds the
   job's own environment with it: Azure ML, Batch AI), ``horovod``: the
   horovod stack trains as it always has;
3. else one process trains on ``tensorflow`` (TensorFlow alone, the same
   speed: nothing to average), and so do several on CPUs (TensorFlow's
   kernels in every process, the gradients averaged over MPI: XLA's CPU
   convolutions are ~0.4x TensorFlow's); several processes with GPUs train on
   ``jax`` (Keras 3's own data parallelism, the data on the device; the
   built-in models are built in Keras 3 there), but Keras 2 models
   (``engine.keras=2``) on ``tensorflow``; where TensorFlow is not installed
   (the jax stack), every job trains on ``jax``.

``resolve_engine`` replaces ``cfg.engine`` by the chosen engine's node, so
that Hydra's ``.hydra/config.yaml`` records the engine that ran; the reason
is the node's ``why`` (the job's log and ``metrics.json``'s ``engine_reason`` say it too). It runs in
``on_run_start`` (``EngineChoice``, before the run-dir guard compares a
re-run's settings), for each point of a sweep (the sweep launcher), and as a
last resort in the job itself. Launched processes get the chosen engine on
their command line (``JobSpec.child_overrides``). An engine that cannot run
here (``engine=horovod`` without Horovod) is refused by the config's
validation, in one line that says how to get it; an engine chosen here after
that validation gets the checks that depend on the engine as it is chosen
(``validation.check_chosen_engine``), before anything is written.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from pathlib import Path
from typing import Any, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict

from cifar_dist.common.engine_facts import AUTO, HOROVOD, JAX, TENSORFLOW, engine_facts
from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.hydra_hooks import fails_closed
from cifar_dist.common.process_role import in_child_process
from cifar_dist.config.launcher_object import launching_launcher
from cifar_dist.config.schema import ENGINE_SCHEMAS, engine_of
from cifar_dist.config.validation import check_chosen_engine, is_validated
from cifar_dist.rundir.checkpoints import list_checkpoints
from cifar_dist.rundir.resume_policy import SAVED_CONFIG
from cifar_dist.rundir.saved_config import load_saved
from cifar_dist.training.engines.world import processes_from_env
from cifar_dist.training.process.gpu_env import host_gpu_count, visible_gpus

log = logging.getLogger(__name__)

# How to get what an engine needs (docs/install.md's stacks).
HOROVOD_INSTALL = (
    "install the horovod stack (`CIFAR_DIST_STACK=horovod make install`, Python 3.10/3.11: docs/install.md)"
)
TENSORFLOW_INSTALL = (
    "install cifar_dist's tensorflow extra (`pip install -e '.[tensorflow]'`, Python < 3.14; or the current stack: "
    "`CIFAR_DIST_STACK=current make install`, docs/install.md)"
)


class EngineChoiceError(CifarDistError):
    """engine=auto cannot name an engine that trains this job here."""


def horovod_installed() -> bool:
    """Whether Horovod can be imported here (checked without importing it)."""
    return importlib.util.find_spec("horovod") is not None


def tensorflow_installed() -> bool:
    """Whether TensorFlow can be imported here (checked without importing it): not on the jax stack."""
    return importlib.util.find_spec("tensorflow") is not None


def installed_stack() -> str:
    """Which of docs/install.md's stacks this environment is, by what it has: Horovod (the horovod stack),
    TensorFlow without it (the current stack), no TensorFlow (the jax stack)."""
    if not tensorflow_installed():
        return "the jax stack"
    return "the horovod stack" if horovod_installed() else "the current stack"


def missing_hint(package: str) -> str:
    """``<package> is not installed in this environment (<its stack>); <how to install it>``, for an engine that
    needs Horovod or TensorFlow where it is missing."""
    how = HOROVOD_INSTALL if package == "horovod" else TENSORFLOW_INSTALL
    name = "Horovod" if package == "horovod" else "TensorFlow"
    return f"{name} is not installed in this environment ({installed_stack()}); {how}"


def choose(processes: int, horovod_where: Optional[str], keras: Optional[int] = None, gpus: int = 0) -> tuple:
    """(engine name, reason) for a new job of ``processes`` processes (the rule's steps 2 and 3);
    ``horovod_where``: why the job has Horovod (``horovod_reason``), None when it has not; ``gpus``: the GPUs each
    of its processes trains on (``gpus_per_process``: a rank each on JAX, one on TensorFlow)."""
    if horovod_where:
        return HOROVOD.name, f"engine=auto: {horovod_where}"
    if not tensorflow_installed():
        if keras == 2:
            raise EngineChoiceError(
                "engine.keras=2 asks for Keras 2 (tf.keras) models, which need TensorFlow: "
                f"{missing_hint('tensorflow')}; or drop engine.keras=2"
            )
        return JAX.name, f"engine=auto: TensorFlow is not installed; {processes} process(es) train on JAX (Keras 3)"
    if processes == 1 and (gpus < 2 or keras == 2):
        return TENSORFLOW.name, "engine=auto: Horovod is not installed; one process trains on TensorFlow alone"
    if processes == 1:
        return JAX.name, (
            f"engine=auto: Horovod is not installed; one process with {gpus} GPUs trains on JAX (Keras 3), a rank "
            "per GPU (TensorFlow would train one)"
        )
    if not gpus:
        return TENSORFLOW.name, (
            f"engine=auto: Horovod is not installed; {processes} processes on CPUs train on TensorFlow, "
            "their gradients averaged over MPI"
        )
    if keras == 2:
        return TENSORFLOW.name, (
            f"engine=auto: Horovod is not installed; {processes} processes with GPUs train Keras 2 models "
            "(engine.keras=2) on TensorFlow, their gradients averaged over MPI (JAX trains Keras 3 only)"
        )
    return JAX.name, f"engine=auto: Horovod is not installed; {processes} processes with GPUs train on JAX (Keras 3)"


def gpus_per_process(launcher, accelerator: str = "auto", environ=None) -> int:
    """The GPUs each of the job's processes trains on, as far as the launching process can tell: none with
    ``trainer.accelerator=cpu``; where the launcher asks its cluster for GPUs (Slurm's ``gpus_per_node``,
    ``gpus_per_task``, a ``gpu`` ``gres``: ``gpus_per_process``), what it asks; else the GPUs this host shows
    (``/dev/nvidia*``, narrowed by ``CUDA_VISIBLE_DEVICES``; read before any CUDA library loads), shared by the
    processes the launcher starts (on hosts like this one)."""
    if accelerator == "cpu":
        return 0
    asked = launcher.gpus_per_process() if launcher is not None else None
    if asked is not None:
        return int(asked)
    visible = len(visible_gpus(os.environ if environ is None else environ, host_gpu_count()))
    processes = launcher.processes() if launcher is not None else 1
    return max(1, visible // processes) if visible else 0


def runnable_engine(name: str) -> str:
    """The engine that runs a job of ``name`` in this process (an evaluation: the engine its model was trained
    on, or the config's): ``auto`` chosen by the rule; ``horovod`` where Horovod is missing, ``tensorflow`` (the
    same model, the same scores, the same slices of the test set, gathered over MPI instead of Horovod)."""
    processes = processes_from_env()
    if name == AUTO:
        return choose(processes, horovod_reason(False), gpus=gpus_per_process(None))[0]
    facts = engine_facts(name)
    if facts is not None and facts.needs_horovod and not horovod_installed():
        return TENSORFLOW.name
    return name


def trained_engine(run_dir: Optional[Path]) -> Optional[str]:
    """The engine that trained the checkpoints in ``run_dir`` (from its saved config); None without any."""
    if run_dir is None or not list_checkpoints(run_dir / "checkpoints"):
        return None
    saved = run_dir / SAVED_CONFIG
    name = engine_of(load_saved(saved)).name if saved.is_file() else None
    return name if engine_facts(name) is not None else None  # (auto, or no engine: None)


def horovod_reason(launcher_builds_environment: bool) -> Optional[str]:
    """Why the job will have Horovod (its launcher builds the job's environment with it, as Azure ML's and
    Batch AI's do, or it is installed here), or None."""
    if launcher_builds_environment:
        return "the launcher builds the job's environment, with Horovod"
    return "Horovod is installed" if horovod_installed() else None


def _launcher_facts(cfg: DictConfig) -> tuple:
    """(processes, why the job has Horovod or None) for the configured launcher (the one validation built), and
    the GPUs each trains on (``gpus_per_process``); a rank reads its environment."""
    launcher = launching_launcher(cfg)
    accelerator = OmegaConf.select(cfg, "trainer.accelerator", default="auto")
    gpus = gpus_per_process(launcher, str(getattr(accelerator, "value", accelerator)))
    if launcher is None:
        return processes_from_env(), horovod_reason(False), gpus
    return launcher.processes(), horovod_reason(launcher.builds_own_environment), gpus


def resolve_engine(cfg: DictConfig, run_dir: Optional[Path] = None) -> Optional[str]:
    """Replace ``cfg.engine`` (``engine=auto``) of a training job by the engine it trains on; returns why (None:
    not auto, or not training: an evaluation scores on the engine of the run it scores, ``runnable_engine``).

    ``run_dir``: where the job writes, whose checkpoints keep their engine."""
    engine = cfg.get("engine")
    task = cfg.get("task")
    if not isinstance(engine, DictConfig) or engine.get("name") != AUTO or (task is not None and task.name != "train"):
        return None
    keras = engine.get("keras")
    kept = trained_engine(run_dir)
    if kept is not None:
        name, reason = kept, f"engine=auto: the run dir's checkpoints were trained on engine={kept}"
    else:
        processes, horovod_where, gpus = _launcher_facts(cfg)
        name, reason = choose(processes, horovod_where, keras, gpus)
    chosen = OmegaConf.structured(ENGINE_SCHEMAS[name])
    chosen.why = reason
    if keras is not None:
        chosen.keras = keras
    with open_dict(cfg):
        cfg.engine = chosen
    if is_validated(cfg):  # checked before the engine was known: what depends on it is checked now
        check_chosen_engine(cfg)
    return reason


class EngineChoice(Callback):
    """Hydra callback (``conf/hydra/default.yaml``): ``engine=auto`` resolved before Hydra saves the config."""

    @fails_closed
    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        if in_child_process():
            return
        try:
            resolve_engine(config, Path(str(config.hydra.run.dir)).absolute())
        except CifarDistError as error:
            print(f"cifar_dist: error: {error}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
