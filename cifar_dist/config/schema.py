"""The config options of data, model, optimizer, trainer, engine, task and tracking.

Each option is one dataclass marked ``@config_option(group, name)``
(``options.py``): its fields are the schema, so that a misspelt key or a
value of the wrong type fails at start-up instead of deep inside training,
and its defaults are the option's values (no YAML file repeats them). A
variant of an option is a subclass that changes defaults (``data=sample``).

Launchers keep their options next to their code (``launchers/*.py``,
``launchers/*/config.py``); ``all_options.register_configs`` imports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from omegaconf import MISSING, OmegaConf, open_dict

from cifar_dist.common.engine_facts import AUTO, HOROVOD, JAX, TENSORFLOW
from cifar_dist.config.data_options import AugmentConfig, DataConfig, SampleDataConfig, data_schema  # noqa: F401  (the data options; re-exported)
from cifar_dist.config.options import config_option


class EpochPolicy(str, Enum):
    # The seed tutorial's rule: every rank walks the whole training set each
    # epoch (shuffled differently per rank) and the epoch count is divided by
    # the world size, ceil(epochs / size).
    divide = "divide"
    # Each rank walks a disjoint 1/size shard per epoch; epochs stay as given.
    shard = "shard"


class LrScaling(str, Enum):
    linear = "linear"  # lr * world size (Goyal et al.; what the seed does)
    none = "none"


class Precision(str, Enum):
    float32 = "float32"
    mixed = "mixed"  # mixed_float16 on GPU, mixed_bfloat16 on CPUs that support it (else an error)
    auto = "auto"  # mixed where the hardware computes it natively, float32 elsewhere


class Accelerator(str, Enum):
    auto = "auto"  # the GPUs where there are any, else the CPU
    gpu = "gpu"  # GPUs or a one-line refusal
    cpu = "cpu"  # the CPU, GPUs or not


class Execution(str, Enum):
    auto = "auto"
    loop = "loop"  # steps_per_execution steps in one compiled loop
    steps = "steps"  # one compiled step per dispatch


class LrSchedule(str, Enum):
    none = "none"  # the optimizer's lr (with warmup_epochs / lr_decay_epochs if set)
    # Per step: linear from start_factor x lr up to lr at peak_fraction of all
    # steps, then linear down to end_factor x lr (one-cycle / airbench's triangle).
    triangular = "triangular"


class Tta(str, Enum):
    none = "none"
    flip = "flip"  # mean of the image and its mirror image
    flip_translate = "flip_translate"  # also both shifted by one pixel (airbench's level 2)


@dataclass
class ScheduleConfig:
    kind: LrSchedule = LrSchedule.none
    peak_fraction: float = 0.25
    start_factor: float = 0.2
    end_factor: float = 0.05


class Compression(str, Enum):
    none = "none"
    fp16 = "fp16"  # Horovod's fp16 gradient compression


@dataclass
class ModelConfig:
    """The base of the built-in models' options. ``Config.model`` itself is untyped so that a
    user's own ``model/<name>.yaml`` (``_target_`` and its builder's arguments) composes; its keys
    are checked against the builder's signature instead (``cifar_dist/models/builder.py``)."""

    _target_: str = MISSING
    num_classes: Optional[int] = None  # None: the data's class count (set it only to assert it)


@config_option("model", "seed_cnn")
@dataclass
class SeedCnnConfig(ModelConfig):
    """The seed tutorial's CNN (Keras' cifar10_cnn.py): Conv32-Conv32-Pool-Drop,
    Conv64-Conv64-Pool-Drop, Dense512-Drop, Dense10 softmax. 1,250,858 parameters."""

    _target_: str = "cifar_dist.models.seed_cnn.build"
    input_shape: List[int] = field(default_factory=lambda: [32, 32, 3])
    conv_dropout: float = 0.25
    dense_units: int = 512
    dense_dropout: float = 0.5


@config_option("model", "resnet9")
@dataclass
class ResNet9Config(ModelConfig):
    """David Page's ResNet-9 (DAWNBench, 94 % on CIFAR-10 in 24 epochs): prep conv,
    conv-pool + residual, conv-pool, conv-pool + residual, global max pool,
    linear x 0.125. Channels width, 2w, 4w, 8w; width 64 is Page's (6.57 M
    parameters), model.width=16 fits a 2-core CPU."""

    _target_: str = "cifar_dist.models.resnet9.build"
    width: int = 64
    batchnorm_momentum: float = 0.9
    output_scale: float = 0.125


