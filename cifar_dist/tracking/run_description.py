"""What a run dir says about its job, as a tracker records it: params, tags, name, sweep.

Everything is read from the run dir (``.hydra/`` written by the launching
process, ``metrics.json``/``evaluation.json`` written by rank 0), so a live
run, a resumed one and an import of a downloaded run dir record the same.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from omegaconf import DictConfig, OmegaConf

from cifar_dist.common.engine_facts import VERSION_KEYS
from cifar_dist.common.external_commands import LOCAL_QUERY_TIMEOUT_S, CommandTimedOut, run_command
from cifar_dist.common.redaction import is_secret_key, redact_text
from cifar_dist.common.results import read_results

PARAM_VALUE_LIMIT = 6000  # MLflow's limit on a param value


@dataclass
class JobRecord:
    run_dir: Path
    config: Optional[DictConfig]  # the composed config (.hydra/config.yaml, else the one given)
    hydra: Optional[DictConfig]  # .hydra/hydra.yaml's hydra node (None without .hydra/)

    @property
    def results(self) -> Dict[str, Any]:
        """The run's results as ``results.read_results`` reads them, {} before either file exists."""
        return read_results(self.run_dir) or {}


def load_job(run_dir: Path, cfg: Optional[DictConfig] = None) -> JobRecord:
    run_dir = Path(run_dir).absolute()
    config = _load(run_dir / ".hydra" / "config.yaml")
    hydra = _load(run_dir / ".hydra" / "hydra.yaml")
    return JobRecord(run_dir, config if config is not None else cfg, hydra.get("hydra") if hydra is not None else None)


def _load(path: Path) -> Optional[DictConfig]:
    try:
        return OmegaConf.load(path)
    except (OSError, ValueError):
        return None


def params(config: Optional[DictConfig]) -> Dict[str, str]:
    """The composed config flattened to ``group.key`` -> value (secret-looking keys left out, secret values masked)."""
    if config is None:
        return {}
    try:
        tree = OmegaConf.to_container(config, resolve=True)
    except Exception:  # an interpolation only Hydra can resolve: keep the raw text
        tree = OmegaConf.to_container(config, resolve=False)
    flat: Dict[str, str] = {}
    _flatten(tree, "", flat)
    return flat


def _flatten(node: Any, prefix: str, out: Dict[str, str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if not is_secret_key(f"{prefix}{key}"):  # never sent as a param, whatever it holds
                _flatten(value, f"{prefix}{key}.", out)
        return
    text = "null" if node is None else str(getattr(node, "value", node))
    out[prefix[:-1]] = redact_text(text)[:PARAM_VALUE_LIMIT]


def sweep_dir(job: JobRecord) -> Optional[Path]:
    """The sweep dir of a sweep point (from its .hydra/hydra.yaml), None for a single run.

    The run dir is ``<hydra.sweep.dir>/<hydra.sweep.subdir>``; the subdir is
    resolved (it names the job number), the sweep dir is what is left. (The
    sweep dir's own setting may hold ``${now:...}``, which would resolve to
    now, not to when the sweep started.)
    """
    hydra = job.hydra
    if hydra is None or str(hydra.get("mode")) != "MULTIRUN":
        return None
    try:
        subdir = str(OmegaConf.select(OmegaConf.create({"hydra": hydra}), "hydra.sweep.subdir"))
    except Exception:
        subdir = ""
    parts = Path(subdir).parts
    if parts and job.run_dir.parts[-len(parts) :] == parts:
        return Path(*job.run_dir.parts[: -len(parts)])
    return job.run_dir.parent


# The engine and the versions of what it trains with, as metrics.json's run section names them (the engines' facts).
ENGINE_TAGS = ("engine", *VERSION_KEYS)


def run_name(job: JobRecord) -> str:
    """``<date>/<time>`` for a run, ``<time>/#<num>`` for a sweep point: what the run dir is called."""
    if sweep_dir(job) is not None:
        num = OmegaConf.select(job.hydra, "job.num", default=0)
        return f"{job.run_dir.parent.name}/#{num}"
    return "/".join(job.run_dir.parts[-2:])


def tags(job: JobRecord) -> Dict[str, str]:
    """What the run dir knows: launcher, task, ranks, versions, git commit, run dir, sweep."""
    out: Dict[str, str] = {"run_dir": str(job.run_dir)}
    choices = OmegaConf.select(job.hydra, "runtime.choices", default=None) if job.hydra is not None else None
    if choices is not None and choices.get("launcher"):
        out["launcher"] = str(choices.get("launcher"))
    task = OmegaConf.select(job.config, "task.name", default=None) if job.config is not None else None
    if task:
        out["task"] = str(task)
    results = job.results
    if results.get("ranks"):
        out["ranks"] = str(results["ranks"])
    run = results.get("run") or {}
    for name in ENGINE_TAGS:  # metrics.json's run: the engine that trained and the versions it used
        if run.get(name):
            out[name] = str(run[name])
    sweep = sweep_dir(job)
    if sweep is not None:
        out["sweep_dir"] = str(sweep)
    return out


def live_tags(host: str, ranks: int, engine: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """What only the process that trains knows: its host, the world size, the engine that trains and the versions
    it uses (``engine``: ``{"engine": "jax", "keras": ..., "jax": ...}``, from the trainer), the source commit.

    The versions are the engine's, not whatever is installed: Horovod is installed beside JAX on the horovod
    stack, and a JAX run tagged ``horovod: 0.28.1`` says it trained on something it did not use."""
    out = {"host": host, "ranks": str(ranks)}
    try:
        out["tensorflow"] = importlib.metadata.version("tensorflow")  # every engine reads its data with tf.data
    except importlib.metadata.PackageNotFoundError:
        pass
    out.update({k: str(v) for k, v in (engine or {}).items() if k in ENGINE_TAGS and v})
    commit = git_commit(Path(__file__).resolve().parents[2])
    if commit:
        out["git_commit"] = commit
        out["mlflow.source.git.commit"] = commit  # what MLflow's UI shows as the source version
    return out


def git_commit(source_root: Path) -> Optional[str]:
    """HEAD of the checkout cifar_dist runs from; None when it is not a git checkout (an installed wheel)."""
    if not (source_root / ".git").exists():
        return None
    try:  # best effort: a run without the commit is still described
        proc = run_command(
            ["git", "-C", str(source_root), "rev-parse", "HEAD"],
            "reading the git commit",
            "check `git rev-parse HEAD`",
            LOCAL_QUERY_TIMEOUT_S,
        )
    except (OSError, CommandTimedOut):
        return None
    commit = proc.stdout.strip()
    return commit if proc.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", commit) else None
