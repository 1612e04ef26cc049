"""The JAX engine: Keras 3 models on JAX, made one data-parallel job by Keras' own distribution API.

No Horovod on this path. A rank is a device (``world.py``): a process trains
every device it was given (``jax_devices.py``: all of its host's GPUs when it
is alone there, its share when several share the host, the CPU devices
``XLA_FLAGS`` makes), and the processes a launcher starts (mpirun ranks, Slurm
tasks, Azure ML's MPI processes) join as one JAX job with
``jax.distributed.initialize()``, which reads its peers from Open MPI's or
Slurm's environment, each with its own ``local_device_ids``; on CPU their
collectives run over Gloo, on GPUs over NCCL. ``distribute_models`` then sets
Keras' ``DataParallel`` over every device of every process: each variable is
one array replicated on all devices, and each training step is one XLA
program over the global batch, of which every device draws its rank's part
(``jax_data.py``). What Horovod does in pieces happens inside that program:

* gradients are reduced over the global batch: nothing wraps the optimizer;
* metrics are computed over the global batch: nothing averages the epoch's logs;
* BatchNorm normalises with the global batch's statistics (synchronised
  BatchNorm), so its moving statistics are the same everywhere.

Two rules follow, and the trainer keeps them through this engine:

* every process assigns the same value to a variable at the same time (an
  assignment is a ``device_put`` that checks it across processes): seeds are
  the same on every process (``rank_seed``), and a checkpoint is read by
  rank 0 and broadcast as bytes so that every process loads it
  (``restore_latest``);
* evaluation runs in each process alone, on its first device with its copy of
  the weights: each process scores its own slice of the test set
  (``exact_test_slice``) and the trainer adds up the slices' sums.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import sys
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np

from cifar_dist.common import jax_internals, keras_internals
from cifar_dist.common.engine_facts import JAX
from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.jax_internals import quiet_backend_probing
from cifar_dist.rundir import checkpoints
from cifar_dist.training.engines.engine import Engine
from cifar_dist.training.engines.jax_devices import (
    apply_gpu_choice,
    check_backend,
    choose_gpus,
    use_compilation_cache,
)
from cifar_dist.training.engines.world import (
    World,
    local_processes_from_env,
    local_rank_from_env,
    processes_from_env,
    under_open_mpi,
)
from cifar_dist.training.process.gloo_host import bind_gloo
from cifar_dist.training.process.gpu_env import host_gpu_count
from cifar_dist.training.process.threads import plan_threads

log = logging.getLogger(__name__)

BACKEND = JAX.keras3_backend
# What a JAX collective raises (JaxRuntimeError, XlaRuntimeError or ValueError, by version) when a peer is gone:
# "Gloo all-reduce failed: ... Connection reset by peer", "Gloo AllGather failed", a closed connection.
_PEER_GONE = re.compile(
    r"Gloo \S+ failed|Connection (reset|closed) by peer|Socket closed|DEADLINE_EXCEEDED.*(barrier|heartbeat)",
    re.IGNORECASE,
)


class JaxEngineError(CifarDistError, RuntimeError):
    """engine=jax cannot start in this process."""


def peers_from_env(environ=None) -> dict:
    """``jax.distributed.initialize``'s arguments: none where JAX finds the job itself (Slurm, Open MPI 4, which
    sets OMPI_MCA_orte_hnp_uri); under Open MPI 5 the coordinator launcher=mpirun chose (``facts.coordinator_env``),
    and this rank's place (its local rank too: JAX would ask mpi4py for it, and picks the GPU of that number)."""
    env = os.environ if environ is None else environ
    if not under_open_mpi(env) or "OMPI_MCA_orte_hnp_uri" in env:
        return {}
    address = env.get(JAX.coordinator_env)
    if not address:
        raise JaxEngineError(
            f"engine=jax under Open MPI 5 needs the address its processes meet at: start them with "
            f"launcher=mpirun, or set {JAX.coordinator_env}=host:port for every rank of your own mpirun"
        )
    return {
        "coordinator_address": address,
        "num_processes": int(env["OMPI_COMM_WORLD_SIZE"]),
        "process_id": int(env["OMPI_COMM_WORLD_RANK"]),
        "local_device_ids": [local_rank_from_env(env)],
    }