@config_option("model", "airbench")
@dataclass
class AirbenchConfig(ModelConfig):
    """airbench94's net (Keller Jordan, 2024): a frozen 2x2 patch-whitening conv fitted
    to the training images, three conv-pool-BN-GELU blocks with identity-initialised
    convs, global max pool, linear x 1/9. model.widths=[64,256,256] is airbench94's."""

    _target_: str = "cifar_dist.models.airbench.build"
    widths: List[int] = field(default_factory=lambda: [64, 256, 256])
    whitening_kernel: int = 2
    batchnorm_momentum: float = 0.6  # Keras: moving = 0.6 moving + 0.4 batch (airbench passes 1 - 0.6 to PyTorch)
    output_scale: float = 1 / 9


@dataclass
class OptimizerConfig:
    # A factory in cifar_dist.training.optimizers; ``lr`` is the single-rank
    # learning rate, scaled by trainer.lr_scaling at build time.
    _target_: str = MISSING
    lr: float = 1e-4


@config_option("optimizer", "rmsprop")
@dataclass
class RmspropConfig(OptimizerConfig):
    """The seed's optimizer: RMSprop(lr=1e-4, decay=1e-6)."""

    _target_: str = "cifar_dist.training.optimizers.rmsprop"
    decay: float = 1e-6
    rho: float = 0.9
    epsilon: float = 1e-7


@config_option("optimizer", "sgd")
@dataclass
class SgdConfig(OptimizerConfig):
    _target_: str = "cifar_dist.training.optimizers.sgd"
    lr: float = 0.01
    momentum: float = 0.9
    nesterov: bool = False
    decay: float = 0.0


@config_option("optimizer", "sgdw")
@dataclass
class SgdwConfig(OptimizerConfig):
    # Nesterov SGD with decoupled weight decay (w -= lr * weight_decay * w
    # each step, outside the momentum), not applied to variables whose name
    # contains one of exclude_from_weight_decay (BatchNorm and biases by default).
    _target_: str = "cifar_dist.training.optimizers.sgdw"
    lr: float = 0.05
    momentum: float = 0.9
    nesterov: bool = True
    weight_decay: float = 5e-4
    exclude_from_weight_decay: List[str] = field(
        default_factory=lambda: ["batch_normalization", "bias", "gamma", "beta"]
    )
    # {variable-name substring: lr factor}; airbench trains BatchNorm biases
    # ("beta") at 64x the lr. Empty = one lr for all.
    lr_multipliers: Dict[str, float] = field(default_factory=dict)


@config_option("optimizer", "adam")
@dataclass
class AdamConfig(OptimizerConfig):
    _target_: str = "cifar_dist.training.optimizers.adam"
    lr: float = 1e-3
    decay: float = 0.0
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-7


