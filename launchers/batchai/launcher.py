"""``launcher=batchai``: the tutorial's ~10 az commands and hand-written job.json as one launch.

Flow: resolve settings -> stage the wheel, the node config and the entry
script locally -> build the job and check it against the shipped schema ->
(dry run: write job.json, print the az commands, stop) -> ensure workspace,
experiment, cluster, share -> upload what changed -> submit (or find the job
this run dir already submitted) -> follow it. As a ``ClusterLauncher`` it
submits every point of a sweep first, then follows all of them in one loop.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from cifar_dist.common.atomic_files import atomic_write_text
from cifar_dist.common.engine_facts import engine_facts
from cifar_dist.launchers.azure.credentials import make_credential
from cifar_dist.launchers.azure.errors import azure_errors
from cifar_dist.launchers.azure.job_names import job_name
from cifar_dist.launchers.base import JobSpec, LaunchError, LaunchResult
from cifar_dist.launchers.batchai.client import STORAGE_AUTH_HINT, BatchAIService
from cifar_dist.launchers.batchai.config import Settings, conf_from_kwargs, resolve_settings
from cifar_dist.launchers.batchai.job import (
    ShareLayout,
    az_cluster_command,
    az_cluster_file,
    az_commands,
    az_job_file,
    build_cluster_body,
    build_job_body,
    check_names,
    ssh_public_key,
)
from cifar_dist.launchers.batchai.monitor import LOCAL_SUBDIR, JobFollower
from cifar_dist.launchers.batchai.schema import validate_cluster_file, validate_job_file
from cifar_dist.launchers.batchai.scoring import ScoringPlan, apply_to_node_config, missing_on_share, plan_scoring
from cifar_dist.launchers.batchai.staging import Wheel, node_entry_source, node_job_config, package_wheel
from cifar_dist.launchers.batchai.storage import FileShare, storage_client_kwargs
from cifar_dist.launchers.cluster_base import ClusterJob, ClusterLauncher
from cifar_dist.launchers.user_sources import Shipped
from cifar_dist.tracking.settings import node_credentials

log = logging.getLogger(__name__)


@dataclass
class StagedJob:
    """Everything one launch prepared locally, before anything remote happens."""

    settings: Settings
    layout: ShareLayout
    wheel: Wheel
    uploads: Dict[str, Path]  # path on the share -> local file
    job_file: Path  # job.json in the run dir (the key as a placeholder or Key Vault reference)
    output_dir: Path  # the run dir the job's outputs are fetched into
    scoring: Optional[ScoringPlan] = None  # task=evaluate: the model (and images) on the share
    secrets: Dict[str, str] = field(default_factory=dict)  # the job's secret variables (tracking credentials)
    shipped: Shipped = field(default_factory=Shipped)  # the user's config dirs and modules, among the uploads


class BatchAIJob(ClusterJob):
    """A submitted job as ``cluster.watch`` follows it."""

    def __init__(self, follower: JobFollower, credential):
        self.name = follower.name
        self.output_dir = follower.output_dir
        self._follower = follower
        self._credential = credential

    def poll(self) -> Optional[LaunchResult]:
        return self._follower.poll()

    def interrupt(self) -> LaunchResult:
        return self._follower.interrupt()

    def close(self) -> None:
        self._follower.service.close()
        close = getattr(self._credential, "close", None)
        if close is not None:
            close()


class BatchAILauncher(ClusterLauncher):
    run_dir_folders = (LOCAL_SUBDIR,)  # batchai/: job.json's companions, the streamed output
    builds_own_environment = True  # the nodes' setup task installs Horovod (horovodSettings)

    def __init__(self, **kwargs):
        self.conf = conf_from_kwargs(kwargs)

    def processes(self) -> int:
        return self.conf.process_count or self.conf.node_count

    def engine_problems(self, engine: str) -> List[str]:
        """Batch AI (retired in 2019) runs Horovod's job type only, whose nodes get Horovod and no JAX; no JAX
        engine is offered on it."""
        facts = engine_facts(engine)
        if facts is not None and facts.needs_jax:
            return [
                "launcher=batchai runs Batch AI's Horovod jobs (horovodSettings) only; use engine=horovod, "
                f"or launcher=azureml / launcher=slurm for engine={engine}"
            ]
        return super().engine_problems(engine)

    def prepare(self, job: JobSpec) -> StagedJob:
        # The SDKs log every request at INFO; keep the user's log about the job.
        logging.getLogger("azure").setLevel(logging.WARNING)
        return self.stage(job)

    def report_dry_run(self, prepared: StagedJob) -> LaunchResult:
        return self._dry_run(prepared)

    # --- local preparation ------------------------------------------------------------

    def stage(self, job: JobSpec) -> StagedJob:
        conf = self.conf
        settings = resolve_settings(conf, os.environ, submit=not conf.dry_run)
        wheel = package_wheel(conf.package, Path(conf.cache_dir).expanduser())
        layout = ShareLayout(
            share=conf.share,
            base=settings.share_dir,
            job=job_name(job.output_dir, job.job_num),
            wheel=f"{settings.share_dir}/{wheel.share_path}",
        )
        check_names(settings, layout)
        shipped = job.carried.shipped("batchai")  # refused in one line when something cannot go along
        scoring = plan_scoring(job.cfg, settings, job.original_cwd)
        _warn_if_requeue_cannot_resume(job.cfg, conf)

        local = job.output_dir / LOCAL_SUBDIR
        local.mkdir(parents=True, exist_ok=True)
        config_file = local / Path(layout.config_file).name
        atomic_write_text(config_file, node_job_config(apply_to_node_config(job.cfg, scoring), job.choices))
        entry_file = local / Path(layout.entry_file).name
        atomic_write_text(entry_file, node_entry_source())

        secrets = node_credentials(job.cfg)
        doc = az_job_file(build_job_body(settings, layout, reveal_key=False, secrets=secrets, shipped=shipped))
        validate_job_file(doc)
        job_file = job.output_dir / "job.json"
        atomic_write_text(job_file, json.dumps(doc, indent=2) + "\n")
        uploads = {
            layout.wheel: wheel.path,
            layout.config_file: config_file,
            layout.entry_file: entry_file,
            **{f"{layout.job_dir}/{rel}": local for rel, local in shipped.files.items()},
        }
        if scoring is not None:
            uploads.update(scoring.uploads)
            for item in scoring.items:
                log.info("scoring job: %s is %s on the nodes", item.origin, item.shown)
        return StagedJob(settings, layout, wheel, uploads, job_file, job.output_dir, scoring, secrets, shipped)

    def _dry_run(self, staged: StagedJob) -> LaunchResult:
        commands = az_commands(staged.settings, staged.layout, staged.job_file, staged.uploads)
        if self.conf.create_cluster:
            # The cluster a real launch would create if it does not exist yet.
            settings = staged.settings
            doc = az_cluster_file(build_cluster_body(settings, self.conf.node_count, ssh_public_key(settings)))
            validate_cluster_file(doc)
            cluster_file = staged.job_file.with_name("cluster.json")
            atomic_write_text(cluster_file, json.dumps(doc, indent=2) + "\n")
            print(f"Dry run: wrote {cluster_file} (valid against the Batch AI 2018-05-01 cluster schema).")
            commands.insert(0, az_cluster_command(settings, cluster_file) + "  # unless it exists")
        print(f"Dry run: wrote {staged.job_file} (valid against the Batch AI 2018-05-01 Horovod job schema).")
        print("The same job by hand (the storage key comes from $AZURE_BATCHAI_STORAGE_KEY, as for the launcher):")
        for command in commands:
            print("  " + command)
        return LaunchResult(exit_code=0, message=f"dry run: wrote {staged.job_file}")

    # --- remote -------------------------------------------------------------------------

    def submit(self, staged: StagedJob) -> BatchAIJob:
        """Ensure everything the job needs exists remotely, then submit it (once per run dir)."""

        conf, settings, layout = self.conf, staged.settings, staged.layout
        key = settings.storage_key
        storage_kwargs = storage_client_kwargs(conf)
        credential = make_credential(conf.credential)
        service = BatchAIService(settings, credential)
        share = FileShare(settings.file_endpoint, settings.storage_account, key, conf.share, **storage_kwargs)
        try:
            service.ensure_workspace()
            service.ensure_experiment()
            existing = service.get_job(layout.job)
            if existing is not None:
                log.info(
                    "job %s of this run dir already exists (%s): following it instead of submitting again",
                    layout.job,
                    existing.execution_state,
                )
            else:
                with azure_errors(f"read share {conf.share}", key.reveal(), STORAGE_AUTH_HINT):
                    for item in staged.scoring.items if staged.scoring is not None else ():
                        why = missing_on_share(share, item)
                        if why:
                            raise LaunchError(
                                f"{item.key}: {item.shown} ({item.origin}): {why}; point it at a saved model "
                                "or training run dir on the share, or at a local file to upload"
                            )
                service.ensure_cluster(conf.node_count)
                with azure_errors(f"upload the job's files to share {conf.share}", key.reveal(), STORAGE_AUTH_HINT):
                    share.ensure_share()
                    share.ensure_dir(layout.job_dir)
                    for remote, local in staged.uploads.items():
                        share.upload(remote, local.read_bytes())
                body = build_job_body(settings, layout, reveal_key=True, secrets=staged.secrets, shipped=staged.shipped)
                service.create_job(layout.job, body, key.reveal())
                log.info(
                    "submitted Batch AI job %s to cluster %s (%d node(s)); outputs go to share %s/%s",
                    layout.job,
                    settings.cluster,
                    conf.node_count,
                    conf.share,
                    layout.run_dir,
                )
        except BaseException:
            service.close()
            raise
        follower = JobFollower(
            service=service,
            share=share,
            layout=layout,
            output_dir=staged.output_dir,
            on_interrupt=conf.on_interrupt.value,
            poll_interval_s=conf.poll_interval_s,
            stream_output=conf.stream_output,
            stderr_tail_lines=conf.stderr_tail_lines,
            scale_down=conf.scale_down,
            storage_kwargs=storage_kwargs,
            task="evaluate" if staged.scoring is not None else "train",
        )
        return BatchAIJob(follower, credential)


def _warn_if_requeue_cannot_resume(cfg, conf) -> None:
    """A requeued training job (preempted low-priority node) restarts in the same run dir
    on the share; only trainer.resume=auto both starts fresh and resumes."""
    trainer = cfg.get("trainer")
    task = cfg.get("task")
    if task is not None and task.get("name") == "evaluate":
        return
    resume = str(trainer.get("resume", "auto")).lower() if trainer is not None else "auto"
    if str(getattr(conf.vm_priority, "value", conf.vm_priority)) == "lowpriority" and resume != "auto":
        log.warning(
            "trainer.resume=%s on low-priority VMs: a job requeued after preemption restarts in the same run dir "
            "and will %s; use trainer.resume=auto",
            resume,
            "refuse to touch its checkpoints" if resume == "false" else "fail on its first start (nothing to resume)",
        )
