"""Batch AI's ARM API through ``azure-mgmt-batchai``: what the tutorial did with
``az batchai workspace/experiment/cluster/job ...``.

Every call goes through azure-core's pipeline: 429/5xx and timeouts are
retried by its RetryPolicy (honouring Retry-After, bounded in total time by
``retry_timeout_s``), long-running operations are polled by ARM polling.
SDK errors become one-line LaunchErrors that say what to do.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

from cifar_dist.launchers.azure.errors import azure_errors
from cifar_dist.launchers.azure.retries import retry_settings, transport_timeouts
from cifar_dist.launchers.base import LaunchError
from cifar_dist.launchers.batchai.config import Settings, VmPriority
from cifar_dist.launchers.batchai.job import az_cluster_file, build_cluster_body, ssh_public_key
from cifar_dist.launchers.batchai.schema import validate_cluster_file

log = logging.getLogger(__name__)


def pipeline_kwargs(settings: Settings) -> Dict[str, Any]:
    """Retry and transport settings shared by every ARM call."""
    # lazy: the azure extra (not installed for the other launchers)
    from azure.core.pipeline.policies import RetryPolicy

    conf = settings.conf
    return {
        "retry_policy": RetryPolicy(
            **retry_settings(conf),
            retry_status=conf.retry_total,
            retry_connect=conf.retry_total,
            retry_read=conf.retry_total,
            timeout=conf.retry_timeout_s,
        ),
        **transport_timeouts(conf),
        "polling_interval": conf.poll_interval_s,
    }


STORAGE_AUTH_HINT = "check $AZURE_BATCHAI_STORAGE_KEY and launcher.storage_account"


class BatchAIService:
    """The workspace, experiment, cluster and jobs of one launcher configuration."""

    def __init__(self, settings: Settings, credential: Any):
        # lazy: the azure extra (not installed for the other launchers)
        from azure.mgmt.batchai import BatchAI

        self.settings = settings
        self._client = BatchAI(
            credential,
            settings.subscription_id,
            base_url=settings.conf.arm_endpoint,
            **pipeline_kwargs(settings),
        )
        self._rg = settings.resource_group
        self._ws = settings.workspace
        self._exp = settings.conf.experiment

    @property
    def models(self):
        # lazy: the azure extra (not installed for the other launchers)
        from azure.mgmt.batchai import models

        return models

    def close(self) -> None:
        self._client.close()

    # --- workspace, experiment, cluster ----------------------------------------

    def ensure_workspace(self) -> None:
        # lazy: the azure extra (not installed for the other launchers)
        from azure.core.exceptions import ResourceNotFoundError

        with azure_errors(f"read workspace {self._ws}"):
            try:
                self._client.workspaces.get(self._rg, self._ws)
                return
            except ResourceNotFoundError:
                pass
        if not self.settings.location:
            raise LaunchError(
                f"workspace {self._ws} does not exist in {self._rg}; set launcher.location "
                "(or $AZURE_BATCHAI_LOCATION) to create it"
            )
        with azure_errors(f"create workspace {self._ws}"):
            params = self.models.WorkspaceCreateParameters(location=self.settings.location)
            self._client.workspaces.begin_create(self._rg, self._ws, params).result()
        log.info("created Batch AI workspace %s in %s", self._ws, self.settings.location)

    def ensure_experiment(self) -> None:
        # lazy: the azure extra (not installed for the other launchers)
        from azure.core.exceptions import ResourceNotFoundError

        with azure_errors(f"read experiment {self._exp}"):
            try:
                self._client.experiments.get(self._rg, self._ws, self._exp)
                return
            except ResourceNotFoundError:
                pass
        with azure_errors(f"create experiment {self._exp}"):
            self._client.experiments.begin_create(self._rg, self._ws, self._exp).result()
        log.info("created Batch AI experiment %s", self._exp)

    def get_cluster(self):
        # lazy: the azure extra (not installed for the other launchers)
        from azure.core.exceptions import ResourceNotFoundError

        with azure_errors(f"read cluster {self.settings.cluster}"):
            try:
                return self._client.clusters.get(self._rg, self._ws, self.settings.cluster)
            except ResourceNotFoundError:
                return None

    def ensure_cluster(self, nodes: int) -> None:
        """The cluster exists and can hold ``nodes`` nodes (created or resized when allowed)."""
        conf = self.settings.conf
        name = self.settings.cluster
        cluster = self.get_cluster()
        if cluster is None:
            if not conf.create_cluster:
                raise LaunchError(
                    f"cluster {name} does not exist in workspace {self._ws}; create it "
                    "(launcher.create_cluster=true, with launcher.vm_size/vm_priority) or name an existing one"
                )
            self._create_cluster(nodes)
            return
        wanted = VmPriority(conf.vm_priority).value
        current_priority = getattr(cluster.vm_priority, "value", cluster.vm_priority)
        if current_priority is not None and str(current_priority).lower() != wanted:
            log.warning(
                "cluster %s exists with vmPriority %s; launcher.vm_priority=%s applies only to a cluster "
                "this launcher creates (use another launcher.cluster name to get a %s one)",
                name,
                current_priority,
                wanted,
                wanted,
            )
        scale = cluster.scale_settings
        if scale is not None and scale.auto_scale is not None:
            if scale.auto_scale.maximum_node_count < nodes:
                raise LaunchError(
                    f"cluster {name} autoscales to at most {scale.auto_scale.maximum_node_count} nodes "
                    f"but the job needs {nodes}; lower launcher.node_count or raise the cluster's maximum"
                )
            return
        current = scale.manual.target_node_count if scale is not None and scale.manual is not None else 0
        if current >= nodes:
            return
        if not conf.resize_cluster:
            raise LaunchError(
                f"cluster {name} has {current} nodes but the job needs {nodes}; "
                "allow launcher.resize_cluster=true or resize it (az batchai cluster resize)"
            )
        self.resize_cluster(nodes)

    def _create_cluster(self, nodes: int) -> None:

        conf = self.settings.conf
        body = build_cluster_body(self.settings, nodes, ssh_public_key(self.settings))
        validate_cluster_file(az_cluster_file(body))  # what is sent is what a dry run writes and checks
        params = self.models.ClusterCreateParameters.deserialize({"properties": body})
        with azure_errors(f"create cluster {self.settings.cluster}"):
            self._client.clusters.begin_create(self._rg, self._ws, self.settings.cluster, params).result()
        log.info("created cluster %s: %d x %s (%s)", self.settings.cluster, nodes, conf.vm_size, body["vmPriority"])

    def resize_cluster(self, nodes: int) -> None:
        m = self.models
        params = m.ClusterUpdateParameters(
            scale_settings=m.ScaleSettings(manual=m.ManualScaleSettings(target_node_count=nodes))
        )
        with azure_errors(f"resize cluster {self.settings.cluster} to {nodes} nodes"):
            self._client.clusters.update(self._rg, self._ws, self.settings.cluster, params)
        log.info("resized cluster %s to %d nodes", self.settings.cluster, nodes)

    # --- jobs ---------------------------------------------------------------------

    def get_job(self, name: str):
        # lazy: the azure extra (not installed for the other launchers)
        from azure.core.exceptions import ResourceNotFoundError

        with azure_errors(f"read job {name}"):
            try:
                return self._client.jobs.get(self._rg, self._ws, self._exp, name)
            except ResourceNotFoundError:
                return None

    def create_job(self, name: str, body: Dict[str, Any], secret: Optional[str]):
        """Submit the job (``properties`` in wire form) and wait for the create LRO."""
        params = self.models.JobCreateParameters.deserialize({"properties": body})
        with azure_errors(f"create job {name}", secret):
            return self._client.jobs.begin_create(self._rg, self._ws, self._exp, name, params).result()

    def terminate_job(self, name: str) -> None:
        with azure_errors(f"terminate job {name}"):
            self._client.jobs.begin_terminate(self._rg, self._ws, self._exp, name).result()

    def active_jobs(self) -> List[str]:
        with azure_errors(f"list the jobs of experiment {self._exp}"):
            return [
                j.name
                for j in self._client.jobs.list_by_experiment(self._rg, self._ws, self._exp)
                if j.execution_state in ("queued", "running", "terminating")
            ]

    def output_files(self, name: str, directory_id: str = "stdouterr") -> Dict[str, Any]:
        """listOutputFiles: name -> File (with a SAS downloadUrl and the size)."""
        options = self.models.JobsListOutputFilesOptions(outputdirectoryid=directory_id, linkexpiryinminutes=60)
        with azure_errors(f"list the output files of job {name}"):
            return {
                f.name: f for f in self._client.jobs.list_output_files(self._rg, self._ws, self._exp, name, options)
            }
