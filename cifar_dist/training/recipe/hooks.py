"""What the modern recipe (experiment=speedrun) adds to the training loop, as a few calls from trainer.py.

Every piece is config any model can use and a no-op at the seed's defaults:
data-fitted layers (``blocks.adapt``), label smoothing, the per-step lr
schedule, BatchNorm statistics averaged across ranks, and test-time
augmentation in the final test.
"""

from __future__ import annotations

from typing import Any, Dict, List

from cifar_dist.common.keras_ops import keras_or_default
from cifar_dist.models.tta import plain_and_tta


def fit_to_data(model, data, sample: int = 10_000) -> int:
    """Fit the layers that learn from the training images (airbench's whitening) on up to ``sample`` of them.

    Every rank fits the same images; rank 0's result is broadcast anyway.
    """
    from cifar_dist.models.blocks import adapt, data_fitted_layers  # lazy: TensorFlow

    if not data_fitted_layers(model):  # the seed's CNN: nothing to fit, no copy of the images
        return 0
    return adapt(model, data.fit_images(sample))


def loss(label_smoothing: float, keras=None):
    """The seed's categorical cross-entropy, with label smoothing when asked for (``keras``: the model's Keras
    module; None is tf.keras)."""
    if not label_smoothing:
        return "categorical_crossentropy"
    return keras_or_default(keras).losses.CategoricalCrossentropy(label_smoothing=label_smoothing)


def learning_rate(
    lr: float, trainer_cfg, steps_per_epoch: int, epochs: int, keras=None, size: int = 1, ramps: bool = False
):
    """The optimizer's lr: a float or a schedule of ``keras`` (None: tf.keras). With ``ramps`` (the engine's
    ``ramps_lr_in_schedule``: every Keras 3 run, and Keras 2 runs without Horovod) the schedule also does what
    Horovod's warmup and step-decay callbacks do for Keras 2 runs on Horovod (``schedules.HorovodLr``; ``size``:
    the world size), since those callbacks can only set a Keras 2 optimizer's lr variable, and only under Horovod."""
    from cifar_dist.training.recipe.schedules import build_schedule  # lazy: TensorFlow

    if not ramps:
        return build_schedule(lr, trainer_cfg.lr_schedule, steps_per_epoch, epochs, keras)
    return build_schedule(
        lr,
        trainer_cfg.lr_schedule,
        steps_per_epoch,
        epochs,
        keras,
        warmup_epochs=trainer_cfg.warmup_epochs,
        decay_epochs=list(trainer_cfg.lr_decay_epochs),
        decay_factor=trainer_cfg.lr_decay_factor,
        size=size,
    )


def callbacks(model, trainer_cfg, total_steps: int, engine) -> List[Any]:
    """Callbacks to place before the writers (metrics, checkpoints): lookahead, then BatchNorm averaging."""
    from cifar_dist.training.recipe.batchnorm import AverageBatchNormStatistics, moving_statistics  # lazy: TensorFlow
    from cifar_dist.training.recipe.lookahead import Lookahead  # lazy: TensorFlow

    found = []
    if trainer_cfg.lookahead_decay > 0:
        found.append(Lookahead(total_steps, trainer_cfg.lookahead_decay))
    if moving_statistics(model):
        found.append(AverageBatchNormStatistics(engine))
    return found


def sync_model(model, engine) -> None:
    """Make every rank's model identical before it is fingerprinted, tested or saved (a collective)."""
    from cifar_dist.training.recipe.batchnorm import average_moving_statistics  # lazy: TensorFlow

    average_moving_statistics(model, engine)


def final_test(model, evaluate_exact, tta: str, compile_kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """metrics.json's "test" (with TTA when configured, "tta" says which) and "test_plain" (without).

    ``evaluate_exact(model, outputs)`` scores each output (metric-name prefix).
    Without TTA the model's own compiled test step (validation's) is reused;
    with it, one model scores every view in one pass and gives both numbers."""
    if tta == "none":
        (plain,) = evaluate_exact(model)
        return {"test": plain}

    both = plain_and_tta(model, tta)
    both.compile(
        loss={"plain": compile_kwargs["loss"], "tta": compile_kwargs["loss"]},
        metrics={"plain": compile_kwargs["metrics"], "tta": compile_kwargs["metrics"]},
    )
    plain, averaged = evaluate_exact(both, ("plain_", "tta_"))
    return {"test": dict(averaged, tta=tta), "test_plain": plain}


def run_info(trainer_cfg) -> Dict[str, Any]:
    return {
        "label_smoothing": trainer_cfg.label_smoothing,
        "lr_schedule": trainer_cfg.lr_schedule.kind.value,
        "tta": trainer_cfg.tta.value,
        "lookahead_decay": trainer_cfg.lookahead_decay,
    }
