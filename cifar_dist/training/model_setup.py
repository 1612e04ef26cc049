"""The model the trainer trains: built from the model option, checked, compiled to average over the ranks.

``probe_model_flavor`` builds it once before any data is read (a model that
cannot train here fails then, in one line); ``instantiate_model`` builds the
real one once the data says how many classes there are; ``compile_distributed``
compiles it with the optimizer the engine makes average its gradients, and
``create_optimizer_slots`` creates the optimizer's variables before the first
step, so that rank 0's can be copied to every rank (``trainer.restore_or_start``).

Imports: as the trainer's (its module docstring): nothing here imports
TensorFlow or Keras at module level; the builders do when they are called,
after the engine's start.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Dict

import hydra.utils

from cifar_dist.common.errors import ConfigError
from cifar_dist.common.keras_flavor import KERAS2, KERAS3, keras_argument, keras_module
from cifar_dist.common.keras_internals import create_legacy_optimizer_slots
from cifar_dist.models.keras_checks import build_failure, check_backend, check_model

if TYPE_CHECKING:
    from cifar_dist.training.run import Run

log = logging.getLogger(__name__)


def instantiate_model(model_cfg, num_classes: int, keras_version: int):
    """The model option's builder called with ``num_classes`` and, if it declares the parameter, the Keras to use."""
    keras = keras_argument(hydra.utils.get_method(model_cfg._target_), keras_version)
    return hydra.utils.instantiate(model_cfg, num_classes=num_classes, **keras)


BUILT_IN_MODELS = "cifar_dist.models."  # the built-in builders' package: one Keras each, saveable, tested


def probe_model_flavor(cfg) -> int:
    """Build the model once with a stand-in class count and check it (one Keras, the engine's backend,
    saveable): returns its Keras. The real model is built once the data says how many classes there are.

    A built-in model built in the Keras the config names (``engine.keras``) is not built twice: its Keras is
    that one, and only the engine's backend is checked (a probe build costs ~0.5 s on a CPU, ~1.8 s on a GPU)."""
    keras_asked = cfg.engine.get("keras")
    if str(cfg.model._target_).startswith(BUILT_IN_MODELS) and keras_asked in (KERAS2, KERAS3):
        check_backend(int(keras_asked), cfg.engine.name, cfg.model._target_)
        return int(keras_asked)
    asked = cfg.model.get("num_classes")
    try:
        probe = instantiate_model(cfg.model, int(asked) if asked is not None else 10, cfg.engine.keras)
    except Exception as exc:  # the builder's own error, whatever it is: one line naming the builder
        raise build_failure(exc, cfg.model._target_) from None
    flavor = check_model(probe, cfg.model._target_, cfg.engine.name)
    # Forget the probe: the real model's layers get the names they would have had without it
    # ("scale", not "scale_1"), as saved models, checkpoints and messages show them.
    del probe
    keras_module(flavor).backend.clear_session()
    return flavor


def model_kwargs(model_cfg, data) -> Dict[str, Any]:
    """The model builder's ``num_classes``: the data's; a model.num_classes that disagrees is refused."""
    asked = model_cfg.get("num_classes")
    if asked is not None and int(asked) != data.num_classes:
        raise ConfigError(
            f"model.num_classes={asked} but {data.source} has {data.num_classes} classes; "
            "leave model.num_classes unset (it comes from the data)"
        )
    return {"num_classes": data.num_classes}


def make_optimizer(optimizer_cfg, lr_or_schedule, flavor: int):
    """The optimizer option's factory called with the lr (a float or a schedule) and, if it declares it, the Keras."""
    # (_partial_: a LearningRateSchedule is no float for the typed config node)
    factory = hydra.utils.instantiate(optimizer_cfg, _partial_=True)
    return factory(lr=lr_or_schedule, **keras_argument(factory.func, flavor))


def steps_per_call(flavor: int, steps_per_epoch: int, asked: int) -> int:
    """trainer.steps_per_execution as the model's Keras can honour it.

    Keras 2 ends an epoch's last call early. Keras 3 runs whole calls: with 63
    steps an epoch and 16 a call it trains 64 and takes the next epoch's first
    batch, so epochs no longer match their data (and a resumed run differs from
    one never stopped). For Keras 3 the largest divisor of the epoch's steps up
    to ``asked`` is used."""
    if flavor == KERAS2 or steps_per_epoch % asked == 0:
        return asked
    fitting = max(d for d in range(1, min(asked, steps_per_epoch) + 1) if steps_per_epoch % d == 0)
    log.info(
        "trainer.steps_per_execution=%d runs as %d (Keras 3 needs a divisor of the epoch's %d steps)",
        asked,
        fitting,
        steps_per_epoch,
    )
    return fitting


def compile_distributed(run: Run, model, optimizer, compile_kwargs, steps_per_execution: int) -> None:
    """Compile ``model`` with ``optimizer`` made to average its gradients over the ranks.

    ENGINE: Keras 2's distributed optimizer is Horovod's wrapper, given to
    compile; a Keras 3 optimizer is wrapped as compile left it (Keras 3 puts a
    LossScaleOptimizer around it under mixed_float16, whose finiteness check
    must see the averaged gradients, or ranks could disagree on skipping a step).
    """
    t = run.trainer
    compression = t.compression.value
    if run.flavor == KERAS2:
        optimizer = run.engine.distributed_optimizer(optimizer, compression)
    model.compile(
        optimizer=optimizer,
        **compile_kwargs,
        jit_compile=run.engine.facts.xla_only or bool(t.jit_compile),
        steps_per_execution=steps_per_execution,
    )
    if run.flavor == KERAS3:
        run.engine.distributed_optimizer(model.optimizer, compression)


def create_optimizer_slots(optimizer, variables) -> None:
    """Create the optimizer's step counter, hyperparameters and slots now, before any step.

    HOROVOD: the broadcast in restore_or_start matches variables across
    ranks by name, and legacy optimizers name their slots after the scope
    they are created in. Creating them here, the same way on every rank,
    makes rank 0 restoring a checkpoint and ranks starting fresh name them
    alike. Keras' new optimizers do this with the public ``build``; Keras 2's
    legacy optimizers, which this project uses (training/optimizers.py), and
    their LossScaleOptimizer have no public equivalent: tf-keras' own HDF5
    loader calls ``_create_all_weights`` for the same purpose, and so do we.
    """
    if hasattr(optimizer, "build"):
        optimizer.build(variables)
    else:
        create_legacy_optimizer_slots(optimizer, variables)


def optimizer_variables(optimizer) -> list:
    """The optimizer's variables (a method in Keras 2, a property in Keras 3)."""
    found = optimizer.variables
    return list(found() if callable(found) else found)
