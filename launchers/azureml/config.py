"""The Azure ML launcher's config schema, and how its settings are resolved.

Imported at every start (``launchers.register_built_in()``, which stores the schema), so it imports
nothing from the Azure SDKs. Account names may come from the config or from
the environment; credentials come only from azure-identity (no field here
holds a key or a token).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List, Mapping, Optional

from cifar_dist.config.options import config_option
from cifar_dist.launchers.base import LaunchError

# Settings that may come from the environment when the config leaves them null
# (AZURE_SUBSCRIPTION_ID is the one the Batch AI launcher and the az CLI read too).
ENV_FALLBACKS: Dict[str, str] = {
    "subscription_id": "AZURE_SUBSCRIPTION_ID",
    "resource_group": "AZUREML_RESOURCE_GROUP",
    "workspace": "AZUREML_WORKSPACE",
    "compute": "AZUREML_COMPUTE",
}

# The clouds azure-ai-ml knows by name; any other needs launcher.arm_endpoint.
KNOWN_CLOUDS = ("AzureCloud", "AzureChinaCloud", "AzureUSGovernment")


class OnInterrupt(str, Enum):
    cancel = "cancel"  # Ctrl-C cancels the Azure ML job
    detach = "detach"  # Ctrl-C leaves it running; re-run the same command to follow it again


class VmPriority(str, Enum):
    dedicated = "dedicated"
    low_priority = "low_priority"  # cheaper; Azure may preempt a node, the job is then requeued


@config_option("launcher", "azureml")
@dataclass
class AzureMLLauncherConf:
    """``launcher=azureml``: run the job on an Azure Machine Learning compute cluster as
    an MPI command job (Batch AI's successor; docs/azureml.md)::

        python -m cifar_dist launcher=azureml launcher.compute=gpu-cluster \\
            launcher.instance_count=4 launcher.process_count_per_instance=1

    Account names left null come from the environment (AZURE_SUBSCRIPTION_ID,
    AZUREML_RESOURCE_GROUP, AZUREML_WORKSPACE, AZUREML_COMPUTE) or from a launcher
    option of your own in the git-ignored conf/local/launcher/ (docs/batchai.md shows
    one). Credentials come from azure-identity (az login, a managed identity or
    AZURE_CLIENT_ID/...): never from a config file."""

    _target_: str = "cifar_dist.launchers.azureml.launcher.AzureMLLauncher"

    # --- where (null: taken from the environment variable in ENV_FALLBACKS) ---
    subscription_id: Optional[str] = None
    resource_group: Optional[str] = None
    workspace: Optional[str] = None
    compute: Optional[str] = None  # an AmlCompute cluster of the workspace
    experiment: str = "cifar"

    # --- the job ---
    instance_count: int = 1  # nodes
    process_count_per_instance: int = 1  # ranks (processes of the job) per node (one per GPU)
    # A registered environment ("name:version" or "name@latest"); null = build one
    # from base_image plus this project's pinned TensorFlow, tf-keras and Horovod.
    environment: Optional[str] = None
    base_image: str = "tensorflow/tensorflow:2.18.1-gpu"
    # What the base image lacks to build Horovod with MPI (run as root in the image build).
    setup_command: str = (
        "apt-get update && apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev cmake g++ "
        "&& rm -rf /var/lib/apt/lists/*"
    )
    env: Dict[str, str] = field(default_factory=dict)  # extra environment variables on the nodes
    max_wall_clock_hours: float = 168.0  # limits.timeout of the job
    display_name: Optional[str] = None  # null = the run dir's name

    # --- the compute cluster ---
    create_compute: bool = False  # create `compute` when it does not exist
    vm_size: str = "Standard_NC6s_v3"
    max_nodes: Optional[int] = None  # null = instance_count
    vm_priority: VmPriority = VmPriority.dedicated
    idle_time_before_scale_down_s: int = 120  # min nodes is 0: the cluster scales to zero when idle

    # --- behaviour ---
    dry_run: bool = False  # write the job YAML, print the az ml commands, send nothing
    wait: bool = True
    on_interrupt: OnInterrupt = OnInterrupt.cancel
    stream_output: bool = True  # rank 0's log to the console
    poll_interval_s: float = 15.0
    log_tail_lines: int = 40  # printed when the job fails
    cache_dir: str = "~/.cache/cifar_dist/azureml"  # source snapshots, by content hash

    # --- endpoints and transport ---
    # default | cli | managed_identity | environment | a class path (package.module.Class)
    credential: str = "default"
    cloud: str = "AzureCloud"
    # A cloud azure-ai-ml does not know (a sovereign or private one): its ARM and
    # storage endpoints, registered under `cloud` for this process.
    arm_endpoint: Optional[str] = None
    storage_endpoint: str = "core.windows.net"
    retry_total: int = 8
    retry_backoff_factor: float = 0.8
    retry_backoff_max_s: float = 60.0
    connection_timeout_s: float = 30.0
    read_timeout_s: float = 120.0


@dataclass(frozen=True)
class Settings:
    """The launcher config with every environment fallback applied and checked."""

    conf: AzureMLLauncherConf
    subscription_id: str
    resource_group: str
    workspace: str
    compute: str

    @property
    def max_nodes(self) -> int:
        return self.conf.max_nodes or self.conf.instance_count


def resolve_settings(conf: AzureMLLauncherConf, environ: Mapping[str, str]) -> Settings:
    """Apply the environment fallbacks; raise one LaunchError naming every missing or bad setting."""
    values: Dict[str, Optional[str]] = {}
    problems: List[str] = []
    for name, env_name in ENV_FALLBACKS.items():
        values[name] = getattr(conf, name) or environ.get(env_name) or None
        if values[name] is None:
            problems.append(f"launcher.{name} (or ${env_name}) is not set")
    for name in ("instance_count", "process_count_per_instance"):
        if int(getattr(conf, name)) < 1:
            problems.append(f"launcher.{name} must be at least 1")
    if conf.max_nodes is not None and conf.max_nodes < conf.instance_count:
        problems.append(f"launcher.max_nodes={conf.max_nodes} is below launcher.instance_count={conf.instance_count}")
    if conf.cloud not in KNOWN_CLOUDS and not conf.arm_endpoint:
        problems.append(
            f"launcher.cloud={conf.cloud!r} is none of {list(KNOWN_CLOUDS)}: also set launcher.arm_endpoint"
        )
    if problems:
        raise LaunchError(
            "Azure ML launcher: "
            + "; ".join(problems)
            + ". Set them on the command line, in a launcher option of your own (conf/local/launcher/, see docs) "
            "or in the environment."
        )
    return Settings(conf=conf, **{k: str(v) for k, v in values.items()})


def conf_from_kwargs(kwargs: Mapping[str, object]) -> AzureMLLauncherConf:
    """Rebuild the dataclass from what Hydra's instantiate passed (enums may arrive as strings)."""
    conf = AzureMLLauncherConf(**{k: v for k, v in kwargs.items() if not k.startswith("_")})
    conf.on_interrupt = OnInterrupt(conf.on_interrupt)
    conf.vm_priority = VmPriority(conf.vm_priority)
    conf.env = {str(k): str(v) for k, v in dict(conf.env or {}).items()}
    return conf
