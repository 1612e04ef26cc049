"""``launcher=azureml``: the job as an Azure ML v2 command job with MPI
distribution, submitted and followed through azure-ai-ml's ``MLClient``.

Flow per job: resolve settings -> snapshot the source (cached by content hash)
-> write job.yml (+ the environment's Dockerfile, + compute.yml) into the run
dir and load it with the SDK's own ``load_job`` -> (dry run: print the az ml
commands, stop) -> ensure the compute -> submit (or find the job this run dir
already submitted) -> the ClusterLauncher's loop follows every job.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

import yaml

from cifar_dist.common.atomic_files import atomic_write_text
from cifar_dist.launchers.azure.credentials import make_credential
from cifar_dist.launchers.azure.job_names import job_name
from cifar_dist.launchers.azureml.client import Workspace, import_sdk
from cifar_dist.launchers.azureml.config import Settings, VmPriority, conf_from_kwargs, resolve_settings
from cifar_dist.launchers.azureml.job import (
    COMPUTE_FILE,
    ENVIRONMENT_DIR,
    JOB_FILE,
    LOCAL_SUBDIR,
    az_commands,
    compute_document,
    dockerfile,
    job_document,
)
from cifar_dist.launchers.azureml.monitor import AzureMLJob, job_status
from cifar_dist.launchers.azureml.snapshot import source_snapshot
from cifar_dist.launchers.base import JobSpec, LaunchError, LaunchResult
from cifar_dist.launchers.cluster_base import ClusterLauncher

log = logging.getLogger(__name__)


@dataclass
class PreparedJob:
    """One job as written into its run dir and loaded back by the SDK."""

    spec: JobSpec
    settings: Settings
    name: str
    job_file: Path
    compute_file: Optional[Path]
    loaded: Any  # what azure.ai.ml.load_job made of job_file (a command job with MpiDistribution)
    task: str


class AzureMLLauncher(ClusterLauncher):
    run_dir_folders = (LOCAL_SUBDIR,)  # azureml/: job.yml, the environment's build context, the job's logs
    builds_own_environment = True  # the job's image builds Horovod (job.dockerfile), or names a registered one

    def __init__(self, **kwargs):
        self.conf = conf_from_kwargs(kwargs)

    def processes(self) -> int:
        return self.conf.instance_count * self.conf.process_count_per_instance

    # --- the job as data -----------------------------------------------------------

    def prepare(self, job: JobSpec) -> PreparedJob:
        # The SDKs log every request at INFO; keep the user's log about the job. urllib3
        # logs each URL at DEBUG, query string included, and SAS links carry their
        # signature there: even with hydra.verbose, no signature goes into a log.
        logging.getLogger("azure").setLevel(logging.WARNING)
        logging.getLogger("urllib3").setLevel(logging.INFO)
        settings = resolve_settings(self.conf, os.environ)
        task = _task_name(job)
        if task == "train" and self.conf.vm_priority == VmPriority.low_priority:
            _warn_if_requeue_cannot_resume(job)
        name = job_name(job.output_dir, job.job_num)
        shipped = job.carried.shipped("azureml")  # refused in one line when something cannot go along
        code = source_snapshot(Path(self.conf.cache_dir).expanduser(), shipped.files)
        out = job.output_dir / LOCAL_SUBDIR
        out.mkdir(parents=True, exist_ok=True)
        if not self.conf.environment:
            atomic_write_text(out / ENVIRONMENT_DIR / "Dockerfile", dockerfile(settings))
        doc = job_document(settings, job, name, code, _model_input(job) if task == "evaluate" else None, shipped)
        job_file = out / JOB_FILE
        _write_yaml(job_file, doc)
        compute_file = None
        if self.conf.create_compute:
            compute_file = out / COMPUTE_FILE
            _write_yaml(compute_file, compute_document(settings))
        return PreparedJob(job, settings, name, job_file, compute_file, _load_job(job_file), task)

    def report_dry_run(self, prepared: PreparedJob) -> LaunchResult:
        written = [prepared.job_file] + ([prepared.compute_file] if prepared.compute_file else [])
        for path in written:
            print(f"Dry run: wrote {path} (valid for azure-ai-ml's load_job; nothing was sent).")
        print("The same job by hand:")
        commands = az_commands(
            prepared.settings, prepared.name, prepared.job_file, prepared.compute_file, prepared.spec.output_dir
        )
        for command in commands:
            print("  " + command)
        return LaunchResult(exit_code=0, message=f"dry run: wrote {prepared.job_file}")

    # --- remote ------------------------------------------------------------------------

    def submit(self, prepared: PreparedJob) -> AzureMLJob:

        workspace = Workspace(prepared.settings, make_credential(self.conf.credential))
        try:
            existing = workspace.get_job(prepared.name)
            if existing is not None:
                log.info(
                    "job %s of this run dir already exists (%s): following it instead of submitting again",
                    prepared.name,
                    job_status(existing),
                )
            else:
                workspace.ensure_compute(prepared.compute_file)
                existing = workspace.create_job(prepared.loaded)
                conf = self.conf
                log.info(
                    "submitted Azure ML job %s to compute %s (%d node(s) x %d process(es)); outputs: run_dir",
                    prepared.name,
                    prepared.settings.compute,
                    conf.instance_count,
                    conf.process_count_per_instance,
                )
        except BaseException:
            workspace.close()
            raise
        followed = AzureMLJob(
            workspace=workspace,
            name=prepared.name,
            output_dir=prepared.spec.output_dir,
            on_interrupt=self.conf.on_interrupt.value,
            stream_output=self.conf.stream_output,
            log_tail_lines=self.conf.log_tail_lines,
            task=prepared.task,
        )
        followed.report(job_status(existing))
        return followed


def _warn_if_requeue_cannot_resume(job: JobSpec) -> None:
    """A requeued job (preempted low-priority node) runs again in the same outputs;
    only trainer.resume=auto both starts fresh and resumes there."""
    trainer = job.cfg.get("trainer")
    resume = str(trainer.get("resume", "auto")).lower() if trainer is not None else "auto"
    if resume != "auto":
        log.warning(
            "trainer.resume=%s on low-priority VMs: a job requeued after preemption runs again in the same "
            "outputs and will %s; use trainer.resume=auto",
            resume,
            "refuse to touch its checkpoints" if resume == "false" else "fail on its first start (nothing to resume)",
        )


def _task_name(job: JobSpec) -> str:
    task = job.cfg.get("task")
    return str(task.get("name")) if task is not None and task.get("name") else "train"


def _model_input(job: JobSpec) -> Dict[str, str]:
    """task=evaluate: evaluate.model as the job's input: an azureml:// URI (an earlier
    job's outputs) as is, a local .h5 (.keras) file or run dir uploaded by the SDK."""
    model = str(job.cfg.evaluate.model)
    if model.startswith(("azureml:", "https:", "wasbs:", "abfss:")):
        return {"type": "uri_file" if model.endswith((".h5", ".keras")) else "uri_folder", "path": model}
    path = Path(model).expanduser()
    path = path if path.is_absolute() else job.original_cwd / path
    if not path.exists():
        raise LaunchError(
            f"evaluate.model={model}: no such file or directory; point it at a local .h5 file or run dir, "
            "or at an earlier Azure ML job's outputs (azureml://jobs/<name>/outputs/run_dir)"
        )
    return {"type": "uri_file" if path.is_file() else "uri_folder", "path": str(path.resolve())}


def _write_yaml(path: Path, doc: Dict[str, Any]) -> None:
    header = "# Written by cifar_dist's Azure ML launcher; `az ml` reads it as is.\n"
    atomic_write_text(path, header + yaml.safe_dump(doc, sort_keys=False, width=1 << 16))


def _load_job(job_file: Path) -> Any:
    """The SDK's own reading of job.yml: what ``az ml job create --file`` would submit."""
    # lazy: azure-ai-ml's schema library (the azure extra)
    from marshmallow.exceptions import ValidationError

    try:
        return import_sdk().load_job(job_file)
    except ValidationError as exc:
        detail = " ".join(str(exc).split())[:400]
        raise LaunchError(f"azure-ai-ml rejects {job_file}: {detail}") from None
