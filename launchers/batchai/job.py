"""The Batch AI job, as plain data: its name, where its files live on the share,
its REST body, the az CLI's job.json and the equivalent ``az`` command.

Pure functions, no Azure SDK: the same dict is written by a dry run, checked
against the shipped schema and (turned into SDK models) sent by a real launch,
so what a user reviews is what gets submitted.
"""

from __future__ import annotations

import datetime
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from cifar_dist.common.redaction import MASK
from cifar_dist.launchers.base import LaunchError
from cifar_dist.launchers.batchai.config import SchedulingPriority, Settings, VmPriority
from cifar_dist.launchers.ranks.rank_env import rank_environment
from cifar_dist.launchers.user_sources import Shipped

JOB_FILE_SCHEMA = "https://raw.githubusercontent.com/Azure/BatchAI/master/schemas/2018-05-01/job.json"
CLUSTER_FILE_SCHEMA = "https://raw.githubusercontent.com/Azure/BatchAI/master/schemas/2018-05-01/cluster.json"
# What the az CLI replaces with --storage-account-key.
KEY_PLACEHOLDER = "<AZURE_BATCHAI_STORAGE_KEY>"
# Batch AI sets this on the nodes; written without braces so OmegaConf never
# mistakes it for an interpolation.
MOUNT_ROOT = "$AZ_BATCHAI_JOB_MOUNT_ROOT"
CONFIG_NAME = "job_config"  # <CONFIG_NAME>.yaml, composed by Hydra on the nodes
ENTRY_NAME = "node_entry.py"
_NAME_RE = re.compile(r"^[-\w]{1,64}$", re.ASCII)


@dataclass(frozen=True)
class ShareLayout:
    """Where one job's files live, relative to the share root; the node sees
    the share at ``$AZ_BATCHAI_JOB_MOUNT_ROOT/<share>``."""

    share: str
    base: str  # the experiment's folder
    job: str
    wheel: str  # packages/<content hash>/<wheel file name>

    @property
    def job_dir(self) -> str:
        return f"{self.base}/jobs/{self.job}"

    @property
    def config_file(self) -> str:
        return f"{self.job_dir}/{CONFIG_NAME}.yaml"

    @property
    def entry_file(self) -> str:
        return f"{self.job_dir}/{ENTRY_NAME}"

    @property
    def run_dir(self) -> str:
        """The Hydra run dir on the nodes: training writes its outputs here."""
        return f"{self.job_dir}/outputs"

    @property
    def logs_dir(self) -> str:
        return f"{self.base}/logs"

    def on_node(self, path: str) -> str:
        return f"{MOUNT_ROOT}/{self.share}/{path}"


def check_names(settings: Settings, layout: ShareLayout) -> None:
    """Names end up in URLs and in the node's shell command line: allow only what Batch AI allows."""
    bad = [
        f"{label}={value!r}"
        for label, value in (
            ("launcher.workspace", settings.workspace),
            ("launcher.experiment", settings.conf.experiment),
            ("launcher.cluster", settings.cluster),
            ("launcher.share_dir", layout.base),
            ("job name", layout.job),
        )
        if not _NAME_RE.match(value)
    ]
    if not re.match(r"^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$", layout.share):
        bad.append(f"launcher.share={layout.share!r} (3-63 lowercase letters, digits, single hyphens)")
    if bad:
        raise LaunchError("invalid Batch AI names: " + ", ".join(bad) + "; use 1-64 letters, digits, '-' or '_'")


def iso8601_duration(delta: datetime.timedelta) -> str:
    """The wire form of a TimeSpan (what msrest sends for a timedelta), e.g. P7D, PT1H30M."""
    seconds = int(delta.total_seconds())
    if seconds <= 0:
        raise LaunchError("launcher.max_wall_clock_hours must be > 0")
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    out = "P" + (f"{days}D" if days else "")
    clock = (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "") + (f"{secs}S" if secs else "")
    return out + ("T" + clock if clock else "")