@config_option("trainer", "default")
@dataclass
class TrainerConfig:
    """The seed's schedule: 100 epochs divided over the ranks (ceil(100 / size)), batch 32 per rank."""

    epochs: int = 100
    batch_size: int = 32  # per rank, as in the seed
    epoch_policy: EpochPolicy = EpochPolicy.divide
    lr_scaling: LrScaling = LrScaling.linear
    # Horovod's LearningRateWarmupCallback over this many epochs (0 = off).
    warmup_epochs: float = 0.0
    # Optional step schedule applied after warmup: multiply the lr by
    # lr_decay_factor at each epoch in lr_decay_epochs (empty = off).
    lr_decay_epochs: List[int] = field(default_factory=list)
    lr_decay_factor: float = 0.1
    # A per-step schedule over the whole run (Keras LearningRateSchedule on the
    # optimizer's step count; its lr is the scaled one, so it follows the global batch).
    lr_schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    # Cross-entropy against (1 - s) one-hot + s / classes (airbench: 0.2).
    label_smoothing: float = 0.0
    # Test-time augmentation in the final test evaluation (metrics.json "test";
    # without it in "test_plain").
    tta: Tta = Tta.none
    # airbench's lookahead (training/recipe/lookahead.py): the weights pulled towards
    # their slow average, with this decay per 5 steps reached at the last step
    # (rising as (step/total)^3 from 0). 0 = off; airbench: 0.77 (0.95^5).
    lookahead_decay: float = 0.0
    # Validate (val_loss/val_accuracy) after every k-th epoch and always after
    # the last; 0: after the last only (airbench). 1 (the seed's): every epoch.
    validate_every: int = 1
    seed: int = 42
    deterministic: bool = False  # tf.config.experimental.enable_op_determinism()
    # auto: resume when the run dir holds checkpoints, else start fresh;
    # true: resume, fail when there is nothing to resume from;
    # false: start fresh, refuse to touch existing checkpoints.
    # (A string, not an Enum: the command line's true/false arrive as booleans.)
    resume: str = "auto"
    # Resume although the model builder's source or the data's files changed since the run started
    # (recorded in the run dir, cifar_dist/rundir/fingerprint.py); the new ones are recorded then.
    resume_despite_changes: bool = False
    # Per-rank CPU threads; 0 = automatic: TensorFlow's TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS where set,
    # else the cores the rank is bound to, or the host's cores / its ranks (training/process/threads.py).
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    jit_compile: bool = False
    # TensorFlow's oneDNN CPU kernels instead of Eigen's. TensorFlow enables
    # them by itself only on CPUs with AVX512-VNNI/BF16 or AMX; on AVX2 CPUs
    # they trained the seed CNN up to ~1.2x faster here (docs/benchmarks-history.md). Same float32
    # maths, summed in another order. No effect on GPU ops.
    onednn: bool = True
    # Train steps per call into the framework (Keras' compile(steps_per_execution); engine=jax: steps per
    # compiled execution, any number of steps per epoch). Same maths, less Python between steps: +4-8 % images/s
    # on 2 CPU cores at batch 32 (docs/benchmarks-history.md), far more on a GPU. Per-batch callbacks (Horovod's
    # lr warmup and schedule, lookahead) then act every this many steps; 1 = Keras' default.
    steps_per_execution: int = 16
    precision: Precision = Precision.float32
    compression: Compression = Compression.none
    # What the processes train on: auto (the GPUs where there are any: engine=jax every GPU a process is given,
    # engines/jax_devices.py; Horovod and TensorFlow one per process, process/tf_devices.py), gpu (refused in one
    # line where the engine finds none), cpu (the GPUs hidden). Each GPU trained is one rank (engines/world.py).
    accelerator: Accelerator = Accelerator.auto
    # engine=jax: how an execution's steps run. loop: as one compiled loop (one dispatch per execution); steps:
    # one compiled step per dispatch; auto: the loop on GPUs, steps on CPUs, where XLA runs a step inside a loop
    # several times slower (docs/benchmarks.md).
    execution: Execution = Execution.auto
    # engine=jax: JAX's persistent compilation cache, so that a second run or sweep point of the same model and
    # shapes loads its compiled steps instead of compiling them again ("" = off; JAX_COMPILATION_CACHE_DIR wins).
    compilation_cache: str = "~/.cache/cifar_dist/jax"
    verbose: int = 1  # Keras verbosity on rank 0 (other ranks are always silent)
    tensorboard: bool = True
    plot: bool = True
    save_model: bool = True
    # Checkpoints kept in <run dir>/checkpoints (newest first; 0 = all). Each
    # holds weights and optimizer state (~10 MB for the seed CNN).
    keep_checkpoints: int = 5
    # Write a checkpoint after an epoch only once this many seconds have passed since the last one (and always
    # after the last epoch and one the run stops after); 0 = after every epoch. For runs of sub-second epochs
    # (experiment=speedrun on a GPU), where writing a checkpoint would cost more than the epoch.
    checkpoint_interval_s: float = 0.0
    # Stop after this many epochs of *this* invocation (0 = no limit); used to
    # split a long run over several invocations (or tests of resume).
    max_epochs_per_run: int = 0


@dataclass
class TaskConfig:
    # What the in-process launcher runs on every rank: a function (cfg, output_dir) -> metrics.
    _target_: str = MISSING
    name: str = MISSING


