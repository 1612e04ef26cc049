"""What each engine is, as facts the launching process can read: the one list of the engines.

The engines themselves (``cifar_dist/training/engines/``) import TensorFlow,
JAX or Horovod when they start. What the launchers, the config's validation
and the model checks need to know of an engine (whether it runs several
processes, needs Horovod, trains Keras 2, ...) is here instead, as plain data
that imports nothing: so they ask an engine's property, never compare its
name, and the launching process stays light (``tests/project/test_lazy_imports.py``).
Each engine class carries its facts (``engine.facts``); ``docs/engines.md``
compares the engines.

It lives with the leaf helpers, not in the engines package, because the
config (``config/validation.py``) and the models (``models/keras_checks.py``)
read it, and the training folder imports both: no folder imports the
training folder from below (``tests/project/test_structure.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

# engine=auto: no engine, the choice of one when the job is launched (training/engines/choice.py).
AUTO = "auto"


@dataclass(frozen=True)
class EngineFacts:
    name: str  # engine=<name>
    # Trains several processes as one job (else one process only).
    multi_process: bool
    # The Keras versions of the models it trains (2: tf.keras, 3: keras).
    keras_versions: Tuple[int, ...]
    # The backend Keras 3 models run on (``keras.backend.backend()``).
    keras3_backend: str
    # Every training step is an XLA program: trainer.jit_compile does not apply, and no gradient is compressed.
    xla_only: bool
    # Runs launcher.concurrent's sweep points as groups of one mpirun (each group its own world).
    splits_into_mpi_groups: bool
    # Its processes find each other in Open MPI's or Slurm's environment, which horovodrun does not set.
    peers_from_mpi_or_slurm: bool
    # Its loop is Keras' own ``fit`` over tf.data (Keras 3 then runs whole executions of steps_per_execution
    # steps); engine=jax runs its own loop, fed from the device, whatever the number of steps.
    keras_fit: bool
    # The class that runs it, "<module>.<Class>" (a subclass of training/engines/engine.py's Engine): imported by
    # ``start_engine`` only when the engine is used, as Hydra's ``_target_`` names a class.
    engine_class: str
    # The packages it needs where the job runs, besides Keras; a run records their versions (metrics.json's run, the
    # tracker's tags).
    packages: Tuple[str, ...]
    # The variable through which launcher=mpirun tells the processes where they meet (``host:port``), for an engine
    # whose processes need an address that Open MPI 5 does not give them; "" for none.
    coordinator_env: str = ""
    # The packages it needs besides ``packages`` where a job of several processes runs (one process needs none).
    peer_packages: Tuple[str, ...] = ()
    # Its processes talk over MPI (Horovod's collectives, mpi4py's): under Slurm, srun starts them with an MPI
    # plugin (``srun --mpi=pmix``); JAX's processes talk over its own channels and need none.
    talks_over_mpi: bool = True
    # trainer.jit_compile=true can run on several processes: XLA compiles the step with its gradient averaging
    # (Horovod's XLA ops, GPU builds; JAX's every step). engine=tensorflow's MPI allreduce is a Python call XLA
    # cannot compile: refused before anything starts (config/validation.py).
    jit_compiles_several: bool = True

    @property
    def needs_horovod(self) -> bool:
        """Needs Horovod installed where the job runs."""
        return "horovod" in self.packages

    @property
    def needs_tensorflow(self) -> bool:
        """Needs TensorFlow where the job runs: its models (Keras 2, Keras 3 on TensorFlow's backend) run on it."""
        return "tensorflow" in self.packages

    @property
    def needs_jax(self) -> bool:
        """Needs JAX installed where the job runs."""
        return "jax" in self.packages


HOROVOD = EngineFacts(
    name="horovod",
    multi_process=True,
    keras_versions=(2, 3),
    keras3_backend="tensorflow",
    xla_only=False,  # TensorFlow runs the steps; trainer.jit_compile asks for XLA (GPU builds only)
    splits_into_mpi_groups=True,  # hvd.init(comm=<the group's communicator>)
    peers_from_mpi_or_slurm=False,  # hvd.init joins mpirun's and horovodrun's ranks alike
    keras_fit=True,
    engine_class="cifar_dist.training.engines.horovod.HorovodEngine",
    packages=("tensorflow", "horovod"),
)
JAX = EngineFacts(
    name="jax",
    multi_process=True,
    keras_versions=(3,),
    keras3_backend="jax",
    xla_only=True,  # every step is an XLA program over the global batch
    splits_into_mpi_groups=False,  # jax.distributed joins the whole mpirun
    peers_from_mpi_or_slurm=True,  # jax.distributed.initialize()
    keras_fit=False,  # training/engines/jax_fit.py
    engine_class="cifar_dist.training.engines.jax.JaxEngine",
    packages=("jax",),
    # Open MPI 5 no longer sets OMPI_MCA_orte_hnp_uri, which JAX's own Open MPI detection reads (its other way
    # needs mpi4py): training/engines/jax.py reads this instead.
    coordinator_env="CIFAR_DIST_JAX_COORDINATOR",
    talks_over_mpi=False,  # jax.distributed's coordinator and XLA's collectives (Gloo on CPUs, NCCL on GPUs)
)
TENSORFLOW = EngineFacts(
    name="tensorflow",
    multi_process=True,  # one process alone; several average their gradients over MPI (training/engines/mpi_peers.py)
    keras_versions=(2, 3),
    keras3_backend="tensorflow",
    xla_only=False,  # TensorFlow runs the steps; trainer.jit_compile asks for XLA (one process on a GPU only)
    splits_into_mpi_groups=True,  # its MPI communicator is the group's (launcher.concurrent)
    peers_from_mpi_or_slurm=True,  # MPI_Init under mpirun or srun --mpi=pmix; horovodrun's Gloo sets neither
    keras_fit=True,
    engine_class="cifar_dist.training.engines.tensorflow.TensorflowEngine",
    packages=("tensorflow",),
    peer_packages=("mpi4py",),  # the MPI allreduce of several processes
    jit_compiles_several=False,  # training/engines/mpi_peers.py: the allreduce is mpi4py's, outside the graph
)

ENGINES: Dict[str, EngineFacts] = {facts.name: facts for facts in (HOROVOD, JAX, TENSORFLOW)}

# The versions a run records of what it trained with (metrics.json's run, the tracker's tags, the stack a resume
# keeps): TensorFlow where the process has it, the Keras the model was built in, and each engine's own packages.
VERSION_KEYS: Tuple[str, ...] = tuple(
    dict.fromkeys(("tensorflow", "keras", *(p for f in ENGINES.values() for p in f.packages)))
)


def engine_facts(name: str) -> Optional[EngineFacts]:
    """The facts of engine ``name``; None for ``auto`` (not chosen yet) or a name that is no engine."""
    return ENGINES.get(name)
