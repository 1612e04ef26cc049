"""The Azure ML job, as plain data: the command job YAML that ``az ml job create
--file`` accepts, the environment's Docker build context, the compute cluster
YAML and the equivalent ``az ml`` commands.

Pure functions, no Azure SDK: a dry run writes these files and stops; a real
launch writes the same files, loads them with the SDK's own ``load_job`` and
submits what it loaded, so what a user reviews is what gets submitted.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re
import shlex
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from cifar_dist.common.redaction import redact_text
from cifar_dist.config.override_syntax import shell_command
from cifar_dist.launchers.azureml.config import Settings, VmPriority
from cifar_dist.launchers.base import JobSpec, LaunchError
from cifar_dist.launchers.ranks.rank_env import LOG_DIR, NONCHIEF_OVERRIDES, rank_environment
from cifar_dist.launchers.user_sources import Shipped, without_searchpath

JOB_SCHEMA = "https://azuremlschemas.azureedge.net/latest/commandJob.schema.json"
COMPUTE_SCHEMA = "https://azuremlschemas.azureedge.net/latest/amlCompute.schema.json"
OUTPUT_NAME = "run_dir"  # the job's one output: the run dir, mounted read-write on every node
OUTPUT_REF = "${{outputs.%s}}" % OUTPUT_NAME  # Azure ML replaces it with the mount path
MODEL_INPUT = "model"  # task=evaluate: the model (a .h5 file or a run dir) as the job's input
LOCAL_SUBDIR = "azureml"  # in the run dir: job.yml, the environment's build context, logs
JOB_FILE = "job.yml"
NODE_JOB_NAME = "cifar_dist_node"  # the ranks' Hydra job name: their log is cifar_dist_node.log
COMPUTE_FILE = "compute.yml"
ENVIRONMENT_DIR = "environment"
# Azure ML job names: a letter first, then letters, digits, '_' or '-'.
_NAME_RE = re.compile(r"^[A-Za-z][-\w]{0,254}$", re.ASCII)
# Built into the image by the Dockerfile's own pip step, with MPI and TensorFlow.
_HOROVOD = "horovod"


def check_name(kind: str, value: str) -> None:
    if not _NAME_RE.match(value):
        raise LaunchError(
            f"{kind} {value!r} is not a valid Azure ML name: start with a letter, then letters, digits, '_' or '-'"
        )


def remote_overrides(
    job: JobSpec, model_override: Optional[str] = None, shipped: Optional[Shipped] = None
) -> List[str]:
    """The job's own overrides, pinned to the run dir mounted as the job's output
    (and, for task=evaluate, to the model mounted as its input), its search path
    pointing at the copies in the snapshot (``user_sources.Shipped``). The ranks log to
    cifar_dist_node.log, which the downloaded outputs bring home beside the
    launching side's own cifar_dist.log."""
    shipped = shipped or Shipped()
    overrides = without_searchpath(dataclasses.replace(job, output_dir=Path(OUTPUT_REF)).child_overrides())
    searchpath = shipped.searchpath_override()
    overrides += ([searchpath] if searchpath else []) + [f"hydra.job.name={NODE_JOB_NAME}"]
    if model_override is not None:
        overrides = [o for o in overrides if not o.lstrip("+").startswith("evaluate.model=")]
        overrides.insert(0, model_override)
    return overrides


def rank_command(job: JobSpec, model_override: Optional[str] = None, shipped: Optional[Shipped] = None) -> str:
    """What Azure ML's mpirun starts on every rank: the in-process app inside the
    per-rank wrapper (rank 0's output to the job's log, every rank's own log in
    the run dir's logs/, the shared Hydra log file left to rank 0), with the
    launch's config flags pointing at the user's copies in the snapshot."""
    shipped = shipped or Shipped()
    wrapper = ["python", "-m", "cifar_dist.launchers.ranks.rank_exec", "--log-dir", f"{OUTPUT_REF}/{LOG_DIR}"]
    wrapper += [f"--nonchief-arg={o}" for o in NONCHIEF_OVERRIDES]
    app = ["python", "-m", "cifar_dist", *shipped.hydra_args(), *remote_overrides(job, model_override, shipped)]
    return shlex.join([*wrapper, "--", *app])


def environment_reference(settings: Settings) -> Any:
    """The job's ``environment``: a registered one by name, or the build context next to job.yml."""
    name = settings.conf.environment
    if name:
        return name if name.startswith("azureml:") else f"azureml:{name}"
    return {"build": {"path": ENVIRONMENT_DIR}}


def pinned_requirements() -> Tuple[List[str], str]:
    """The horovod stack's requirements, as installed (setup.cfg is their one home): this package's own and its
    ``horovod`` extra's but Horovod (TensorFlow 2.18.1, what Horovod builds against), and Horovod's own pin."""
    requires = _requirements()
    plain = [_bare(r) for r in requires if "extra ==" not in r and "extra==" not in r]
    stack = [_bare(r) for r in requires if re.search(r"""extra\s*==\s*["']horovod["']""", r)]
    horovod = [r for r in stack if re.match(rf"^{_HOROVOD}\b", r)]
    if not horovod:
        raise LaunchError("cifar_dist's horovod extra pins no horovod version; reinstall with scripts/install.sh")
    return plain + [r for r in stack if r not in horovod], horovod[0]


def engine_jax_requirements() -> List[str]:
    """The ``jax`` extra's pins (setup.cfg), so that the environment runs ``engine=jax`` too."""
    return [_bare(r) for r in _requirements() if re.search(r"""extra\s*==\s*["']jax["']""", r)]


