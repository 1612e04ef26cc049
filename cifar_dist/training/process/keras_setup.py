"""What Keras must know before a model is built: its random seeds, its dtype policy, its determinism.

Set for the Keras the model is written in (``keras_flavor``): tf.keras
(Keras 2) keeps its own global policy and random state apart from Keras 3's.
Keras 2's are always set (TensorFlow's seed is shared by both on TensorFlow's
backend); Keras 3's only for a Keras 3 model, so a Keras 2 run never imports
Keras 3.
"""

from __future__ import annotations

from cifar_dist.common.errors import CifarDistError
from cifar_dist.common.keras_flavor import KERAS3
from cifar_dist.training.process.hardware import cpu_supports_bfloat16


class PrecisionError(CifarDistError, RuntimeError):
    pass


def precision_policy(precision: str, on_gpu: bool, cpu_bfloat16: bool) -> str:
    """The Keras dtype policy for trainer.precision on this hardware.

    mixed: float16 maths on a GPU, bfloat16 on a CPU with bfloat16
    instructions, and an error elsewhere (emulated bfloat16 is slower than
    float32). auto: the same where it is native, float32 where it is not, so
    a recipe such as experiment=fast runs on any machine.
    """
    if precision == "float32":
        return "float32"
    if on_gpu:
        return "mixed_float16"
    if cpu_bfloat16:
        return "mixed_bfloat16"
    if precision == "auto":
        return "float32"
    raise PrecisionError(
        "trainer.precision=mixed needs a GPU or a CPU with bfloat16 instructions (avx512_bf16/amx); "
        "use trainer.precision=float32, or auto to use mixed precision only where it is native"
    )


def prepare_keras(
    flavor: int, seed: int, precision: str, on_gpu: bool, deterministic: bool, on_tensorflow: bool = True
):
    """Seed, dtype policy and (with ``deterministic``) seedable layer randomness for ``flavor``; returns the policy.

    ``seed`` is this rank's (trainer.seed + rank): dropout differs across ranks as
    it would on one rank over more data; the initial weights are rank 0's anyway
    (the engine broadcasts them). ``on_tensorflow``: the model runs on TensorFlow
    (Keras 2, or Keras 3 on its TensorFlow backend), whose own seed and policy
    are set too; a Keras 3 model on JAX never imports TensorFlow."""
    policy = precision_policy(precision, on_gpu, cpu_supports_bfloat16())
    if on_tensorflow:
        import tensorflow as tf  # lazy: TensorFlow

        if deterministic:
            tf.config.experimental.enable_op_determinism()
            # Dropout from tf.random.Generator state that ReseedEachEpoch resets
            # per epoch, so a resumed run equals an uninterrupted one bit for bit.
            tf.keras.backend.experimental.enable_tf_random_generator()
        tf.keras.utils.set_random_seed(seed)
        # Always set: in an in-process sweep an earlier point's policy would linger.
        tf.keras.mixed_precision.set_global_policy(policy)
    if flavor == KERAS3:
        import keras  # lazy: Keras 3

        keras.utils.set_random_seed(seed)  # Keras 3's own SeedGenerator state too
        keras.mixed_precision.set_global_policy(policy)
    return policy