@config_option("task", "train")
@dataclass
class TrainTaskConfig(TaskConfig):
    """``task=train`` (the default): train (or resume) the model."""

    _target_: str = "cifar_dist.training.trainer.train"
    name: str = "train"


@dataclass
class EvaluateTaskConfig(TaskConfig):
    _target_: str = "cifar_dist.evaluation.task.evaluate"
    name: str = "evaluate"


@dataclass
class EvaluateConfig:
    # A run dir (its saved model, else its newest checkpoint) or a .h5 file.
    model: str = MISSING
    # "test" / "train": that split of the data group (a run dir's own data
    # unless the command names data=...); otherwise a path: a CIFAR batch
    # file, a glob of them, a folder of cifar-10-batches-py, or a folder of
    # images, resized to the model's input (labelled by sub-folder name when
    # the names are class names).
    input: str = "test"
    batch_size: int = 256
    predictions: bool = True  # write predictions.csv
    # Load models whose layers run Python code (Lambda, custom classes).
    # false: such a model is refused, since loading it would run that code.
    trust_model: bool = False
    # Import the code a run dir's saved config names for its data (data=custom's _target_), when
    # evaluate.model is a run dir (or a file in it) and the command names no data.
    # false: refused in one line naming the module, since a run dir someone sent may name their code.
    trust_run_code: bool = False
    tta: Tta = Tta.none  # test-time augmentation (trainer.tta's options)


@config_option("task", "evaluate", package="_global_")
@dataclass
class EvaluateTask:
    """``task=evaluate``: score a trained model on a test set, sharded over the ranks::

        python -m cifar_dist task=evaluate evaluate.model=<run dir or .h5> [data=sample]
        ... evaluate.input=<CIFAR batch file(s) or a folder of images>

    A run dir is scored on the data it was trained on unless data=... is given.

    Writes evaluation.json, confusion_matrix.png and predictions.csv to the run dir.
    It sets two top-level nodes, ``task`` and ``evaluate``."""

    task: EvaluateTaskConfig = field(default_factory=EvaluateTaskConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)


class TrackingBackend(str, Enum):
    none = "none"
    mlflow = "mlflow"


@config_option("tracking", "none")
@dataclass
class TrackingConfig:
    """``tracking=none`` (the default): no experiment tracker; the run dir
    (metrics.json, plots, .hydra/) is the record."""

    # none: no tracker. mlflow: rank 0 records every job as an MLflow run
    # (cifar_dist/tracking/, docs/tracking.md).
    backend: TrackingBackend = TrackingBackend.none
    # null: $MLFLOW_TRACKING_URI when set, else sqlite:///outputs/mlflow.db
    # (relative to the directory the job is started from), e.g. http://host:5000.
    uri: Optional[str] = None
    experiment: str = "cifar_dist"
    # Jobs of cluster launchers (batchai): "import" = the nodes do not log; the
    # launching machine imports the run dir once its outputs are downloaded.
    # "nodes" = rank 0 logs from the cluster (uri must be reachable there),
    # and the download then fills whatever did not reach the tracker.
    remote: str = "import"
    log_model: bool = True  # the saved model as an artifact (~5 MB for the seed CNN)
    # Bounds on every request to a tracking server (MLflow's own
    # MLFLOW_HTTP_REQUEST_* variables, which win when set): a server that is
    # down or slow costs at most about (retries + 1) x timeout, then one warning.
    # Whole numbers: MLflow parses all three as int.
    http_timeout_s: int = 10
    http_max_retries: int = 2
    http_backoff_factor: int = 1


@config_option("tracking", "mlflow")
@dataclass
class MlflowTrackingConfig(TrackingConfig):
    """``tracking=mlflow``: record every job as an MLflow run, from rank 0 only
    (docs/tracking.md): params = the composed config, tags = launcher/ranks/host/
    versions/git commit, per-epoch metrics as they happen, test metrics, and the
    run's artifacts. Default store: sqlite:///outputs/mlflow.db (no server); see it with
    ``mlflow ui --backend-store-uri sqlite:///outputs/mlflow.db``."""

    backend: TrackingBackend = TrackingBackend.mlflow