def engine_tensorflow_requirements() -> List[str]:
    """The ``mpi`` extra's pins (mpi4py), so that the environment runs ``engine=tensorflow`` on several processes."""
    return [_bare(r) for r in _requirements() if re.search(r"""extra\s*==\s*["']mpi["']""", r)]


def _requirements() -> List[str]:
    try:
        return importlib.metadata.requires("cifar_dist") or []
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - always installed here
        raise LaunchError("cifar_dist is not installed; run scripts/install.sh") from None


def _bare(requirement: str) -> str:
    """A requirement without its environment marker (the image is the horovod stack's, whatever runs here)."""
    return requirement.split(";")[0].strip()


def dockerfile(settings: Settings) -> str:
    """The environment's image: the base image, MPI and a compiler, the pinned
    TensorFlow/tf-keras/Hydra and JAX (engine=jax; its CPU build: a GPU cluster
    registers an environment with ``jax[cuda12]``, ``launcher.environment``),
    then Horovod built against them with MPI."""
    others, horovod = pinned_requirements()
    others += engine_jax_requirements() + engine_tensorflow_requirements()
    conf = settings.conf
    return "\n".join(
        [
            "# Written by cifar_dist's Azure ML launcher: the environment every rank runs in.",
            f"FROM {conf.base_image}",
            f"RUN {conf.setup_command}",
            "RUN python -m pip install --no-cache-dir " + shlex.join(others),
            # Built without isolation so that setup.py finds the TensorFlow installed above.
            "RUN HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 "
            "python -m pip install --no-cache-dir --no-build-isolation " + shlex.quote(horovod),
            "",
        ]
    )


def job_document(
    settings: Settings,
    job: JobSpec,
    name: str,
    code_dir: Path,
    model_input: Optional[Dict[str, str]] = None,
    shipped: Optional[Shipped] = None,
) -> Dict[str, Any]:
    """The command job, as ``az ml job create --file`` reads it.

    ``model_input`` (task=evaluate) is the job's ``model`` input: a local file
    or folder (the SDK uploads it) or an ``azureml://`` URI of an earlier job's outputs.
    ``shipped``: the user's files in ``code_dir`` (their modules reach the ranks'
    PYTHONPATH relative to it; the launching machine's own PYTHONPATH does not).
    """
    conf = settings.conf
    check_name("job name", name)
    check_name("launcher.compute", settings.compute)
    check_name("launcher.experiment", conf.experiment)
    shipped = shipped or Shipped()
    env = rank_environment(conf.env, same_files=False, code_roots=[shipped.code_dir] if shipped.code_dir else [])
    model_override = f"evaluate.model=${{{{inputs.{MODEL_INPUT}}}}}" if model_input else None
    doc: Dict[str, Any] = {
        "$schema": JOB_SCHEMA,
        "type": "command",
        "name": name,
        "display_name": conf.display_name or job.output_dir.name,
        "experiment_name": conf.experiment,
        "description": redact_text(
            f"cifar_dist run {job.output_dir.name}: {' '.join(job.task_overrides) or 'defaults'}"
        ),
        "code": str(code_dir),
        "command": rank_command(job, model_override, shipped),
        "environment": environment_reference(settings),
        "environment_variables": env,
        "compute": f"azureml:{settings.compute}",
        "resources": {"instance_count": int(conf.instance_count)},
        "distribution": {"type": "mpi", "process_count_per_instance": int(conf.process_count_per_instance)},
        "limits": {"timeout": int(conf.max_wall_clock_hours * 3600)},
        "outputs": {OUTPUT_NAME: {"type": "uri_folder", "mode": "rw_mount"}},
    }
    if model_input:
        doc["inputs"] = {MODEL_INPUT: {**model_input, "mode": "ro_mount"}}
    return doc


def compute_document(settings: Settings) -> Dict[str, Any]:
    """The cluster ``launcher.create_compute`` creates, as ``az ml compute create --file`` reads it:
    min 0 nodes (it scales to zero when idle), dedicated or low priority."""
    conf = settings.conf
    return {
        "$schema": COMPUTE_SCHEMA,
        "type": "amlcompute",
        "name": settings.compute,
        "size": conf.vm_size,
        "min_instances": 0,
        "max_instances": settings.max_nodes,
        "idle_time_before_scale_down": int(conf.idle_time_before_scale_down_s),
        "tier": "low_priority" if conf.vm_priority == VmPriority.low_priority else "dedicated",
    }


def az_commands(
    settings: Settings, name: str, job_file: Path, compute_file: Optional[Path], run_dir: Path
) -> List[str]:
    """The az ml commands that do by hand what a real launch does: the cluster (when
    asked for), the job (followed), its outputs into the run dir."""
    where = [
        "--subscription",
        settings.subscription_id,
        "--resource-group",
        settings.resource_group,
        "--workspace-name",
        settings.workspace,
    ]
    commands = []
    if compute_file is not None:
        commands.append(shell_command("az", "ml", "compute", "create", "--file", str(compute_file), *where))
    commands.append(shell_command("az", "ml", "job", "create", "--file", str(job_file), *where, "--stream"))
    commands.append(
        shell_command(
            "az",
            "ml",
            "job",
            "download",
            "--name",
            name,
            "--output-name",
            OUTPUT_NAME,
            "--download-path",
            str(run_dir),
            *where,
        )
    )
    return commands
