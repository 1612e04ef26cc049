"""What an engine is: every question the trainer and the evaluation ask of one, in one class.

Each engine (``horovod.py``, ``jax.py``, ``tensorflow.py``; one module each) subclasses ``Engine`` and answers
every abstract member; a missing one stops the engine from starting, naming it (Python's ``abc``), and
``tests/training/test_engine_members.py`` checks each engine class without starting it. What differs by engine and
is needed before one starts is its ``facts`` (``cifar_dist/common/engine_facts.py``), which the class names.

A new engine is one new module here: its class (``facts = <its EngineFacts>``, ``start`` and the members below;
``tf_data_loop.TfDataLoop`` gives the four of the input and the loop to an engine that trains on tf.data with
Keras' ``fit``), its ``EngineFacts`` in ``engine_facts.py``, which names the class for ``start_engine``, and its
option in ``config/schema.py``.

The members are grouped as the run uses them: who this process is; the checks and settings before the model is
built; small Python objects between processes; the model and its optimizer; the input and the loop. Every
collective (a member that says so) is called by every process of the job, in the same order.
"""

from __future__ import annotations

import abc
import importlib
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple

from cifar_dist.common.engine_facts import EngineFacts
from cifar_dist.common.errors import CifarDistError
from cifar_dist.training.engines.world import World


class Engine(abc.ABC):
    """What makes the processes of a job one data-parallel training job."""

    # --- who this process is ---
    facts: ClassVar[EngineFacts]  # what the launching process knows of this engine (common/engine_facts.py)
    world: World  # this process's place in the job: rank, size, threads, GPU
    timings: Dict[str, float]  # what metrics.json records of the run's own costs (engine=jax: its compile time)

    def __init__(self, world: World):
        self.world = world
        self.timings = {}

    @property
    def name(self) -> str:
        """``engine=<name>``, as the config and ``metrics.json`` say it."""
        return self.facts.name

    @classmethod
    @abc.abstractmethod
    def start(cls, trainer_cfg) -> Engine:
        """Start the engine in this process (once, before any model is built) and return it (``start_engine``)."""

    def versions(self) -> Dict[str, str]:
        """The versions of the packages it trains with (``facts.packages``), as ``metrics.json``'s run records them."""
        return {package: importlib.import_module(package).__version__ for package in self.facts.packages}

    @abc.abstractmethod
    def device_peak_mb(self) -> Optional[float]:
        """The most memory this process's device held so far, in MiB; None where the engine does not know it."""

    @abc.abstractmethod
    def peer_failure(self, exc: BaseException) -> Optional[CifarDistError]:
        """The one-line error for ``exc`` when it says another process of the job died; None for any other."""

    # --- before the model is built ---
    @abc.abstractmethod
    def check_jit_compile(self, jit_compile: bool) -> None:
        """Refuse ``trainer.jit_compile`` in one line where this engine's steps cannot be compiled so."""

    @abc.abstractmethod
    def distribute_models(self) -> None:
        """Make every model built from now on in this process the job's (a Keras distribution), where the engine
        needs it."""

    @abc.abstractmethod
    def rank_seed(self, seed: int) -> int:
        """The seed this process draws with, from ``trainer.seed``."""

    @abc.abstractmethod
    def exact_test_slice(self) -> Tuple[int, int]:
        """(rank, size): which slice of the test set this process scores for the exact test."""

    @abc.abstractmethod
    def ramps_lr_in_schedule(self, flavor: int) -> bool:
        """Whether warmup and step decay are the lr schedule's (else ``lr_callbacks``'), for a Keras ``flavor``."""

    @abc.abstractmethod
    def lr_callbacks(self, flavor: int, trainer_cfg, lr: float, steps: int, is_chief: bool) -> List[Any]:
        """The Keras callbacks that ramp the lr where the schedule does not (``ramps_lr_in_schedule``)."""

    # --- small Python objects between processes (collectives) ---
    @abc.abstractmethod
    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj``, on every process."""

    @abc.abstractmethod
    def allgather_object(self, obj: Any) -> List[Any]:
        """Every process's ``obj``, in rank order, on every process."""

    @abc.abstractmethod
    def any_rank(self, flag: bool) -> bool:
        """True on every process when ``flag`` is true on any one."""

    @abc.abstractmethod
    def average_numbers(self, values: Sequence[float]) -> Any:
        """The mean over the processes of a float vector (a numpy array; every process passes the same length)."""

    # --- the model and its optimizer ---
    @abc.abstractmethod
    def distributed_optimizer(self, optimizer, compression: str = "none"):
        """``optimizer`` made to apply the gradient of the whole job's batch (as it is, where the step does)."""

    @abc.abstractmethod
    def predict_here(self, model, images):
        """``model``'s outputs for ``images``, computed in this process alone."""

    @abc.abstractmethod
    def broadcast_model(self, model, variables) -> None:
        """Copy rank 0's ``variables`` (the model's and its optimizer's) to every process (a collective)."""

    @abc.abstractmethod
    def average_variables(self, variables, name: str) -> None:
        """Replace each of ``variables`` by its mean over the processes, in place (a collective)."""

    @abc.abstractmethod
    def restore_latest(self, model, directory: Path):
        """The newest checkpoint in ``directory`` that loads, into ``model`` (``rundir.checkpoints.Restored``)."""

    @abc.abstractmethod
    def metric_averaging(self, model):
        """The Keras callback that averages each epoch's metrics over the processes; None where they are the job's."""

    # --- the input and the loop ---
    @abc.abstractmethod
    def train_input(self, data, *, placement: str = "auto", **stream):
        """This process's training input (``batch_size``, ``rank``, ``size``, ``shard``, ``seed``, ``augment``...)."""

    @abc.abstractmethod
    def eval_input(self, data, *, batch_size: int, rank: int, size: int, equal_shards: bool):
        """This process's part of the test split."""

    @abc.abstractmethod
    def fit(self, model, train, validation, **settings):
        """Train ``model`` on ``train`` (``epochs``, ``initial_epoch``, ``validation_freq``, ``callbacks``...)."""

    @abc.abstractmethod
    def evaluate(self, model, stream, outputs: Sequence[str] = ("",)) -> Dict[str, float]:
        """``model``'s loss and metrics on ``stream``, computed in this process (``return_dict=True``'s dict)."""
