"""Which data an evaluation scores with: the training run's own, unless the command names the data.

A run dir records the data it was trained on in ``.hydra/config.yaml`` (the data set, its path, image size,
split, a factory and its kwargs; ``trainer.seed``, which a factory is called with). ``task=evaluate
evaluate.model=<run dir>`` (or a model file in its ``saved_models/`` or ``checkpoints/``) uses that ``data``
node, so a model trained on ``data=sample`` (``debug=fast``) or on an image folder is scored on what it
learnt, without repeating ``data=...`` (was: the default ``data=cifar10``, a 170 MB download). Any
``data`` override on the command line (``data=folder``, ``data.path=...``) means the command's data instead,
and so does a primary config of the user's own (``--config-name``; a Batch AI node's uploaded config, which
the launching command composed). Which one was used is logged and written to ``evaluation.json`` (``data``).

A run dir is data, not code: a ``_target_`` in the run's ``data`` (a factory of ``data=custom``) is imported
only with ``evaluate.trust_run_code=true``, never from inside the run dir; otherwise one line names the module
that would run (``rundir/run_code.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Tuple

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from cifar_dist.common.engine_facts import engine_facts
from cifar_dist.common.errors import CifarDistError
from cifar_dist.config.files import DEFAULT_CONFIG_NAME
from cifar_dist.config.override_syntax import names_group
from cifar_dist.config.schema import engine_of, typed_data
from cifar_dist.rundir.resume_policy import SAVED_CONFIG
from cifar_dist.rundir.run_code import module_of, refuse_inside, refuse_untrusted, targets
from cifar_dist.rundir.saved_config import load_saved
from cifar_dist.training.engines.choice import missing_hint, runnable_engine, tensorflow_installed

MODEL_FOLDERS = ("saved_models", "checkpoints")  # where a run dir keeps the model files evaluate.model may name
TRUST_HINT = (
    "Give the data on the command line (data=...), or set evaluate.trust_run_code=true if you trust whoever made {run}"
)


def training_run_dir(model_path: Path) -> Optional[Path]:
    """The run dir that wrote ``model_path`` (a file of its ``saved_models/`` or ``checkpoints/``); None elsewhere."""
    return model_path.parent.parent if model_path.parent.name in MODEL_FOLDERS else None


def command_overrides() -> Optional[Sequence[str]]:
    """This job's command-line overrides (Hydra's ``overrides.task``); None outside a Hydra job, or when its
    primary config is not cifar_dist's own ``config`` (``--config-name`` of a user's, or the uploaded
    ``job_config`` a Batch AI node composes): such a config states its data itself."""
    if not HydraConfig.initialized() or HydraConfig.get().job.config_name != DEFAULT_CONFIG_NAME:
        return None
    return list(HydraConfig.get().overrides.task)


def names_data(overrides: Sequence[str]) -> bool:
    """Whether the command chose or changed the data (``data=...``, ``data.path=...``, ``+data.kwargs.n=...``)."""
    return any(names_group(o, "data") for o in overrides)


def saved_training_config(model_path: Path) -> Optional[Path]:
    """The ``.hydra/config.yaml`` of the run that trained ``model_path``; None for a model file elsewhere."""
    run = training_run_dir(model_path)
    saved = run / SAVED_CONFIG if run is not None else None
    return saved if saved is not None and saved.is_file() else None


class EngineMissing(CifarDistError):
    """The engine a model must be scored on cannot start here (its framework is not installed)."""


def evaluation_engine(cfg: DictConfig, model_path: Path, overrides: Optional[Sequence[str]]) -> str:
    """The engine to score with: the command's (``engine=...``), else the run's that trained ``model_path`` (a
    model trained on JAX is scored on JAX, as its exact test was), else the config's; as this process can run it
    (``runnable_engine``: engine=auto chosen, a Horovod run scored in one process without Horovod). A run
    trained on TensorFlow's engines, scored where TensorFlow is missing (the jax stack), is refused in one line."""
    saved = saved_training_config(model_path)
    if overrides is None or any(names_group(o, "engine") for o in overrides) or saved is None:
        return runnable_engine(engine_of(cfg).name)
    trained = engine_of(load_saved(saved))
    name = runnable_engine(trained.name)
    facts = engine_facts(name)
    if facts is not None and facts.needs_tensorflow and not tensorflow_installed():
        instead = (
            "or score it on JAX: engine=jax (its model is a Keras 3 one)"
            if trained.keras == 3
            else "its model is a Keras 2 (tf.keras) one, which only TensorFlow loads"
        )
        raise EngineMissing(
            f"{model_path} was trained on engine={trained.name}, which scores it on TensorFlow: "
            f"{missing_hint('tensorflow')}; {instead}"
        )
    return name


def evaluation_data(cfg: DictConfig, model_path: Path, overrides: Optional[Sequence[str]]) -> Tuple[DictConfig, str]:
    """``cfg`` with the data (and ``trainer.seed``) of the run that trained ``model_path``, unless the command
    names the data or there is no such run; and a line saying which data that is."""
    saved = saved_training_config(model_path)
    if overrides is None:
        return cfg, f"data={cfg.data.name}, as the config given says"
    if names_data(overrides):
        return cfg, f"data={cfg.data.name}, as the command says"
    if saved is None:
        return cfg, f"data={cfg.data.name} (the default: {model_path} has no training run's {SAVED_CONFIG})"
    trained = load_saved(saved)
    imported = run_code_of(trained, saved, bool(cfg.evaluate.get("trust_run_code", False)))
    out = cfg.copy()
    with open_dict(out):
        out.data = typed_data(trained.data)
        out.trainer.seed = trained.trainer.seed
    said = f"data={trained.data.name}, as the run that trained it ({saved}); give data=... to score other data"
    return out, said + (f"; imports {imported}, as evaluate.trust_run_code=true allows" if imported else "")


def run_code_of(trained: DictConfig, saved: Path, trusted: bool) -> str:
    """The code that taking ``trained``'s data would import (``_target_``s), as one string ("" for none); refused
    in one line unless ``trusted``, and, trusted or not, when it lies inside the run dir (``rundir/run_code.py``)."""
    named = targets(trained.get("data"), "data")
    run_dir = saved.parent.parent
    source = f"{saved}'s data"
    if trusted:
        refuse_inside(named, run_dir, source)
    else:
        refuse_untrusted(named, run_dir, source, TRUST_HINT.format(run=run_dir))
    return ", ".join(module_of(t) for t in named.values())
