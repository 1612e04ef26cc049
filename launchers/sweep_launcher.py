"""The Hydra launcher of every sweep (``-m``): it sees all points of a batch at once.

Hydra's sweeper (basic, Optuna, ...) hands ``launch(job_overrides,
initial_job_idx)`` a batch of points. Each point's config is composed as
Hydra's BasicLauncher composes it, and every point is checked before the
first one starts and before Hydra writes into its dir (values, then its run
dir: ``sweep_checks.py``); a refused point fails alone without starting, and
a batch refused whole ends the sweep with exit 2. Then the point's own
``launcher`` decides:

- the in-process launcher (``launcher=local``), or no ``launcher`` group at
  all (any other Hydra app): Hydra's ``run_job`` with the app's task function,
  one after another, exactly as BasicLauncher;
- any other launcher: ``run_job`` with a task function that only builds and
  checks the ``JobSpec`` (so the run dir, its ``.hydra/`` and job log exist as
  for any Hydra job), then the points are grouped by equal launcher config and
  each group's launcher runs all of them with one ``launch_all`` call
  (``mpirun`` k at a time with ``launcher.concurrent=k``, cluster launchers
  submit every point, then watch them together).

Every point gets its ``JobReturn``, in order: ``return_value`` is its final
test accuracy (what an optimising sweeper such as Optuna learns from), a
failed point is FAILED with a one-line ``PointFailed`` that Hydra prints
without a traceback once the whole batch has run. The sweep summary (table,
CSV, plot) is rewritten from the run dirs after every batch, so it exists even
when a point fails or ``hydra/callbacks`` is replaced.

Hydra instantiates launcher plugins only from the ``hydra_plugins`` package:
the class Hydra sees is the subclass in
``hydra_plugins/cifar_dist_launcher/``, whose ``registration.register()``
(called by the app) makes it and its config known without relying on plugin
discovery.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.errors import InstantiationException
from hydra.plugins.launcher import Launcher as HydraLauncher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from cifar_dist.common.errors import CifarDistError, LaunchError
from cifar_dist.common.redaction import redact_logs, redact_text
from cifar_dist.common.results import final_accuracy, read_results
from cifar_dist.common.sweep_errors import PointFailed
from cifar_dist.config.launcher_object import configured_launcher, launcher_key
from cifar_dist.config.options import config_option
from cifar_dist.config.plugin_names import SWEEP_LAUNCHER_CLASS
from cifar_dist.config.validation import validate
from cifar_dist.launchers.base import JobSpec, LaunchResult
from cifar_dist.launchers.local import LocalLauncherConf
from cifar_dist.launchers.sweep_checks import (
    RecordBefore,
    check_points,
    point_label,
    refused_return,
    release_unstarted,
)
from cifar_dist.launchers.sweep_summary import summarize
from cifar_dist.rundir.guard import RunDirGuard
from cifar_dist.rundir.owner import existing_ancestor
from cifar_dist.rundir.preflight import check_run_dir
from cifar_dist.tracking.job_hooks import after_job
from cifar_dist.tracking.settings import export_credentials, job_credentials
from cifar_dist.tracking.sweep_parent import close_sweep

log = logging.getLogger(__name__)


@config_option("hydra/launcher", "cifar_dist")
@dataclass
class SweepLauncherConf:
    _target_: str = SWEEP_LAUNCHER_CLASS


def runs_in_process(config: DictConfig) -> bool:
    """Whether a point runs in this process: the in-process launcher, or no launcher group."""
    target = OmegaConf.select(config, "launcher._target_", default=None)
    return target is None or target == LocalLauncherConf._target_


def prepare_job(cfg: DictConfig) -> JobSpec:
    """Task function of a point another launcher runs: build and check its JobSpec, train nothing (its values were
    validated with the batch, ``sweep_checks.py``: ``validate`` trusts that). As for a single run (``app.run_job``),
    a tracking URI's ``user:password@`` becomes MLflow's variables, which the ranks inherit: their command lines
    carry the URI without it."""
    job = JobSpec.from_hydra(cfg)
    try:
        check_run_dir(job.output_dir)
        validate(cfg)
    except CifarDistError as exc:
        raise PointFailed(f"point #{job.job_num}: {exc}") from exc
    export_credentials(cfg)
    return job


def point_return(ret: JobReturn, job: JobSpec, result: LaunchResult) -> JobReturn:
    """The point's JobReturn once its launcher reported: accuracy, or FAILED with one line."""
    if result.ok:
        ret.status = JobStatus.COMPLETED
        ret.return_value = final_accuracy(result.metrics or read_results(job.output_dir))
    else:
        ret.status = JobStatus.FAILED
        ret.return_value = PointFailed(f"point #{job.job_num} failed (exit {result.exit_code}): {result.message}")
    return ret


def masked(ret: JobReturn) -> JobReturn:
    """The point's JobReturn with secrets masked in its overrides: Hydra writes them to stderr
    ("Error executing job with overrides: [...]") for a failed point; nothing else reads them."""
    ret.overrides = [redact_text(str(o)) for o in ret.overrides or []]
    return ret


