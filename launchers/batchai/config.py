"""The Batch AI launcher's config schema, and how its settings are resolved.

Imported at every start (it registers the schema: ``launchers.register_built_in``), so it imports
nothing from the Azure SDKs. Account-specific names may come from the config
or the environment (the variable names the tutorial and the az CLI used); the
storage key comes *only* from the environment, never from a config file, so it
cannot end up in ``.hydra/*.yaml`` dumps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List, Mapping, Optional

from cifar_dist.config.options import config_option
from cifar_dist.launchers.base import LaunchError

# The az CLI's variable names for the storage account and its key.
STORAGE_KEY_ENV = "AZURE_BATCHAI_STORAGE_KEY"

# Settings that may come from the environment when the config leaves them null.
ENV_FALLBACKS: Dict[str, str] = {
    "subscription_id": "AZURE_SUBSCRIPTION_ID",
    "resource_group": "AZURE_BATCHAI_RESOURCE_GROUP",
    "location": "AZURE_BATCHAI_LOCATION",
    "workspace": "AZURE_BATCHAI_WORKSPACE",
    "cluster": "AZURE_BATCHAI_CLUSTER",
    "storage_account": "AZURE_BATCHAI_STORAGE_ACCOUNT",
}

# Needed to write the job at all (a dry run needs these too).
_NEEDED_FOR_JOB = ("subscription_id", "resource_group", "workspace", "cluster", "storage_account")
# Needed only to create things remotely (a workspace when it does not exist yet).
_NEEDED_FOR_SUBMIT = ("location",)


class OnInterrupt(str, Enum):
    terminate = "terminate"  # Ctrl-C terminates the Batch AI job
    detach = "detach"  # Ctrl-C leaves it running; re-run the same command to follow it again


class VmPriority(str, Enum):
    dedicated = "dedicated"
    lowpriority = "lowpriority"


class SchedulingPriority(str, Enum):
    low = "low"
    normal = "normal"
    high = "high"


@config_option("launcher", "batchai")
@dataclass
class BatchAILauncherConf:
    """``launcher=batchai``: run the job on an Azure Batch AI cluster as a Horovod job
    (docs/batchai.md)::

        python -m cifar_dist launcher=batchai launcher.cluster=nc6cluster launcher.node_count=4

    Account names left null come from the environment (AZURE_SUBSCRIPTION_ID,
    AZURE_BATCHAI_RESOURCE_GROUP, AZURE_BATCHAI_LOCATION, AZURE_BATCHAI_WORKSPACE,
    AZURE_BATCHAI_CLUSTER, AZURE_BATCHAI_STORAGE_ACCOUNT) or from a launcher option
    of your own in conf/local/launcher/ (docs/batchai.md). The storage key is read
    from $AZURE_BATCHAI_STORAGE_KEY only: never write it into a config file."""

    _target_: str = "cifar_dist.launchers.batchai.launcher.BatchAILauncher"

    # --- where (null: taken from the environment variable in ENV_FALLBACKS) ---
    subscription_id: Optional[str] = None
    resource_group: Optional[str] = None
    location: Optional[str] = None  # used when the workspace has to be created
    workspace: Optional[str] = None
    experiment: str = "cifar"
    cluster: Optional[str] = None
    storage_account: Optional[str] = None
    share: str = "cifardist"  # Azure file share, mounted on the nodes under its own name
    share_dir: Optional[str] = None  # folder in the share; null = the experiment name
    # Optional Key Vault reference for the storage key in the job body (the
    # launcher itself still needs $AZURE_BATCHAI_STORAGE_KEY to upload files).
    key_vault_id: Optional[str] = None  # /subscriptions/.../providers/Microsoft.KeyVault/vaults/<name>
    key_vault_secret_url: Optional[str] = None  # https://<vault>.vault.azure.net/secrets/<name>

    # --- the job ---
    node_count: int = 1
    process_count: Optional[int] = None  # ranks (processes of the job) in all; null = one per node
    image: str = "tensorflow/tensorflow:2.18.0-gpu"
    python: Optional[str] = None  # horovodSettings.pythonInterpreterPath; null = the image's python
    # jobPreparation: what the container lacks, then the package wheel is installed with pip_install.
    setup_command: str = (
        "apt-get update && apt-get install -y --no-install-recommends mpi-default-dev mpi-default-bin cmake g++"
    )
    pip_install: str = "HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 python -m pip install"
    env: Dict[str, str] = field(default_factory=dict)  # extra environment variables on the nodes
    max_wall_clock_hours: float = 168.0
    scheduling_priority: SchedulingPriority = SchedulingPriority.normal

    # --- the cluster ---
    create_cluster: bool = False  # create `cluster` when it does not exist
    vm_size: str = "Standard_NC6"
    vm_priority: VmPriority = VmPriority.dedicated
    admin_user: str = "cifar"
    ssh_public_key: str = "~/.ssh/id_rsa.pub"  # for a cluster this launcher creates
    resize_cluster: bool = True  # grow a manually scaled cluster to node_count when it is smaller
    scale_down: bool = False  # resize to 0 nodes once the experiment has no job left running

    # --- behaviour ---
    dry_run: bool = False  # write job.json, print the az command, touch nothing remote
    wait: bool = True
    on_interrupt: OnInterrupt = OnInterrupt.terminate
    stream_output: bool = True
    poll_interval_s: float = 15.0  # job status and long-running-operation polling
    stderr_tail_lines: int = 40
    package: Optional[str] = None  # a prebuilt cifar_dist wheel; null = build one from the source tree
    cache_dir: str = "~/.cache/cifar_dist/batchai"  # built wheels, by source content hash

    # --- endpoints and transport ---
    # default | cli | managed_identity | environment | a class path (package.module.Class)
    credential: str = "default"
    arm_endpoint: str = "https://management.azure.com"
    file_endpoint: Optional[str] = None  # null = https://<storage_account>.file.core.windows.net
    retry_total: int = 8
    retry_backoff_factor: float = 0.8
    retry_backoff_max_s: float = 60.0
    retry_timeout_s: float = 600.0  # total time one request may spend in retries
    connection_timeout_s: float = 30.0
    read_timeout_s: float = 120.0


class Secret:
    """A value that never shows itself in repr/str, so a stray log line or
    exception message cannot leak it."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret(<redacted>)"

    __str__ = __repr__


