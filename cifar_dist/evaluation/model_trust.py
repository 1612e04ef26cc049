"""Does loading a model file run code that came with it? Checked before Keras reads it.

A Keras model file stores its architecture as JSON (HDF5: ``model_config``;
Keras 3's .keras zip: ``config.json``, model_files.py). Most
of it names built-in classes, but a ``Lambda`` layer carries marshalled
Python bytecode that runs when the model is rebuilt, a ``TFOpLambda`` calls
any TensorFlow op by name (``tf.io.write_file`` included), and a custom
class name resolves to whatever code is registered under it. Loading a model
someone sent must not run their code, so ``task=evaluate`` reads the JSON
with h5py first and refuses such a model in one line unless the user says
they trust it (``evaluate.trust_model=true``).

Your own model's layers (a ``keras.layers.Layer`` subclass in ``mymodels.py``)
are code you wrote, not the file's: the module of the ``model._target_`` you
evaluate with (``model=mine``) is trusted by name. It is imported (it is on
your PYTHONPATH, not in the file) and the layer classes it defines or
imports are accepted under their registered names and class names, and
handed to Keras as ``custom_objects``. A class name that resolves to
nothing trusted is still refused: the file cannot name a module to import.

Resume needs no such check: it rebuilds the configured architecture and
reads only arrays from a checkpoint (``checkpoints.restore``:
``model.load_weights`` plus the optimizer's arrays), never its code.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Set

from cifar_dist.common.keras_flavor import KERAS2, KERAS3, flavor_of, keras_module
from cifar_dist.common.keras_ops import PACKAGE
from cifar_dist.evaluation.model_files import architecture, is_keras3_file

# Layers whose config is code (bytecode, an op name or a method name to call).
CODE_LAYERS = {"Lambda", "TFOpLambda", "SlicingOpLambda", "ClassMethod", "InstanceMethod", "InstanceProperty"}
CONTAINERS = {"Sequential", "Functional", "Model"}
KERAS_MODULES = ("keras", "tf_keras")


def _class_names(node: Any) -> Iterator[dict]:
    """Every ``{"class_name": ...}`` object in a Keras config, depth first."""
    if isinstance(node, dict):
        if isinstance(node.get("class_name"), str):
            yield node
        for value in node.values():
            yield from _class_names(value)
    elif isinstance(node, list):
        for value in node:
            yield from _class_names(value)


def builtin_names(keras3: bool = False) -> Set[str]:
    """Class names that resolve to Keras's own layers, initializers, regularizers, constraints and dtype policies
    (of Keras 3 with ``keras3``, else of tf.keras)."""
    k = keras_module(KERAS3 if keras3 else KERAS2)
    # (Keras 3 names the tensors a functional model's layers are called on "__keras_tensor__": data, not code)
    names = set(CONTAINERS) | {"Policy", "DTypePolicy", "InputLayer"} | ({"__keras_tensor__"} if keras3 else set())
    for module in (k.layers, k.initializers, k.regularizers, k.constraints):
        names |= {n for n in dir(module) if isinstance(getattr(module, n, None), type)}
    return names - CODE_LAYERS


def own_layers() -> Set[str]:
    """Registered names of this package's own layers (``blocks.custom_layers``): installed code, not the file's.

    Read from Keras 3's registry (Keras 3 is always installed; tf.keras registers the same names)."""
    import keras  # lazy: Keras

    from cifar_dist.models.blocks import custom_layers  # lazy: defines the layers

    names = set()
    for value in vars(custom_layers(keras)).values():
        registered = keras.saving.get_registered_name(value)
        if registered.startswith(PACKAGE + ">"):
            names.add(registered)
    return names


def code_in_config(config: Any, builtins: Set[str], own: Set[str] = frozenset()) -> List[str]:
    """Names of the objects in a model config that would run code not part of Keras or of this package."""
    found = []
    for obj in _class_names(config):
        name = obj["class_name"]
        module = obj.get("module")
        registered = obj.get("registered_name")
        if name in own or registered in own:
            continue  # Scale, PatchWhitening...: the resnet9/airbench layers this package defines
        foreign = (
            name not in builtins
            or (isinstance(module, str) and module.split(".")[0] not in KERAS_MODULES)
            or (registered not in (None, name))
        )
        if foreign or name in CODE_LAYERS:
            label = (obj.get("config") or {}).get("name") if isinstance(obj.get("config"), dict) else None
            found.append(f"{name} {label!r}" if label else name)
    return list(dict.fromkeys(found))


def trusted_module_layers(modules: Sequence[str]) -> Dict[str, type]:
    """The Layer classes each named module defines or imports, by the names a model file calls them
    (registered name, class name): what ``load_model`` may build from those modules. Imports the modules."""
    found: Dict[str, type] = {}
    for name in modules:
        module = importlib.import_module(name)
        for value in vars(module).values():
            flavor = flavor_of(value) if isinstance(value, type) else 0
            if (
                flavor
                and issubclass(value, keras_module(flavor).layers.Layer)
                and value.__module__.split(".")[0] not in (*KERAS_MODULES, "tensorflow")
            ):
                found[_registered_name(value, flavor)] = value
                found[value.__name__] = value
    return found


def _registered_name(cls: type, flavor: int) -> str:
    keras = keras_module(flavor)
    return (keras.saving if flavor == KERAS3 else keras.utils).get_registered_name(cls)


def code_in_model_file(path: Path, trusted: Set[str] = frozenset()) -> List[str]:
    """What in ``path``'s architecture would run code on loading ([] for built-in layers only, or no architecture);
    ``trusted``: names of the layers of trusted modules (``trusted_module_layers``), accepted as this package's are."""
    config = architecture(path)
    if config is None:
        return []
    return code_in_config(config, builtin_names(is_keras3_file(path)), own_layers() | set(trusted))
