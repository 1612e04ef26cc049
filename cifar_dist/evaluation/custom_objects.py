"""Every Keras object cifar_dist defines, registered with a given Keras: what loading a saved model needs.

``register_custom_objects(keras)`` defines (once per Keras) and registers with
that Keras' own registry, under package ``cifar_dist``, the layers
(``Scale``, ``PatchWhitening``), the lr schedules (``Triangular``,
``HorovodLr``, ``InverseTimeDecayed``) and, for Keras 3, the optimizers
(``RMSprop``, ``SGDW``), and returns them by registered name
(``"cifar_dist>Scale"``) and class name, as ``custom_objects`` for
``load_model``. Evaluation calls it before loading a model file of either
Keras. None of them runs code from the file: ``safe_mode=True`` loads them.
"""

from __future__ import annotations

from types import ModuleType
from typing import Dict

from cifar_dist.common.keras_flavor import KERAS3
from cifar_dist.common.keras_ops import module_flavor


def register_custom_objects(keras: ModuleType) -> Dict[str, type]:
    """This package's Keras classes for ``keras`` (tf.keras or Keras 3), registered; by registered and class name."""
    from cifar_dist.models.blocks import custom_layers  # lazy: TensorFlow
    from cifar_dist.training.recipe.schedules import schedule_classes  # lazy: TensorFlow

    classes = [*vars(custom_layers(keras)).values(), *vars(schedule_classes(keras)).values()]
    if module_flavor(keras) == KERAS3:
        from cifar_dist.training.recipe import keras3_optimizers  # lazy: TensorFlow, Keras 3

        classes += [keras3_optimizers.RMSprop, keras3_optimizers.SGDW]
        registered_name = keras.saving.get_registered_name
    else:
        from cifar_dist.training.recipe.sgdw import SGDW  # lazy: TensorFlow

        classes.append(SGDW)
        registered_name = keras.utils.get_registered_name
    found: Dict[str, type] = {}
    for cls in classes:
        found[registered_name(cls)] = cls
        found[cls.__name__] = cls
    return found