def join_peers(jax, local_device_ids=None) -> None:
    """Join the other processes of this mpirun / Slurm step (``peers_from_env``): first, where JAX's Gloo will
    listen (this host's name, or loopback where that does not resolve and every process is here: gloo_host.py),
    then ``jax.distributed.initialize``; on GPUs with the ones this process was given."""
    processes = processes_from_env()
    bind_gloo(processes, local_processes_from_env())
    devices = {"local_device_ids": local_device_ids} if local_device_ids else {}
    log.info("joining the job's %d processes (JAX's coordination service)", processes)
    jax.distributed.initialize(**{**peers_from_env(), **devices})


def planned_devices(gpus) -> str:
    """What this process will train on, said before JAX starts its backend: ``gpu:<count>`` or ``cpu``."""
    return f"gpu:{gpus.count}" if gpus.count else "cpu"


def check_same_devices(jax, planned: str) -> None:
    """Every process brings the same kind and number of GPUs (``planned_devices``), checked through JAX's
    coordination service before any backend starts (a GPU backend and a CPU one would wait for each other's
    topology until JAX's timeout): else one line on every process, saying which has what."""
    every = jax_internals.exchange_before_backend(jax, "cifar_dist/devices", planned)
    if len(set(every)) > 1:
        said = ", ".join(f"process {i}: {what}" for i, what in enumerate(every))
        raise JaxEngineError(
            f"the job's processes would train on different devices ({said}): give every process the same number "
            "of GPUs (launcher.np / launcher.ntasks_per_node, launcher.gpus_per_node) or none "
            "(trainer.accelerator=cpu)"
        )


def check_job_devices(jax) -> int:
    """The devices each process trains, one rank each (``World.devices``), once JAX's backend runs: the same kind
    and number on every process, else one line."""
    devices = jax.devices()
    kinds = sorted({d.platform for d in devices})
    counts = [sum(1 for d in devices if d.process_index == p) for p in range(jax.process_count())]
    if len(kinds) > 1 or len(set(counts)) > 1:
        said = ", ".join(f"process {p}: {n}" for p, n in enumerate(counts))
        raise JaxEngineError(
            f"the job's processes train on different devices ({'/'.join(kinds)}; {said}): every process trains "
            "one rank per device, so give each the same number of the same kind (CUDA_VISIBLE_DEVICES, "
            "XLA_FLAGS=--xla_force_host_platform_device_count, launcher.gpus_per_node)"
        )
    return counts[jax.process_index()]


