"""A saved model file of either Keras: its architecture as JSON, and the model itself.

``.h5``: a Keras 2 (tf.keras) HDF5 file, its architecture in the
``model_config`` attribute. ``.keras``: Keras 3's zip, its architecture in
``config.json``. Both are checked by ``model_trust`` before Keras builds
anything from them; Keras 3 additionally loads with ``safe_mode`` unless the
user trusts the file.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any, Dict, Optional

from cifar_dist.custom_objects import register_custom_objects

KERAS3_SUFFIX = ".keras"


def is_keras3_file(path: Path) -> bool:
    return Path(path).suffix == KERAS3_SUFFIX


def architecture(path: Path) -> Optional[Any]:
    """The model's architecture config (no compile config: loading for scoring does not compile), or None."""
    if is_keras3_file(path):
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json"))
        return {k: v for k, v in config.items() if k != "compile_config"}
    import h5py  # lazy: h5py

    with h5py.File(path, "r") as f:
        raw = f.attrs.get("model_config")
    if raw is None:
        return None
    return json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else str(raw))


def load(path: Path, custom_objects: Dict[str, type], trust_model: bool):
    """The model in ``path``, uncompiled, built by the Keras that wrote it."""
    if is_keras3_file(path):
        import keras  # lazy: Keras 3

        register_custom_objects(keras)  # this package's layers, under the names Keras 3 saved them by
        return keras.saving.load_model(
            path, compile=False, safe_mode=not trust_model, custom_objects=custom_objects or None
        )
    import tensorflow as tf  # lazy: TensorFlow

    import cifar_dist.models.blocks  # noqa: F401  (registers the custom layers saved models may use)

    return tf.keras.models.load_model(path, compile=False, custom_objects=custom_objects or None)
