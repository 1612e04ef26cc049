"""The stack a run dir's checkpoints were written with (TensorFlow, Keras, JAX, Horovod), checked on a resume.

Two stacks are installed side by side (docs/install.md: the horovod stack's TensorFlow 2.18, the current stack's
newest), and a run dir can be resumed from either. Checkpoints of one TensorFlow or Keras may not load with
another, or load and go on training with other kernels and defaults: the run is then no longer one experiment.

What the checkpoints were written with is what ``metrics.json``'s ``run`` says: rank 0 writes it with every
checkpoint (``tensorflow``, ``keras``: the Keras the model was built in, and the engine's own ``jax`` or
``horovod``; ``training/run_records.py``). A run dir whose ``metrics.json`` is gone (deleted, or a cluster job's
download without it) still says: the launching process records the stack a training job starts with in the
fingerprint file a resume always reads (``rundir/fingerprint.py``), before anything trains, atomically, from the
package metadata (``started_stack``: the engine, TensorFlow where the engine runs on it, the Keras of
``engine.keras``, the engine's own packages); a resume that goes on with another stack keeps the one before in
that file's ``earlier_stacks`` too (``stack_record``).

A training re-run into a run dir with checkpoints compares each of them with the version installed here, by
release (major.minor: a patch release keeps the formats), before anything is written (``RunDirCheck`` for a run,
the sweep's checks for each point, both before ``engine=auto`` keeps the checkpoints' engine). A difference is
refused in one line naming the checkpoints' stack, unless ``trainer.resume_despite_changes=true`` says to go on;
then the resume says so, and the run dir records both (``metrics.json``'s ``earlier_stacks``: ``keep_earlier_stack``;
the fingerprint file's). A package the checkpoints' engine needs and this environment lacks (Horovod, on the
current stack) is refused whatever the setting: that engine cannot start here.

Not checked where the job builds its own environment (Azure ML, Batch AI): its stack is the job's, not this
machine's. Read only: the package metadata (``importlib``), never an import of the packages themselves.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from omegaconf import OmegaConf

from cifar_dist.common.engine_facts import engine_facts
from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.process_role import in_child_process
from cifar_dist.common.results import read_metrics
from cifar_dist.config.launcher_object import launching_launcher
from cifar_dist.config.schema import engine_of
from cifar_dist.rundir.checkpoints import list_checkpoints
from cifar_dist.rundir.fingerprint import recorded

OVERRIDE = "trainer.resume_despite_changes"
EARLIER = "earlier_stacks"  # metrics.json and the fingerprint file: the stacks a resumed run trained on before
STACK = "stack"  # the fingerprint file: the stack the run's checkpoints are written with (``started_stack``)
# metrics.json's run keys -> the name a user knows; "keras" is tf-keras (Keras 2) or keras (Keras 3) by its major.
NAMES = {"tensorflow": "TensorFlow", "keras": "Keras", "jax": "JAX", "horovod": "Horovod"}
# (distribution, module) pairs that install each, the first installed wins (TensorFlow has several builds).
PROVIDERS: Dict[str, Tuple[Tuple[str, str], ...]] = {
    "tensorflow": (("tensorflow", "tensorflow"), ("tensorflow-cpu", "tensorflow"), ("tensorflow-macos", "tensorflow")),
    "keras 2": (("tf-keras", "tf_keras"), ("keras", "keras")),
    "keras 3": (("keras", "keras"),),
    "jax": (("jax", "jax"),),
    "horovod": (("horovod", "horovod"),),
}


class StackChanged(CifarDistError):
    """A resume would go on training checkpoints with another TensorFlow, Keras, JAX or Horovod."""


def stack_of(run: Any) -> Dict[str, str]:
    """The engine and the versions a ``metrics.json`` ``run`` record names ({} for none)."""
    if not isinstance(run, dict):
        return {}
    return {k: str(run[k]) for k in ("engine", *NAMES) if run.get(k) is not None}


def checkpoints_stack(run_dir: Path) -> Dict[str, str]:
    """What the run dir's checkpoints were written with: what its metrics.json says, else what its fingerprint
    file recorded when the run started ({} when neither says)."""
    return stack_of((read_metrics(run_dir) or {}).get("run")) or stack_of((recorded(run_dir) or {}).get(STACK))


def started_stack(cfg: Any) -> Dict[str, str]:
    """The stack a training job of ``cfg`` starts with here, as its metrics.json will name it: the engine, TensorFlow
    where the engine runs on it, the Keras of ``engine.keras`` and the engine's own packages (their metadata, nothing
    imported); {} where the launcher builds the job's own environment, or for no engine."""
    launcher = launching_launcher(cfg)
    engine = engine_of(cfg)
    facts = engine_facts(str(engine.name))
    if facts is None or (launcher is not None and launcher.builds_own_environment):
        return {}
    keys = [*(["tensorflow"] if facts.needs_tensorflow else []), "keras", *(p for p in facts.packages if p in NAMES)]
    found = {key: installed_version(key, str(engine.keras)) for key in dict.fromkeys(keys)}
    return {"engine": facts.name, **{k: v for k, v in found.items() if v is not None}}