def storage_credentials(settings: Settings, reveal_key: bool) -> Dict[str, Any]:
    """The mount's ``credentials``: a Key Vault reference when configured, else
    the key itself (only for a real submission) or the az CLI's placeholder."""
    conf = settings.conf
    if settings.uses_key_vault:
        return {
            "accountKeySecretReference": {
                "sourceVault": {"id": conf.key_vault_id},
                "secretUrl": conf.key_vault_secret_url,
            }
        }
    if reveal_key:
        if settings.storage_key is None:
            raise LaunchError("the storage account key is not set: export AZURE_BATCHAI_STORAGE_KEY")
        return {"accountKey": settings.storage_key.reveal()}
    return {"accountKey": KEY_PLACEHOLDER}


def check_counts(conf) -> None:
    """Nodes and processes: at least one each (process_count null: one per node)."""
    if conf.node_count < 1:
        raise LaunchError(f"launcher.node_count={conf.node_count} must be >= 1")
    if conf.process_count is not None and conf.process_count < 1:
        raise LaunchError(f"launcher.process_count={conf.process_count} must be >= 1 (or null: one per node)")


def node_arguments(layout: ShareLayout, shipped: Optional[Shipped] = None) -> List[str]:
    """``node_entry.py``'s arguments: the composed config, the run dir, and the user's files
    copied beside them (``user_sources.Shipped``: every config dir a search dir, the modules' dir)."""
    args = [
        "--config-dir",
        layout.on_node(layout.job_dir),
        "--config-name",
        CONFIG_NAME,
        "--run-dir",
        layout.on_node(layout.run_dir),
    ]
    if shipped is not None:
        for rel in ([shipped.config_dir] if shipped.config_dir else []) + list(shipped.search_dirs):
            args += ["--search-dir", layout.on_node(f"{layout.job_dir}/{rel}")]
        if shipped.code_dir:
            args += ["--code-dir", layout.on_node(f"{layout.job_dir}/{shipped.code_dir}")]
    return args


def build_job_body(
    settings: Settings,
    layout: ShareLayout,
    *,
    reveal_key: bool,
    secrets: Optional[Dict[str, str]] = None,
    shipped: Optional[Shipped] = None,
) -> Dict[str, Any]:
    """The job's ``properties`` (REST wire form, camelCase), a horovodSettings job.

    ``secrets`` become the job's secret variables (Batch AI never reports them
    back); their values are masked unless ``reveal_key`` (a real submission).
    ``shipped``: the user's config dirs and modules, uploaded under the job's folder.
    """
    conf = settings.conf
    check_counts(conf)
    account = settings.storage_account
    file_url = f"{settings.file_endpoint}/{layout.share}"

    horovod: Dict[str, Any] = {
        "pythonScriptFilePath": layout.on_node(layout.entry_file),
        "commandLineArgs": " ".join(node_arguments(layout, shipped)),
        "processCount": conf.process_count or conf.node_count,
    }
    if conf.python:
        horovod["pythonInterpreterPath"] = conf.python

    setup = [conf.setup_command.strip()] if conf.setup_command.strip() else []
    setup.append(f"{conf.pip_install.strip()} {layout.on_node(layout.wheel)}")

    env = rank_environment(conf.env)
    body = {
        "schedulingPriority": SchedulingPriority(conf.scheduling_priority).value,
        "cluster": {"id": settings.cluster_id},
        "nodeCount": conf.node_count,
        "horovodSettings": horovod,
        "stdOutErrPathPrefix": layout.on_node(layout.logs_dir),
        "mountVolumes": {
            "azureFileShares": [
                {
                    "accountName": account,
                    "azureFileUrl": file_url,
                    "credentials": storage_credentials(settings, reveal_key),
                    "relativeMountPath": layout.share,
                }
            ]
        },
        "jobPreparation": {"commandLine": " && ".join(setup)},
        "containerSettings": {"imageSourceRegistry": {"image": conf.image}},
        "environmentVariables": [{"name": k, "value": v} for k, v in env.items()],
        "constraints": {"maxWallClockTime": iso8601_duration(datetime.timedelta(hours=conf.max_wall_clock_hours))},
    }
    if secrets:
        body["secrets"] = [{"name": k, "value": v if reveal_key else MASK} for k, v in secrets.items()]
    return body


