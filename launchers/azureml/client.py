"""The workspace's computes and jobs through azure-ai-ml's ``MLClient``: what a
user does with ``az ml compute create``, ``az ml job create/show/cancel/stream/download``.

Every call goes through azure-core's pipeline: 429/5xx and timeouts are
retried by its RetryPolicy (honouring Retry-After), long-running operations
are polled by the SDK's pollers. SDK errors become one-line LaunchErrors that
say what to do.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from cifar_dist.launchers.azure.errors import azure_errors
from cifar_dist.launchers.azure.retries import retry_settings, transport_timeouts
from cifar_dist.launchers.azureml.config import KNOWN_CLOUDS, Settings
from cifar_dist.launchers.base import LaunchError

log = logging.getLogger(__name__)

AUTH_HINT = (
    "sign in with `az login` (or set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET) "
    "and check launcher.subscription_id, launcher.resource_group and launcher.workspace"
)


def import_sdk():
    """azure.ai.ml, with its own console handler quieted: it prints a note per
    job read and a warning per experimental schema class it loads, none of
    which is about the user's job (errors still show)."""
    # lazy: the azure extra (not installed for the other launchers)
    import azure.ai.ml

    logging.getLogger("azure.ai.ml").setLevel(logging.ERROR)
    return azure.ai.ml


@contextlib.contextmanager
def sdk_errors(action: str) -> Iterator[None]:
    """azure-core's errors (the Azure launchers' shared wording) and azure-ai-ml's own, as one line."""
    # lazy: the azure extra (not installed for the other launchers)
    from azure.ai.ml.exceptions import MlException

    with azure_errors(action, auth_hint=AUTH_HINT):
        try:
            yield
        except MlException as exc:
            message = " ".join(str(getattr(exc, "no_personal_data_message", "") or exc).split())
            raise LaunchError(f"azure-ai-ml could not {action}: {message[:300]}") from None


def client_kwargs(conf) -> Dict[str, Any]:
    """Transport, retry and cloud settings for MLClient (passed on to every azure-core pipeline)."""
    kwargs: Dict[str, Any] = {
        **retry_settings(conf),
        **transport_timeouts(conf),
        "show_progress": False,
        "enable_telemetry": False,  # no Application Insights traffic from this launcher
        "cloud": conf.cloud,
    }
    if conf.arm_endpoint:
        if conf.cloud in KNOWN_CLOUDS:
            raise LaunchError(
                f"launcher.arm_endpoint is set but launcher.cloud={conf.cloud!r} names a built-in cloud; "
                "give the custom cloud a name of its own (launcher.cloud=MyCloud)"
            )
        arm = conf.arm_endpoint.rstrip("/") + "/"
        kwargs["cloud_metadata"] = {
            "azure_portal": arm,
            "resource_manager": arm,
            "active_directory": arm,
            "aml_resource_id": arm,
            "storage_endpoint": conf.storage_endpoint,
            "registry_discovery_endpoint": arm,
        }
    return kwargs


class Workspace:
    """One Azure ML workspace, as the launcher uses it."""

    def __init__(self, settings: Settings, credential: Any):
        self.settings = settings
        self.credential = credential
        self.client = import_sdk().MLClient(
            credential,
            subscription_id=settings.subscription_id,
            resource_group_name=settings.resource_group,
            workspace_name=settings.workspace,
            **client_kwargs(settings.conf),
        )

    def close(self) -> None:
        close = getattr(self.credential, "close", None)
        if close is not None:
            close()

    # --- compute -------------------------------------------------------------------

    def ensure_compute(self, compute_file: Optional[Path]) -> None:
        """Check the cluster can hold the job; create it from ``compute_file`` when missing and allowed."""
        # lazy: the azure extra (not installed for the other launchers)
        from azure.core.exceptions import ResourceNotFoundError

        conf, name = self.settings.conf, self.settings.compute
        with sdk_errors(f"read compute {name}"):
            try:
                compute = self.client.compute.get(name)
            except ResourceNotFoundError:
                compute = None
        if compute is None:
            if compute_file is None:
                raise LaunchError(
                    f"compute {name} does not exist in workspace {self.settings.workspace}; "
                    "create it (az ml compute create) or set launcher.create_compute=true"
                )
            self._create_compute(compute_file)
            return
        maximum = getattr(compute, "max_instances", None)
        if maximum is not None and maximum < conf.instance_count:
            raise LaunchError(
                f"compute {name} scales to at most {maximum} nodes but the job needs {conf.instance_count}; "
                "lower launcher.instance_count or raise the cluster's maximum (az ml compute update --max-instances)"
            )

    def _create_compute(self, compute_file: Path) -> None:
        # lazy: the azure extra (not installed for the other launchers)
        from azure.ai.ml import load_compute

        with sdk_errors(f"create compute {self.settings.compute}"):
            compute = load_compute(compute_file)
            self.client.compute.begin_create_or_update(compute).result()
        log.info(
            "created compute %s: 0..%d x %s (%s), scales to 0 when idle",
            compute.name,
            compute.max_instances,
            compute.size,
            compute.tier,
        )

    # --- jobs -----------------------------------------------------------------------

    def get_job(self, name: str):
        # lazy: the azure extra (not installed for the other launchers)
        from azure.core.exceptions import ResourceNotFoundError

        with sdk_errors(f"read job {name}"):
            try:
                return self.client.jobs.get(name)
            except ResourceNotFoundError:
                return None

    def create_job(self, job) -> Any:
        """Submit the job loaded from job.yml (the SDK uploads the code snapshot and any local input)."""
        with sdk_errors(f"submit job {job.name}"):
            return self.client.jobs.create_or_update(job)

    def cancel_job(self, name: str) -> None:
        with sdk_errors(f"cancel job {name}"):
            self.client.jobs.begin_cancel(name).result()

    def run_details(self, name: str):
        """The run-history record the SDK's own log streaming reads: status, error, log file links."""
        with sdk_errors(f"read the run history of job {name}"):
            return self.client.jobs._runs_operations.get_run_details(name)

    def download_outputs(self, name: str, output_name: str, into: Path) -> Path:
        """``az ml job download --output-name``: the output's files under ``into``."""
        with sdk_errors(f"download the {output_name} output of job {name}"):
            self.client.jobs.download(name, download_path=str(into), output_name=output_name)
        return into / "named-outputs" / output_name