class JaxEngine(Engine):
    """Keras 3 on JAX; started by ``start`` in every process, before any model is built."""

    facts = JAX

    def __init__(self, world: World):
        import jax  # lazy: JAX
        from jax.experimental import multihost_utils  # lazy: JAX

        super().__init__(world)  # its timings: compile_s (jax_fit.fit)
        self.jax = jax
        self.multihost = multihost_utils
        self.eval_programs: dict = {}  # compiled evaluations, shared by validation and the final test (jax_fit)

    @classmethod
    def start(cls, trainer_cfg) -> JaxEngine:
        t = trainer_cfg
        select_keras_backend()
        peers, local_peers, local_process = processes_from_env(), local_processes_from_env(), local_rank_from_env()
        accelerator = str(getattr(t.accelerator, "value", t.accelerator))
        gpus = choose_gpus(os.environ, local_process, local_peers, host_gpu_count(), accelerator)
        apply_gpu_choice(gpus)  # read when JAX starts its GPU backend, below
        plan = plan_threads(local_peers, t.intra_op_threads, t.inter_op_threads)
        limit_xla_threads(plan.intra_op)  # read when JAX creates its CPU client, below
        import jax  # lazy: JAX

        quiet_backend_probing()  # "Unable to initialize backend 'tpu'"
        cache = use_compilation_cache(jax, str(t.compilation_cache))
        if peers > 1 and not jax.distributed.is_initialized():
            # ENGINE: join the other processes of this mpirun / Slurm step (their addresses come from its environment),
            # each with its own devices: every process of the job must bring the same kind and number.
            join_peers(jax, gpus.local_device_ids)
            check_same_devices(jax, planned_devices(gpus))
        backend = check_backend(jax, gpus, accelerator)
        keras_internals.import_keras_for_training()  # without the integrations training never calls (~1 s)
        keras_internals.tensorflow_only_where_loaded()  # TensorFlow stays out unless a tf.data factory loads it
        world = World(
            jax.process_index(),
            jax.process_count(),
            local_process,
            local_peers,
            plan,
            ",".join(str(d) for d in jax.local_devices()) if backend == "gpu" else "",
            False,  # no TensorFlow here: no oneDNN
            devices=check_job_devices(jax),
        )
        log.info(
            "%s: process %d (local %d of %d), JAX %s on %d %s device(s), XLA threads %d (%s); %s; compilation cache %s",
            world.layout(),
            world.process,
            world.local_process,
            world.local_processes,
            jax.__version__,
            world.devices,
            backend,
            plan.intra_op,
            plan.reason,
            gpus.reason,
            cache or "off",
        )
        return cls(world)

    def distribute_models(self) -> None:
        """From now on a model built in this process is one model over every device of the job."""
        import keras  # lazy: Keras 3

        # ENGINE: variables replicated on all devices, each process's batches one shard of the global batch.
        keras.distribution.set_distribution(
            keras.distribution.DataParallel(devices=keras.distribution.list_devices(), auto_shard_dataset=False)
        )

    def check_jit_compile(self, jit_compile: bool) -> None:
        """Nothing to refuse: every step is an XLA program already (``facts.xla_only``), whatever it says."""

    def peer_failure(self, exc: BaseException) -> Optional[CifarDistError]:
        """One line for ``exc`` when a collective failed because another process of the job is gone (killed,
        crashed, its node lost): every surviving process says it in one line, not JAX's 25-line traceback;
        the launcher names which process died and why. None for any other error."""
        first = (str(exc).strip().splitlines() or [""])[0]
        found = _PEER_GONE.search(first)
        if self.world.processes < 2 or found is None:
            return None
        what = re.sub(r"\s*\[[^\]]*\.cc:\d+\]", "", first)[:200]  # without the C++ source location
        return JaxEngineError(
            f"process {self.world.process}: another process of this {self.world.processes}-process JAX job stopped "
            f"({what}); the launcher names which one, and its log is in logs/"
        )

    def device_peak_mb(self):
        """The most memory this process's first device held so far, in MiB (None where JAX does not say: CPUs)."""
        stats = self.jax.local_devices()[0].memory_stats() or {}
        return stats["peak_bytes_in_use"] / 2**20 if "peak_bytes_in_use" in stats else None

    def rank_seed(self, seed: int) -> int:
        """Every process seeds alike: one program draws for the whole global batch (and assignments must agree)."""
        return int(seed)

    def exact_test_slice(self) -> tuple:
        """(slice, slices): every process scores its own slice of the test set, alone (``jax_fit.evaluate``); the
        trainer adds up the slices' sums."""
        return self.world.process, self.world.processes

    # --- the input and the loop (jax_data.py, jax_fit.py) ---
    def train_input(self, data, *, batch_size, rank, size, shard, seed, augment, placement="auto", **_tf_data):
        """This process's ranks' training images on their devices, drawn and augmented inside the compiled step."""
        from cifar_dist.training.engines.jax_data import train_set  # lazy: JAX

        loaded = tensorflow_on_gpus_line(self.world.gpu, sys.modules)
        if loaded and self.world.is_chief:
            log.warning("%s", loaded)

        return train_set(
            data,
            batch_size=batch_size,
            rank=rank,
            size=size,
            shard=shard,
            seed=seed,
            augment_cfg=augment,
            placement=placement,
        )

    def eval_input(self, data, *, batch_size, rank, size, equal_shards):
        """This process's slice of the test images, scored on its first device (``jax_fit.evaluate``)."""
        from cifar_dist.training.engines.jax_data import eval_set  # lazy: JAX

        return eval_set(data, batch_size=batch_size, rank=rank, size=size, equal_shards=equal_shards)

    def fit(self, model, train, validation, **settings):
        """Keras' JAX training loop, fed from the device (``jax_fit.fit``)."""
        from cifar_dist.training.engines.jax_fit import fit, out_of_memory_in_one_line  # lazy: JAX

        average = self.average_numbers if self.world.processes > 1 else None  # each process validates its slice
        with out_of_memory_in_one_line("training"):
            return fit(
                model,
                train,
                validation=validation,
                average=average,
                timings=self.timings,
                programs=self.eval_programs,
                **settings,
            )

    def evaluate(self, model, stream, outputs=("",)) -> dict:
        """``model.evaluate(..., return_dict=True)`` of this process's ``stream``, computed here alone."""
        from cifar_dist.training.engines.jax_fit import evaluate, out_of_memory_in_one_line  # lazy: JAX

        with out_of_memory_in_one_line("scoring the test set"):
            return evaluate(model, stream, outputs, programs=self.eval_programs)

    def ramps_lr_in_schedule(self, flavor: int) -> bool:
        """Warmup and step decay are the Keras 3 lr schedule's (``schedules.HorovodLr``)."""
        return True

    def lr_callbacks(self, flavor: int, trainer_cfg, lr: float, steps: int, is_chief: bool) -> list:
        """None: the schedule ramps the lr."""
        return []

    # --- small Python objects between processes ---
    def broadcast_object(self, obj):
        if self.world.processes == 1:
            return obj
        payload = _as_bytes(obj) if self.world.is_chief else np.zeros(0, np.uint8)
        length = int(self.multihost.broadcast_one_to_all(np.int32(len(payload))))
        if not self.world.is_chief:
            payload = np.zeros(length, np.uint8)
        received = self.multihost.broadcast_one_to_all(payload)
        return obj if self.world.is_chief else pickle.loads(np.asarray(received).tobytes())

    def allgather_object(self, obj) -> list:
        if self.world.processes == 1:
            return [obj]
        payload = _as_bytes(obj)
        lengths = np.asarray(self.multihost.process_allgather(np.array([len(payload)], np.int32))).reshape(-1)
        padded = np.zeros(int(lengths.max()), np.uint8)
        padded[: len(payload)] = payload
        rows = np.asarray(self.multihost.process_allgather(padded))
        return [pickle.loads(rows[i, :n].tobytes()) for i, n in enumerate(lengths)]

    def any_rank(self, flag: bool) -> bool:
        """True on every process when ``flag`` is true on any one (a collective)."""
        return any(self.allgather_object(bool(flag)))

    # --- the model ---
    def distributed_optimizer(self, optimizer, compression: str = "none"):
        """The optimizer as it is: the step's XLA program reduces the gradients over the global batch."""
        return optimizer

    def predict_here(self, model, images):
        """``model``'s outputs for ``images``, computed in this process alone from its copy of the weights
        (``predict`` of a distributed model is a collective over the global batch, with job-wide outputs)."""
        import jax  # lazy: JAX loads with the engine

        if not model.built:
            model(images[:1])  # a subclassed model's variables (every process alike)

        def outputs_of(trainable, non_trainable, images):
            return model.stateless_call(trainable, non_trainable, images, training=False)[0]

        # One compiled program on this process's default device (its inputs are host arrays), not one per op: on
        # a GPU each eager op is a program of its own to load (~60 for the speedrun's net, ~0.6 s).
        outputs = jax.jit(outputs_of)(
            [_local_value(v) for v in model.trainable_variables],
            [_local_value(v) for v in model.non_trainable_variables],
            images,
        )
        return [np.asarray(o) for o in outputs] if isinstance(outputs, (list, tuple)) else np.asarray(outputs)

    def broadcast_model(self, model, variables) -> None:
        """Copy rank 0's ``variables`` to every process (they agree already: same seed, same checkpoint)."""
        if self.world.processes == 1:
            return
        values = self.multihost.broadcast_one_to_all([_local_value(v) for v in variables])
        for variable, value in zip(variables, values):
            variable.assign(np.asarray(value))

    def average_variables(self, variables, name: str) -> None:
        """Nothing to do: a variable is one array for the whole job (BatchNorm's statistics are the global batch's)."""

    def average_numbers(self, values) -> np.ndarray:
        """The mean over the processes of a float vector (every process passes the same length)."""
        gathered = self.multihost.process_allgather(np.asarray(values, np.float32))
        return np.asarray(gathered, np.float64).mean(axis=0)

    def metric_averaging(self, model):
        """None: the metrics are the global batch's already."""
        return None

    def restore_latest(self, model, directory: Path) -> checkpoints.Restored:
        """Every process loads the newest checkpoint that loads, from the bytes rank 0 reads and broadcasts."""
        listed = self.broadcast_object(checkpoints.list_checkpoints(directory) if self.world.is_chief else None)
        with tempfile.TemporaryDirectory(prefix="cifar_dist-restore-") as scratch:

            def fetch(path: Path) -> Path:
                local = Path(scratch) / path.name
                local.write_bytes(self.broadcast_object(path.read_bytes() if self.world.is_chief else None))
                return local

            return checkpoints.restore_latest(model, directory, listed=listed, fetch=fetch)


