"""A saved model file of either Keras: its architecture as JSON, and the model itself.

``.h5``: a Keras 2 (tf.keras) HDF5 file, its architecture in the
``model_config`` attribute. ``.keras``: Keras 3's zip, its architecture in
``config.json``. Both are checked by ``model_trust`` before Keras builds
anything from them; Keras 3 additionally loads with ``safe_mode`` unless the
user trusts the file.

A ``.keras`` file is someone else's bytes: before anything reads it whole,
``keras3_archive`` opens it as a zip (a truncated or non-zip file is named as
such: Keras 3 itself says "File not found" for one) and checks the size its
``config.json`` declares against ``CONFIG_JSON_LIMIT`` (zipfile reads a member
no further than its declared size), so a 700 MB architecture is refused
instead of read into memory, with or without ``evaluate.trust_model``.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any, Dict, Optional

from cifar_dist.evaluation.custom_objects import register_custom_objects

KERAS3_SUFFIX = ".keras"
# config.json of the largest model here is a few hundred KB; a real architecture is far below this.
CONFIG_JSON_LIMIT = 16 * 2**20


class ModelFileError(ValueError):
    """A model file that is not what its name says, or too large to read safely (one line, naming it)."""


def is_keras3_file(path: Path) -> bool:
    return Path(path).suffix == KERAS3_SUFFIX


def keras3_config_json(path: Path) -> bytes:
    """The ``config.json`` of the ``.keras`` zip ``path``, read only when it declares at most ``CONFIG_JSON_LIMIT``
    bytes; ``ModelFileError`` for a file that is not a complete zip, has no ``config.json`` or declares more."""
    limit = CONFIG_JSON_LIMIT
    try:
        with zipfile.ZipFile(path) as archive:
            try:
                member = archive.getinfo("config.json")
            except KeyError:
                raise ModelFileError(f"{path} is a zip without config.json, not a Keras 3 .keras model") from None
            if member.file_size > limit:
                raise ModelFileError(
                    f"{path}'s config.json is {member.file_size / 2**20:.0f} MiB, over the "
                    f"{limit / 2**20:.0f} MiB a model's architecture needs; refusing to read it"
                )
            with archive.open(member) as f:
                return f.read(limit + 1)
    except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile) as exc:
        raise ModelFileError(
            f"{path} is not a complete .keras (zip) file ({exc}): truncated, or another format"
        ) from None


def architecture(path: Path) -> Optional[Any]:
    """The model's architecture config (no compile config: loading for scoring does not compile), or None."""
    if is_keras3_file(path):
        config = json.loads(keras3_config_json(path))
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
        keras3_config_json(path)  # Keras reads config.json whole, and calls a truncated file "not found"
        import keras  # lazy: Keras 3

        register_custom_objects(keras)  # this package's layers, under the names Keras 3 saved them by
        return keras.saving.load_model(
            path, compile=False, safe_mode=not trust_model, custom_objects=custom_objects or None
        )
    import tensorflow as tf  # lazy: TensorFlow

    register_custom_objects(tf.keras)  # this package's layers and schedules, under the names Keras 2 saved them by
    return tf.keras.models.load_model(path, compile=False, custom_objects=custom_objects or None)