def same_stack(a: Dict[str, str], b: Dict[str, str]) -> bool:
    """Whether two stacks are the same engine on the same releases (of the packages both name)."""
    shared = set(a) & set(b) & set(NAMES)
    return a.get("engine") == b.get("engine") and all(release(a[k]) == release(b[k]) for k in shared)


def stack_record(run_dir: Path, cfg: Any, resuming: bool) -> Dict[str, Any]:
    """What the fingerprint file keeps of the stack from this start on: ``stack`` (what the checkpoints are written
    with now) and, after a resume that went on with another stack, ``earlier_stacks`` (each with the last epoch
    it trained); {} where this process cannot speak for the job's environment (``started_stack``)."""
    now = started_stack(cfg)
    if not now:
        return {}
    earlier = list((recorded(run_dir) or {}).get(EARLIER, [])) if resuming else []
    before = checkpoints_stack(run_dir) if resuming else {}
    checkpoints = list_checkpoints(Path(run_dir) / "checkpoints")
    if before and checkpoints and not same_stack(before, now):
        earlier.append({**before, "until_epoch": checkpoints[-1][0]})
    return {STACK: now, **({EARLIER: earlier} if earlier else {})}


def installed_version(key: str, recorded: str) -> Optional[str]:
    """This environment's version of metrics.json's ``key`` (the Keras of ``recorded``'s major), None when it
    lacks it (as ``import`` would find it: a module made unimportable counts as missing)."""
    providers = PROVIDERS[f"keras {recorded.split('.')[0]}"] if key == "keras" else PROVIDERS[key]
    for distribution, module in providers:
        try:
            version = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
        if importlib.util.find_spec(module) is not None and (key != "keras" or version[:1] == recorded[:1]):
            return version
    return None


def release(version: str) -> str:
    """``2.18.1`` -> ``2.18``: what a checkpoint's format and a framework's behaviour follow."""
    return ".".join(version.split(".")[:2])


def describe(stack: Dict[str, str]) -> str:
    """``TensorFlow 2.21.0, Keras 3.12.0 (engine=tensorflow)``."""
    versions = ", ".join(f"{NAMES[k]} {v}" for k, v in stack.items() if k in NAMES)
    return f"{versions} (engine={stack['engine']})" if "engine" in stack else versions


def compared(recorded: Dict[str, str]) -> Tuple[Dict[str, str], List[str]]:
    """(this environment's versions of what differs from ``recorded`` by release, the packages it lacks)."""
    here, missing = {}, []
    for key, version in recorded.items():
        if key not in NAMES:
            continue
        now = installed_version(key, version)
        if now is None:
            missing.append(NAMES[key])
        elif release(now) != release(version):
            here[key] = now
    return here, missing


def resumes_checkpoints(run_dir: Path, cfg: Any) -> bool:
    """Whether ``cfg`` is a training job, started here, that will resume ``run_dir``'s checkpoints in an
    environment this process can speak for (not a rank, not a job whose launcher builds its own environment)."""
    if in_child_process() or OmegaConf.select(cfg, "task.name", default=None) != "train":
        return False
    if str(OmegaConf.select(cfg, "trainer.resume", default="auto")).lower() == "false":
        return False  # refused over checkpoints by the run-dir guard, in its own words
    launcher = launching_launcher(cfg)
    if launcher is not None and launcher.builds_own_environment:
        return False
    return bool(list_checkpoints(Path(run_dir) / "checkpoints"))


def check_stack(run_dir: Path, cfg: Any) -> None:
    """Refuse resuming ``run_dir``'s checkpoints on another stack, in one line naming theirs (see the module doc);
    with ``trainer.resume_despite_changes=true`` say that it goes on. Nothing is written."""
    if not resumes_checkpoints(run_dir, cfg):
        return
    recorded = checkpoints_stack(run_dir)
    here, missing = compared(recorded)
    written = f"{run_dir}'s checkpoints were written with {describe(recorded)}"
    if missing:
        raise StackChanged(
            f"{written}; this environment has no {' and no '.join(missing)}: resume them where it is installed "
            "(the stack they were written on, docs/install.md), or choose a new hydra.run.dir"
        )
    if not here:
        return
    if bool(OmegaConf.select(cfg, OVERRIDE, default=False)):
        print(
            f"cifar_dist: {written}; going on with {describe(here)} ({OVERRIDE}=true): the run dir records both "
            f"({EARLIER})",
            file=sys.stderr,
            flush=True,
        )
        return
    raise StackChanged(
        f"{written}, this environment has {describe(here)}: resume them on the stack they were written on "
        f"(docs/install.md), re-run with {OVERRIDE}=true to go on with this one (the run dir then records both), "
        "or choose a new hydra.run.dir"
    )


def keep_earlier_stack(metrics: Dict[str, Any], earlier_run: Any, initial_epoch: int) -> None:
    """On a resume (``initial_epoch`` > 0): when the ``run`` record metrics.json held names another stack than this
    run's (``metrics["run"]``), keep it in ``earlier_stacks``, with the last epoch it trained."""
    before, now = stack_of(earlier_run), stack_of(metrics.get("run"))
    if initial_epoch and before and before != now:
        metrics.setdefault(EARLIER, []).append({**before, "until_epoch": initial_epoch})
