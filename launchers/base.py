"""The launcher interface and what every launcher shares.

Shaped after Hydra's launcher plugins (submitit, joblib, ray): a launcher is
configured from its config node (``_target_`` + fields), receives one composed
job and returns its outcome. Launchers that start other processes rebuild the
child's command line from the job's own overrides (never ``sys.argv``: inside
a sweep it still holds ``-m`` and the comma lists) and pin every child to the
parent's output directory, with the in-process launcher inside.
"""

from __future__ import annotations

import abc
import importlib.util
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cifar_dist.common.engine_facts import engine_facts
from cifar_dist.common.errors import CifarDistError, LaunchError  # noqa: F401  (LaunchError: launchers use it from here)
from cifar_dist.common.process_role import RANK_GUARD_ENV, in_child_process  # noqa: F401  (re-exported: launchers use them from here)
from cifar_dist.common.redaction import MASK, redact_text, secret_assignments
from cifar_dist.config.override_syntax import names_group, override_key, quote_override_value
from cifar_dist.launchers.user_sources import Carried
from cifar_dist.training.engines.choice import horovod_installed, missing_hint, tensorflow_installed
from cifar_dist.training.engines.world import processes_from_env

log = logging.getLogger(__name__)


# Hydra overrides that describe the parent's own invocation and must not reach
# a child: where the parent wrote its outputs, how it swept, and so on.
_PARENT_ONLY_HYDRA_PREFIXES = (
    "hydra.run",
    "hydra.sweep",
    "hydra.mode",
    "hydra.launcher",
    "hydra/launcher",
    "hydra.sweeper",
    "hydra/sweeper",
    "hydra.output_subdir",
    "hydra.job.chdir",
    "hydra.callbacks",
    "hydra/callbacks",
)


@dataclass
class JobSpec:
    """One composed job, as a launcher receives it."""

    cfg: DictConfig
    output_dir: Path
    task_overrides: List[str] = field(default_factory=list)
    hydra_overrides: List[str] = field(default_factory=list)
    original_cwd: Path = field(default_factory=Path.cwd)
    job_name: str = "cifar_dist"
    multirun: bool = False
    job_num: int = 0
    # The config group choices (data=..., model=...) Hydra composed this job from.
    choices: Dict[str, Optional[str]] = field(default_factory=dict)
    # --config-dir/-path/-name, search path dirs and the user's _target_ modules it was composed from.
    carried: Carried = field(default_factory=Carried)

    @classmethod
    def from_hydra(cls, cfg: DictConfig) -> JobSpec:
        hc = HydraConfig.get()
        return cls(
            cfg=cfg,
            output_dir=Path(hc.runtime.output_dir),
            task_overrides=_override_strings(hc.overrides.task),
            hydra_overrides=_override_strings(hc.overrides.hydra),
            original_cwd=Path(hc.runtime.cwd),
            job_name=hc.job.name,
            multirun=hc.mode == RunMode.MULTIRUN,
            job_num=int(hc.job.get("num", 0) or 0),
            choices=dict(hc.runtime.choices),
            carried=Carried.from_hydra(hc, cfg),
        )

    def child_overrides(self, launcher: str = "local") -> List[str]:
        """Overrides that re-create this job in a child process.

        The child gets the same task overrides (minus any launcher choice),
        the in-process launcher, the user's own ``hydra.*`` overrides minus
        the parent-only ones, and is pinned to this job's output directory
        without writing ``.hydra/`` again. Secrets are masked (a command line
        is readable by others): a tracking URI's ``user:password`` reaches the
        child through MLflow's variables (``tracking.settings.export_credentials``). The engine
        ``engine=auto`` chose here is named, so that every process trains on it (``engines/choice.py``).
        """
        handed_on = [o for o in self.task_overrides if not names_group(o, "launcher")]
        hydra_handed_on = [o for o in self.hydra_overrides if not _is_parent_only(o)]
        secrets = [name for o in handed_on + hydra_handed_on for name in secret_assignments(o)]
        if secrets:  # masked, the ranks would get "<redacted>" as the value: say how to pass it instead
            raise LaunchError(
                f"{', '.join(secrets)}: a value named as a secret would reach the ranks masked, as {MASK}; set it "
                "in the environment instead (launcher.env.NAME, or your shell's, forwarded by name) and read it "
                "there"
            )
        task = chosen_engine_overrides([redact_text(o) for o in handed_on], self.cfg)
        hydra = [redact_text(o) for o in hydra_handed_on]
        return (
            task
            + [f"launcher={launcher}"]
            + hydra
            + [f"hydra.run.dir={quote_override_value(str(self.output_dir))}", "hydra.output_subdir=null"]
        )

    def child_command(self, python: Optional[str] = None, launcher: str = "local") -> List[str]:
        """``python -m cifar_dist <config flags> <child overrides>`` as an argv list: the launch's own
        ``--config-path/--config-dir/--config-name`` (``user_sources.py``), then the overrides."""
        return [
            python or sys.executable,
            "-m",
            "cifar_dist",
            *self.carried.hydra_args(),
            *self.child_overrides(launcher),
        ]