def _as_bytes(obj) -> np.ndarray:
    return np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)


def _local_value(variable) -> np.ndarray:
    """This process's copy of a replicated variable."""
    return np.asarray(variable.value.addressable_data(0))


def select_keras_backend() -> None:
    """Keras 3 on JAX in this process: set before Keras is imported (Keras fixes its backend when it loads)."""
    keras = sys.modules.get("keras")
    if keras is not None and getattr(keras, "backend", None) is not None and keras.backend.backend() != BACKEND:
        raise JaxEngineError(
            f"engine=jax needs Keras 3 on JAX, but this process loaded Keras on {keras.backend.backend()} already "
            "(an in-process sweep over engines?); run each engine in its own process (launcher=mpirun)"
        )
    os.environ["KERAS_BACKEND"] = BACKEND


def limit_xla_threads(threads: int) -> None:
    """XLA's CPU thread pool sized to this process's share of the cores (as TensorFlow's is on Horovod)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "intra_op_parallelism_threads" in flags:  # the user's own setting wins
        return
    os.environ["XLA_FLAGS"] = (
        f"{flags} --xla_cpu_multi_thread_eigen={str(threads > 1).lower()} "
        f"intra_op_parallelism_threads={threads}".strip()
    )


def tensorflow_on_gpus_line(gpus: str, modules) -> Optional[str]:
    """What a JAX process on GPUs says when TensorFlow was loaded into it (a tf.data factory imports it): its GPU
    build makes JAX's NCCL collectives fail on several GPUs (jax-ml/jax#34918, #39167). None where it was not, or
    on CPUs."""
    if not gpus or "tensorflow" not in modules:
        return None
    return (
        "TensorFlow is loaded in this JAX process (the data factory's tf.data, read once into arrays): on several "
        "GPUs its GPU build can break JAX's NCCL collectives (jax-ml/jax#34918); a factory returning "
        "cifar_dist.data.DataArrays (numpy) keeps it out, or install tensorflow-cpu"
    )