@dataclass(frozen=True)
class Settings:
    """The launcher config with every environment fallback applied and checked."""

    conf: BatchAILauncherConf
    subscription_id: str
    resource_group: str
    workspace: str
    cluster: str
    storage_account: str
    location: Optional[str]
    storage_key: Optional[Secret]

    @property
    def share_dir(self) -> str:
        return self.conf.share_dir or self.conf.experiment

    @property
    def cluster_id(self) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.BatchAI/workspaces/{self.workspace}/clusters/{self.cluster}"
        )

    @property
    def file_endpoint(self) -> str:
        return (self.conf.file_endpoint or f"https://{self.storage_account}.file.core.windows.net").rstrip("/")

    @property
    def uses_key_vault(self) -> bool:
        return bool(self.conf.key_vault_id and self.conf.key_vault_secret_url)


def resolve_settings(conf: BatchAILauncherConf, environ: Mapping[str, str], submit: bool) -> Settings:
    """Apply the environment fallbacks; raise one LaunchError naming every missing setting.

    ``submit`` is False for a dry run, which needs neither the key nor the location.
    """
    values: Dict[str, Optional[str]] = {}
    missing: List[str] = []
    needed = _NEEDED_FOR_JOB + (_NEEDED_FOR_SUBMIT if submit else ())
    for name, env_name in ENV_FALLBACKS.items():
        value = getattr(conf, name) or environ.get(env_name) or None
        values[name] = value
        if value is None and name in needed:
            missing.append(f"launcher.{name} (or ${env_name})")
    key = environ.get(STORAGE_KEY_ENV) or None
    if submit and key is None:
        missing.append(f"the storage account key (${STORAGE_KEY_ENV}; never put it in a config file)")
    if bool(conf.key_vault_id) != bool(conf.key_vault_secret_url):
        missing.append("launcher.key_vault_id and launcher.key_vault_secret_url (set both or neither)")
    if missing:
        raise LaunchError(
            "Batch AI launcher is missing settings: "
            + "; ".join(missing)
            + ". Set them on the command line, in a launcher option of your own (conf/local/launcher/, see docs) "
            "or in the environment."
        )
    return Settings(
        conf=conf,
        subscription_id=values["subscription_id"],
        resource_group=values["resource_group"],
        workspace=values["workspace"],
        cluster=values["cluster"],
        storage_account=values["storage_account"],
        location=values["location"],
        storage_key=Secret(key) if key else None,
    )


def conf_from_kwargs(kwargs: Mapping[str, object]) -> BatchAILauncherConf:
    """Rebuild the dataclass from what Hydra's instantiate passed (enums may arrive as strings)."""
    conf = BatchAILauncherConf(**{k: v for k, v in kwargs.items() if not k.startswith("_")})
    conf.on_interrupt = OnInterrupt(conf.on_interrupt)
    conf.vm_priority = VmPriority(conf.vm_priority)
    conf.scheduling_priority = SchedulingPriority(conf.scheduling_priority)
    conf.env = {str(k): str(v) for k, v in dict(conf.env or {}).items()}
    return conf
