"""The Hydra entry point: compose the config, pick the launcher, run the job."""
from __future__ import annotations

import logging
import sys
from typing import Optional

import hydra
from omegaconf import DictConfig

from cifar_dist.config import register_configs
from cifar_dist.errors import CifarDistError, PointFailed
from cifar_dist.launchers.base import JobSpec, Launcher, in_child_process
from cifar_dist.preflight import check_run_dir
from cifar_dist.redaction import redact_logs
from cifar_dist.results import final_accuracy
from cifar_dist.training.tf_console import quiet_by_default
from cifar_dist.tracking import after_job
from cifar_dist.tracking.settings import export_credentials
from cifar_dist.validation import validate

log = logging.getLogger(__name__)

INTERRUPTED = "interrupted; re-run the same command to resume"
INTERRUPTED_EXIT = 130  # 128 + SIGINT, what a shell reports for Ctrl-C

register_configs()


def select_launcher(cfg: DictConfig) -> Launcher:
    """The configured launcher, or the in-process one inside a launched process."""
    if in_child_process():
        # Never recurse: a process some launcher started is a rank, whatever
        # the config says (its overrides say launcher=local anyway).
        from cifar_dist.launchers.local import LocalLauncher

        return LocalLauncher()
    return hydra.utils.instantiate(cfg.launcher, _convert_="all")


def fail(message: str, code: int) -> None:
    """One line on stderr (and in the job log), then exit: no traceback for user errors."""
    log.debug("failing: %s", message)
    print(f"cifar_dist: error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def record_end(cfg: DictConfig, job: JobSpec, ok: bool, interrupted: bool = False) -> None:
    """Tracking: the launching process marks a failed job's run FAILED, an interrupted one KILLED (ranks never
    do: they would all try)."""
    if not in_child_process():
        after_job(cfg, job.output_dir, ok, interrupted)


def interrupted_exit() -> None:
    """Ctrl-C of the launching process (a run or a whole sweep): one line, status 130, no traceback."""
    print(f"cifar_dist: {INTERRUPTED}", file=sys.stderr, flush=True)
    sys.exit(INTERRUPTED_EXIT)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> Optional[float]:
    """One job in this process (or started from here by its launcher). Its return
    value, the final test accuracy, is what Hydra's sweepers optimise."""
    quiet_by_default()  # TensorFlow's C++ INFO noise, before anything imports it (training/tf_console.py)
    redact_logs()  # Hydra's console and job log: no password of a URI, no secret variable's value
    job = JobSpec.from_hydra(cfg)
    if in_child_process():
        from cifar_dist.launchers.heartbeat import start_from_env

        start_from_env()  # a rank of a multi-rank launch: tell the launcher it is alive
    try:
        check_run_dir(job.output_dir)
        validate(cfg)
        if not in_child_process():
            export_credentials(cfg)  # the ranks' command lines carry the tracking URI without them
        result = select_launcher(cfg).launch(job)
    except CifarDistError as exc:
        record_end(cfg, job, ok=False)
        if job.multirun:  # Hydra records the point FAILED; the sweep's other points still run
            log.error("point #%d: %s", job.job_num, exc)
            raise PointFailed(f"point #{job.job_num}: {exc}") from exc
        fail(str(exc), 2)
    except KeyboardInterrupt:  # Ctrl-C; a sweep's launcher ends the sweep the same way
        result = None
    except BaseException:
        record_end(cfg, job, ok=False)
        raise
    if result is None:  # outside the except block: the interrupted frames are gone (see after_job)
        record_end(cfg, job, ok=False, interrupted=True)
        raise KeyboardInterrupt
    interrupted = result.exit_code == INTERRUPTED_EXIT
    record_end(cfg, job, ok=result.ok, interrupted=interrupted)
    if interrupted:  # the launcher stopped (or detached from) its ranks or cluster job and said how
        log.warning("%s", result.message or INTERRUPTED)
        sys.exit(INTERRUPTED_EXIT)
    if not result.ok:
        log.error("job failed (exit %d): %s", result.exit_code, result.message)
        if job.multirun:
            raise PointFailed(f"point #{job.job_num} failed (exit {result.exit_code}): {result.message}")
        sys.exit(result.exit_code)
    return final_accuracy(result.metrics)
