"""The Hydra entry point: compose the config, pick the launcher, run the job."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import traceback
from pathlib import Path
from typing import ContextManager, List, Optional

import hydra
from omegaconf import DictConfig

from cifar_dist.all_options import register_configs
from cifar_dist.common.atomic_files import disk_full
from cifar_dist.common.console_line import OpenLineTracker, end_open_line
from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.redaction import RedactingWriter, redact_logs, redact_text
from cifar_dist.common.results import final_accuracy
from cifar_dist.common.sweep_errors import PointFailed
from cifar_dist.config.files import holds_options, local_dir
from cifar_dist.config.hydra_compat import let_hydra_parse_on_python_314
from cifar_dist.config.launcher_object import configured_launcher
from cifar_dist.config.override_check import (
    command_line_problem,
    parsed_command_line,
    primary_searchpath,
    replace_overrides,
)
from cifar_dist.config.validation import validate
from cifar_dist.launchers.base import JobSpec, Launcher, in_child_process
from cifar_dist.launchers.ranks.heartbeat import start_from_env
from cifar_dist.launchers.sweep_summary import dry_run_line
from cifar_dist.launchers.user_sources import with_searchpath
from cifar_dist.rundir.owner import only_scaffolding, remove_if_created_here
from cifar_dist.rundir.preflight import check_run_dir
from cifar_dist.saved_run import from_saved_run
from cifar_dist.tracking.job_hooks import after_job
from cifar_dist.tracking.settings import export_credentials
from cifar_dist.training.engines.choice import resolve_engine
from cifar_dist.training.process.tf_console import quiet_by_default

log = logging.getLogger(__name__)

INTERRUPTED = "interrupted; re-run the same command to resume"
INTERRUPTED_EXIT = 130  # 128 + SIGINT, what a shell reports for Ctrl-C

register_configs()


def select_launcher(cfg: DictConfig) -> Launcher:
    """The configured launcher (the object validation built: ``config/launcher_object.py``), or the in-process
    one inside a launched process."""
    if in_child_process():
        # Never recurse: a process some launcher started is a rank, whatever
        # the config says (its overrides say launcher=local anyway).
        from cifar_dist.launchers.local import LocalLauncher

        return LocalLauncher()
    return configured_launcher(cfg)


def fail(message: str, code: int, run_dir: Optional[Path] = None) -> None:
    """One line on stderr, then exit: no traceback for user errors.

    A run dir this command created and the job wrote nothing into but its log
    is removed (a refused command, or an error found at the start such as a
    missing data path, leaves nothing behind; the line on the console says
    why); any other keeps the reason in its log (a full disk or a diverged
    loss keeps its checkpoints)."""
    message = redact_text(message)  # it may quote an override (a typo's tracking.urii=https://user:password@...)
    end_open_line()  # after a progress bar, the error starts a line of its own (console_line.py)
    if run_dir is None or not (only_scaffolding(run_dir, with_log=True) and remove_if_created_here(run_dir)):
        to_log_file_only(logging.ERROR, "stopped: %s", message)
    print(f"cifar_dist: error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def to_log_file_only(level: int, msg: str, *args: object) -> None:
    """A record for the job log (Hydra's file handler) that the terminal, which gets its own line, does not repeat."""
    record = log.makeRecord(log.name, level, __file__, 0, msg, args, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def written_since(run_dir: Path, started: float) -> List[str]:
    """The run dir's entries this job wrote or changed (folders with a slash; dot-files are bookkeeping)."""
    if not run_dir.is_dir():
        return []
    return [
        p.name + ("/" if p.is_dir() else "")
        for p in sorted(run_dir.iterdir())
        if not p.name.startswith(".") and p.stat().st_mtime >= started
    ]


def say_engine(cfg: DictConfig) -> None:
    """The job log's line: which engine the job trains on, and why (engine=auto's choice: engines/choice.py)."""
    engine, launcher = cfg.get("engine"), cfg.get("launcher")
    if isinstance(launcher, DictConfig) and launcher.get("dry_run"):
        return  # nothing trains; a dry run's log stays empty (end_of_dry_run removes its scaffolding)
    if isinstance(engine, DictConfig) and cfg.get("task") is not None and cfg.task.get("name") == "train":
        why = engine.get("why") or f"engine={engine.name} as configured"
        to_log_file_only(logging.INFO, "engine: %s (%s)", engine.name, why)  # the console has the engine's own line


def end_of_job(cfg: DictConfig, job: JobSpec, started: float) -> None:
    """The closing line of a run or an evaluation: where its outputs are, file by file."""
    if in_child_process() or job.multirun or cfg.launcher.get("dry_run"):
        return
    wrote = written_since(job.output_dir, started)
    if wrote:
        print(f"cifar_dist: wrote {job.output_dir}/: {', '.join(wrote)}", flush=True)


def end_of_dry_run(cfg: DictConfig, job: JobSpec) -> None:
    """The closing line of a dry run; one that wrote nothing but the run dir's scaffolding leaves no run dir behind."""
    if in_child_process() or job.multirun or not cfg.launcher.get("dry_run"):
        return  # a sweep's summary says it for all its points
    if only_scaffolding(job.output_dir):
        remove_if_created_here(job.output_dir)
    print(dry_run_line([select_launcher(cfg).dry_run_writes]), flush=True)


def record_end(cfg: DictConfig, job: JobSpec, ok: bool, interrupted: bool = False) -> None:
    """Tracking: the launching process marks a failed job's run FAILED, an interrupted one KILLED (ranks never
    do: they would all try)."""
    if not in_child_process():
        after_job(cfg, job.output_dir, ok, interrupted)


def is_disguised_interrupt(exc: BaseException) -> bool:
    """A Ctrl-C that arrived while C code called back into Python (TensorFlow's nest utilities importing a
    module): CPython reports it as SystemError ("returned a result with an exception set"), the KeyboardInterrupt
    as its cause; the C++ caller may then raise its own error (Flatten: a TypeError) with that SystemError as its
    context, which tf_keras re-raises ``from None`` (the context is kept)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, SystemError) and isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def interrupted_exit() -> None:
    """Ctrl-C of the launching process (a run or a whole sweep): one line, status 130, no traceback."""
    end_open_line()
    print(f"cifar_dist: {INTERRUPTED}", file=sys.stderr, flush=True)
    sys.exit(INTERRUPTED_EXIT)


def with_local_options(argv: List[str]) -> List[str]:
    """``argv`` with ``conf/local`` on Hydra's search path when it holds options of the user's own
    (``conf/local/model/mine.yaml``: ``model=mine``). Hydra's primary config cannot put it there for every
    primary config that includes ours, so the command line does; Hydra records it like any search path,
    and the launchers carry it to every rank and job (user_sources.py). Without such options: ``argv`` as given."""
    local = local_dir()
    args = parsed_command_line(argv) if holds_options(local) else None
    if args is None:
        return argv
    carried = with_searchpath(list(args.overrides), local, primary_searchpath(args))
    replaced = replace_overrides(argv, args.overrides, carried)
    return argv if replaced is None else replaced


def main() -> None:
    """``python -m cifar_dist [overrides]``: a run's saved config as the primary one becomes that run's
    overrides (saved_run.py), ``conf/local``'s options join the search path, a misspelt option or key is
    refused in one line before Hydra composes or writes anything (override_check.py), then Hydra runs the
    job. A launched rank skips these: its launcher did them, and its overrides say so."""
    let_hydra_parse_on_python_314()  # before Hydra builds its argument parser (here, or in @hydra.main)
    if not in_child_process():
        try:
            sys.argv[1:] = from_saved_run(sys.argv[1:])
        except CifarDistError as exc:
            fail(str(exc), 2)
        sys.argv[1:] = with_local_options(sys.argv[1:])
        problem = command_line_problem(sys.argv[1:])
        if problem:
            fail(problem, 2)
    with (
        contextlib.redirect_stdout(OpenLineTracker(sys.stdout)),
        contextlib.redirect_stderr(RedactingWriter(sys.stderr)),  # Hydra's own errors quote the override
        config_printout_masked(sys.argv[1:]),
    ):
        run_job()


def config_printout_masked(argv: List[str]) -> ContextManager:
    """Hydra's ``--cfg``/``--info`` print the composed config to stdout: masked as the run dir's saved config is
    (``redaction.redact_yaml``: secret-named keys, a tracking URI's password, query tokens), ``--package``'s node
    by its full path."""
    args = parsed_command_line(argv)
    if args is None or not (args.cfg or args.info):
        return contextlib.nullcontext()
    package = "" if args.package in (None, "_global_") else str(args.package)
    return contextlib.redirect_stdout(RedactingWriter(sys.stdout, config_at=package))


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def run_job(cfg: DictConfig) -> Optional[float]:
    """One job in this process (or started from here by its launcher). Its return
    value, the final test accuracy, is what Hydra's sweepers optimise."""
    quiet_by_default()  # TensorFlow's C++ INFO noise, before anything imports it (training/process/tf_console.py)
    redact_logs()  # Hydra's console and job log: no password of a URI, no secret variable's value
    job = JobSpec.from_hydra(cfg)
    if in_child_process():
        start_from_env()  # a rank of a multi-rank launch: tell the launcher it is alive
    started = time.time() - 1  # mtimes may be rounded to the second (network file systems)
    try:
        check_run_dir(job.output_dir)
        resolve_engine(cfg, job.output_dir)  # engine=auto, where no callback chose it yet (another Hydra launcher)
        validate(cfg)  # a rank's one validation; the launching process's preflight did it (the mark says so)
        if not in_child_process():
            say_engine(cfg)
            export_credentials(cfg)  # the ranks' command lines carry the tracking URI without them
        result = select_launcher(cfg).launch(job)
    except CifarDistError as exc:
        record_end(cfg, job, ok=False)
        if job.multirun:  # Hydra records the point FAILED; the sweep's other points still run
            log.error("point #%d: %s", job.job_num, exc)
            raise PointFailed(f"point #{job.job_num}: {exc}") from exc
        fail(str(exc), 2, job.output_dir)
    except OSError as exc:  # ENOSPC outside the trainer's own writes (which raise DiskFullError above)
        record_end(cfg, job, ok=False)
        full = disk_full(exc, Path(exc.filename or job.output_dir))
        if full is None or job.multirun:
            raise
        fail(str(full), 2)
    except KeyboardInterrupt:  # Ctrl-C; a sweep's launcher ends the sweep the same way
        result = None
    except BaseException as exc:
        if is_disguised_interrupt(exc):
            result = None  # handled below, as a Ctrl-C
        else:
            record_end(cfg, job, ok=False)
            # The terminal gets Hydra's traceback; the run's log keeps what failed too.
            to_log_file_only(logging.ERROR, "failed: %s", "".join(traceback.format_exception(exc)).rstrip())
            raise
    if result is None:  # outside the except block: the interrupted frames are gone (see after_job)
        record_end(cfg, job, ok=False, interrupted=True)
        raise KeyboardInterrupt
    interrupted = result.exit_code == INTERRUPTED_EXIT
    record_end(cfg, job, ok=result.ok, interrupted=interrupted)
    if interrupted:  # the launcher stopped (or detached from) its ranks or cluster job and said how
        log.warning("%s", result.message or INTERRUPTED)
        sys.exit(INTERRUPTED_EXIT)
    end_of_dry_run(cfg, job)
    if not result.ok:
        log.error("job failed (exit %d): %s", result.exit_code, result.message)
        if job.multirun:
            raise PointFailed(f"point #{job.job_num} failed (exit {result.exit_code}): {result.message}")
        sys.exit(result.exit_code)
    end_of_job(cfg, job, started)
    return final_accuracy(result.metrics)