@dataclass
class EngineConfig:
    """What makes the ranks one data-parallel job (cifar_dist/training/engines/)."""

    name: str = MISSING
    # The Keras the built-in models are built with: 2 (tf.keras, i.e. tf-keras) or 3 (``import keras``).
    # Your own model is built with the Keras its module imports, whatever this says. (engine=auto: null, the
    # chosen engine's.)
    keras: Optional[int] = 2
    # Why the job trains on this engine, when engine=auto chose it (training/engines/choice.py); "" when named.
    why: str = ""


@config_option("engine", AUTO)
@dataclass
class AutoEngineConfig(EngineConfig):
    """engine=auto (the default): the engine is chosen when the job is launched, and recorded (the run dir's
    .hydra/config.yaml, metrics.json, the log): horovod where Horovod is installed; else tensorflow for one
    process and for several on CPUs, jax for several with GPUs. A resume keeps the engine its checkpoints were
    trained on. training/engines/choice.py, docs/engines.md."""

    name: str = AUTO
    # null: the chosen engine's default (2 on horovod and tensorflow, 3 on jax)
    keras: Optional[int] = None


@config_option("engine", HOROVOD.name)
@dataclass
class HorovodEngineConfig(EngineConfig):
    """engine=horovod: Horovod averages the gradients over MPI or Gloo; Keras 2 and Keras 3
    (on TensorFlow) models alike. Needs the horovod stack (docs/install.md). docs/engines.md."""

    name: str = HOROVOD.name


@config_option("engine", JAX.name)
@dataclass
class JaxEngineConfig(EngineConfig):
    """engine=jax: Keras 3 models on JAX, made one job by Keras' own data parallelism (keras.distribution),
    processes joined by jax.distributed; no Horovod. Keras 3 only: the built-ins are built in it. docs/engines.md."""

    name: str = JAX.name
    keras: int = 3


@config_option("engine", TENSORFLOW.name)
@dataclass
class TensorflowEngineConfig(EngineConfig):
    """engine=tensorflow: TensorFlow's kernels in every process, no Horovod; several processes average their
    gradients over MPI (mpi4py); Keras 2 and Keras 3 (on TensorFlow) models alike. What engine=auto trains on
    where Horovod is not installed: one process, or several on CPUs. docs/engines.md."""

    name: str = TENSORFLOW.name


ENGINE_SCHEMAS = {c.name: c for c in (AutoEngineConfig, HorovodEngineConfig, JaxEngineConfig, TensorflowEngineConfig)}


@dataclass
class Config:
    data: DataConfig = MISSING
    # A built-in option is typed by its dataclass (a misspelt key is refused by Hydra); a user's
    # model/<name>.yaml is checked against its builder's signature (models/builder.py).
    model: Any = MISSING
    optimizer: OptimizerConfig = MISSING
    trainer: TrainerConfig = MISSING
    engine: EngineConfig = MISSING
    launcher: Any = MISSING
    task: TaskConfig = MISSING
    evaluate: Optional[EvaluateConfig] = None
    tracking: TrackingConfig = field(default_factory=TrackingConfig)


def typed(cfg):
    """``cfg`` with its trainer and data nodes checked against their schemas.

    A config composed by Hydra is typed already; one loaded from a run's
    saved ``.hydra/config.yaml`` (to re-run it) is plain YAML, so enums are
    strings and typos would pass. Merging onto the schemas restores both
    (and gives a config saved before ``engine`` existed its default).
    """
    out = cfg.copy()
    with open_dict(out):
        out.trainer = OmegaConf.merge(OmegaConf.structured(TrainerConfig), cfg.trainer)
        out.data = typed_data(cfg.data)
        out.engine = engine_of(cfg)
    return out


def engine_of(cfg):
    """``cfg.engine`` typed; a config saved before engines existed trained on Horovod with Keras 2: the defaults."""
    node = cfg.get("engine") or {}
    schema = ENGINE_SCHEMAS.get(str(node.get("name")), HorovodEngineConfig)
    return OmegaConf.merge(OmegaConf.structured(schema), node)


def typed_data(data):
    """A ``data`` node (composed, or plain YAML from a run's ``.hydra/config.yaml``) merged onto its option's schema."""
    return OmegaConf.merge(OmegaConf.structured(data_schema(data.get("name"))), data)