def az_job_file(body: Dict[str, Any]) -> Dict[str, Any]:
    """The az CLI's ``--config-file`` format."""
    return {"$schema": JOB_FILE_SCHEMA, "properties": body}


def ssh_public_key(settings: Settings) -> str:
    """The admin user's public key for a cluster this launcher creates."""
    path = Path(settings.conf.ssh_public_key).expanduser()
    if not path.is_file():
        raise LaunchError(
            f"creating cluster {settings.cluster} needs an SSH public key for its admin user; "
            f"{path} does not exist (ssh-keygen, or set launcher.ssh_public_key)"
        )
    return path.read_text().strip()


def build_cluster_body(settings: Settings, nodes: int, public_key: str) -> Dict[str, Any]:
    """The cluster-create ``properties`` (wire form): ``launcher.vm_size`` x ``nodes``,
    ``launcher.vm_priority`` (lowpriority: cheaper VMs the service may preempt).

    ``nodeDeallocationOption: requeue`` (the service default, made explicit):
    when nodes go away (a scale-down, a preempted low-priority VM) the jobs on
    them are requeued and run again, and training resumes from its last
    checkpoint on the share (``trainer.resume=auto``).
    """
    conf = settings.conf
    if nodes < 1:
        raise LaunchError(f"a new cluster needs at least 1 node, not {nodes}; set launcher.node_count")
    return {
        "vmSize": conf.vm_size,
        "vmPriority": VmPriority(conf.vm_priority).value,
        "scaleSettings": {"manual": {"targetNodeCount": nodes, "nodeDeallocationOption": "requeue"}},
        "userAccountSettings": {"adminUserName": conf.admin_user, "adminUserSshPublicKey": public_key},
    }


def az_cluster_file(body: Dict[str, Any]) -> Dict[str, Any]:
    """``az batchai cluster create --config-file``'s format."""
    return {"$schema": CLUSTER_FILE_SCHEMA, "properties": body}


def az_cluster_command(settings: Settings, cluster_file: Path) -> str:
    return shlex.join(
        [
            "az",
            "batchai",
            "cluster",
            "create",
            "--resource-group",
            settings.resource_group,
            "--workspace",
            settings.workspace,
            "--name",
            settings.cluster,
            "--config-file",
            str(cluster_file),
        ]
    )


def az_commands(settings: Settings, layout: ShareLayout, job_file: Path, uploads: Dict[str, Path]) -> List[str]:
    """The az commands that do by hand what a real launch does (uploads, then the job).

    Every command that needs the storage key reads it from the one variable
    the launcher reads, ``$AZURE_BATCHAI_STORAGE_KEY``, expanded by the shell."""
    account = ["--account-name", settings.storage_account]
    key = ' --account-key "$AZURE_BATCHAI_STORAGE_KEY"'
    commands = [
        shlex.join(["az", "storage", "share", "create", "--name", layout.share, *account]) + key,
    ]
    made = set()
    for remote, local in uploads.items():
        folder = remote.rsplit("/", 1)[0]
        parts = folder.split("/")
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            if sub not in made:
                made.add(sub)
                commands.append(
                    shlex.join(
                        ["az", "storage", "directory", "create", "--name", sub, "--share-name", layout.share, *account]
                    )
                    + key
                )
        commands.append(
            shlex.join(
                [
                    "az",
                    "storage",
                    "file",
                    "upload",
                    "--share-name",
                    layout.share,
                    "--path",
                    remote,
                    "--source",
                    str(local),
                    *account,
                ]
            )
            + key
        )
    create = shlex.join(
        [
            "az",
            "batchai",
            "job",
            "create",
            "--resource-group",
            settings.resource_group,
            "--workspace",
            settings.workspace,
            "--experiment",
            settings.conf.experiment,
            "--name",
            layout.job,
            "--cluster",
            settings.cluster,
            "--config-file",
            str(job_file),
            "--storage-account-name",
            settings.storage_account,
        ]
    )
    if not settings.uses_key_vault:
        # The key is filled in from the environment by the shell, never written out.
        create += ' --storage-account-key "$AZURE_BATCHAI_STORAGE_KEY"'
    commands.append(create)
    return commands