@dataclass
class LaunchResult:
    """What came of a launch: the exit status and, when known, the final metrics."""

    exit_code: int
    metrics: Optional[Dict[str, Any]] = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class Launcher(abc.ABC):
    """Runs composed jobs. Subclasses take their config fields as keyword arguments."""

    # Whether the job runs in an environment the launch builds on the cluster (Azure ML's image, Batch AI's
    # node setup, both with Horovod), not in this one: then what this environment has installed says nothing.
    builds_own_environment = False
    # Whether the job runs in this very process (launcher=local); every other launcher hands it on as a
    # command or job file, which carries no secret (``tracking.settings.handed_on_uri_problems``).
    runs_in_this_process = False
    # What a dry run (``launcher.dry_run=true``) writes instead of starting anything: "command" (the command
    # line that would start the job, printed) or "job" (a cluster job's files, submitted by hand); the dry run's
    # closing line and the sweep summary count them by this name (``sweep_summary.dry_run_line``).
    dry_run_writes = "command"
    # Folders the launcher writes at the top of a run dir (Slurm's ``slurm/``): a folder a user adopts as a run
    # dir has its own entries of these names moved aside first, as the job's outputs (``rundir/owner.py``).
    run_dir_folders: Tuple[str, ...] = ()

    def config_problems(self) -> List[str]:
        """This launcher's bad settings, one phrase each (``launcher.nodes=0 must be >= 1``).

        Checked with the rest of the config before Hydra creates the run dir
        (``validation.validate``), so that every bad value is listed in one
        line and a refused command writes nothing."""
        return []

    def processes(self) -> int:
        """How many training processes the job has (``engine=auto`` chooses by it): one, in this process (a
        launcher outside, such as a user's own mpirun, says so in its environment)."""
        return processes_from_env()

    def gpus_per_process(self) -> Optional[int]:
        """The GPUs the job asks its cluster for each process (``engine=auto``: processes with GPUs train on JAX),
        0 for none; None where the launcher asks for none itself (the processes take what the host shows)."""
        return None

    def engine_problems(self, engine: str) -> List[str]:
        """Why this launcher cannot start processes of ``engine`` (``cfg.engine.name``), one phrase each;
        checked with ``config_problems``. Every launcher: an engine that needs Horovod (horovod) or TensorFlow
        (horovod, tensorflow) needs it where the job runs, and a one-process engine is one process. engine=auto:
        nothing yet."""
        try:
            processes = self.processes()
        except CifarDistError as error:  # an environment that says what this launch cannot be (world.py)
            return [str(error)]
        facts = engine_facts(engine)
        if facts is None:
            return []
        if facts.needs_horovod and not (self.builds_own_environment or horovod_installed()):
            return [
                f"engine={engine}: {missing_hint('horovod')}; or leave engine unset (engine=auto trains without it)"
            ]
        if facts.needs_tensorflow and not (self.builds_own_environment or tensorflow_installed()):
            return [
                f"engine={engine} needs TensorFlow: {missing_hint('tensorflow')}; or use engine=jax, or leave engine "
                "unset (engine=auto trains on JAX)"
            ]
        missing = [p for p in facts.peer_packages if importlib.util.find_spec(p) is None]
        if missing and processes > 1 and not self.builds_own_environment:
            return [
                f"engine={engine} on {processes} processes needs {', '.join(missing)} where the job runs, and "
                f"it is not installed here: pip install {' '.join(missing)} (cifar_dist's mpi extra)"
            ]
        if not facts.multi_process and processes > 1:
            return [
                f"engine={engine} trains in one process, but this launch has {processes}: use engine=jax "
                "(Keras 3) or engine=horovod, or leave engine unset (engine=auto chooses)"
            ]
        return []

    @abc.abstractmethod
    def launch(self, job: JobSpec) -> LaunchResult:
        """Run ``job`` to completion (or submit it) and report the outcome."""

    @classmethod
    def follows_job_in(cls, run_dir: Path, cfg: DictConfig, holder: Optional[str]) -> bool:
        """Asked by the run-dir guard (``cifar_dist/rundir/guard.py``) before Hydra writes into ``run_dir``;
        ``holder`` is the lock record of another process that holds it (None: this process got the lock).
        True: this launch follows the job that holds it (a cluster job its launcher watches again), so it
        goes on without the lock. Raises a ``CifarDistError`` to refuse the launch. Most launchers
        follow nothing: False."""
        return False

    def launch_all(self, jobs: Sequence[JobSpec]) -> List[LaunchResult]:
        """Every point of a sweep batch that uses this launcher with these settings;
        results in the jobs' order. By default one after another; a point that
        cannot be launched (a one-line ``CifarDistError``) is that point's failed
        result, and the others still run."""
        results = []
        for job in jobs:
            try:
                results.append(self.launch(job))
            except CifarDistError as exc:
                log.error("point #%d failed: %s", job.job_num, exc)
                results.append(LaunchResult(exit_code=2, message=str(exc)))
        return results


def chosen_engine_overrides(overrides: List[str], cfg: DictConfig) -> List[str]:
    """``overrides`` naming the engine ``engine=auto`` chose for ``cfg`` (and why), in place of the ``engine=``
    option it had; as given when the engine was named."""
    engine = cfg.get("engine") if isinstance(cfg, DictConfig) else None
    if not isinstance(engine, DictConfig) or not engine.get("why"):
        return overrides
    kept = [o for o in overrides if override_key(o) != "engine" and override_key(o) != "engine.why"]
    return kept + [f"engine={engine.name}", f"engine.why={quote_override_value(str(engine.why))}"]


def _override_strings(node) -> List[str]:
    """Hydra's override strings, resolved as Hydra stores them; written as given when one cannot be
    resolved (``data.path=${oc.env:UNSET}``), so that validation can report it in one line."""
    try:
        return list(node)
    except OmegaConfBaseException:
        return [str(o) for o in OmegaConf.to_container(node, resolve=False)]


def _is_parent_only(override: str) -> bool:
    return any(names_group(override, prefix) for prefix in _PARENT_ONLY_HYDRA_PREFIXES)