def one_set_of_credentials(jobs: Sequence[JobSpec]) -> None:
    """The points of one launch share one environment (one mpirun, one Slurm job array), and so the tracking
    credentials their URIs carry (``export_credentials``): points whose URIs carry different ones are refused in
    one line, rather than all sent the last point's."""
    found = {tuple(sorted(job_credentials(job.cfg).items())) for job in jobs}
    if len(found) > 1:
        raise LaunchError(
            f"points {', '.join(f'#{j.job_num}' for j in jobs)} run in one launch, whose ranks share one environment, "
            "but their tracking.uri carry different credentials; sweep over one server's URI at a time, or give "
            "the credentials in MLflow's variables (MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD)"
        )


class SweepLauncher(HydraLauncher):
    def __init__(self) -> None:
        self.config: Optional[DictConfig] = None
        self.task_function: Optional[TaskFunction] = None
        self.hydra_context: Optional[HydraContext] = None
        self.guard = RunDirGuard()  # the locks of the points' dirs, held while their batch runs
        self.existed: Optional[Path] = None  # the nearest folder of the sweep dir that existed before the sweep
        self.record: Optional[RecordBefore] = None  # the sweep dir's multirun.yaml before the sweep; None once started

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function
        # Before the sweeper creates the sweep dir (and writes multirun.yaml there): a refused sweep removes it, or
        # puts back the multirun.yaml an earlier sweep left there.
        self.existed = existing_ancestor(Path(str(config.hydra.sweep.dir)))
        self.record = RecordBefore.of(Path(str(config.hydra.sweep.dir)))

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        redact_logs()  # "#0 : tracking.uri=https://user:password@..." shows no password
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info("Launching %d jobs", len(job_overrides))
        points = [self.sweep_config(list(o), initial_job_idx + i) for i, o in enumerate(job_overrides)]
        try:
            refused = check_points(points, self.guard, sweep_dir, self.existed or sweep_dir, self.record)
            self.record = None  # the sweep has started: the record is its own now
            for i, why in sorted(refused.items()):
                log.error("%s: %s", point_label(points[i]), why)
            return self.launch_points(points, sweep_dir, refused)
        except KeyboardInterrupt:  # Ctrl-C: the sweep's parent run ends KILLED, then the whole sweep ends
            close_sweep(sweep_dir, [], interrupted=True)
            raise
        finally:
            release_unstarted(points, self.guard)

    def launch_points(
        self, points: List[DictConfig], sweep_dir: Path, refused: Optional[Dict[int, str]] = None
    ) -> Sequence[JobReturn]:
        """Every point of a batch: in-process ones one by one, the others by their launcher, then the summary;
        a ``refused`` point (sweep_checks.py) is FAILED without starting."""
        returns: List[Optional[JobReturn]] = [None] * len(points)
        groups: Dict[str, List[int]] = {}
        for i, config in enumerate(points):
            if i in (refused or {}):
                returns[i] = refused_return(config, refused[i])
            elif runs_in_process(config):
                returns[i] = self.run(config, self.task_function)
            else:
                groups.setdefault(launcher_key(config.launcher), []).append(i)  # equal settings: one launch_all
        for indices in groups.values():
            for i, ret in zip(indices, self.launch_group([points[i] for i in indices])):
                returns[i] = ret
        if any("launcher" in config for config in points):
            summarize(sweep_dir)  # cumulative: every point under the sweep dir so far
        return [masked(ret) for ret in returns if ret is not None]

    def sweep_config(self, overrides: List[str], idx: int) -> DictConfig:
        """One point's config, composed as Hydra's BasicLauncher composes it."""
        assert self.hydra_context is not None and self.config is not None
        log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
        config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(config):
            config.hydra.job.id = idx
            config.hydra.job.num = idx
        return config

    def run(self, config: DictConfig, task_function: Any) -> JobReturn:
        """Hydra's run_job for one point (run dir, .hydra/, job log, callbacks), as BasicLauncher."""
        assert self.hydra_context is not None and self.config is not None
        ret = run_job(
            hydra_context=self.hydra_context,
            task_function=task_function,
            config=config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        redact_logs()
        return ret

    def launch_group(self, configs: List[DictConfig]) -> List[JobReturn]:
        """Points with one launcher config: prepare each, then one ``launch_all`` for those that could be."""
        prepared = [self.run(config, prepare_job) for config in configs]
        ready = [i for i, ret in enumerate(prepared) if ret.status == JobStatus.COMPLETED]
        if not ready:
            return prepared
        jobs: List[JobSpec] = [prepared[i].return_value for i in ready]

        try:
            one_set_of_credentials(jobs)
            launcher = configured_launcher(configs[ready[0]])  # the object the points' validation built
            results = launcher.launch_all(jobs)
        except (CifarDistError, InstantiationException) as exc:
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            log.error("points %s failed: %s", ", ".join(f"#{j.job_num}" for j in jobs), message)
            results = [LaunchResult(exit_code=2, message=message) for _ in jobs]
        except KeyboardInterrupt:  # Ctrl-C: every point of this launch KILLED, then the sweep ends
            for i, job in zip(ready, jobs):
                after_job(configs[i], job.output_dir, ok=False, interrupted=True)
            raise

        for i, job, result in zip(ready, jobs, results):
            after_job(configs[i], job.output_dir, result.ok)  # tracking: a failed point's run FAILED
            prepared[i] = point_return(prepared[i], job, result)
        return prepared
