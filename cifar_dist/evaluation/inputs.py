"""What an evaluation reads: the model to score and the images to score it on."""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from cifar_dist.common.errors import CifarDistError
from cifar_dist.data import load_dataset
from cifar_dist.data.batches import read_batch_file
from cifar_dist.data.checks import REFUSE, bad_images
from cifar_dist.data.folder import decode_files
from cifar_dist.data.folder import image_files as _image_files
from cifar_dist.evaluation import model_files
from cifar_dist.evaluation.model_trust import code_in_model_file, trusted_module_layers
from cifar_dist.rundir.checkpoints import find_saved_model, list_checkpoints

SEED_MODEL = Path("saved_models") / "keras_cifar10_trained_model.h5"


class EvaluationInputError(CifarDistError):
    pass


def resolve_model_path(model: str) -> Path:
    """A .h5 (.keras) file as given; for a run dir, its saved model, else its newest checkpoint."""
    path = Path(model).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        saved = find_saved_model(path)
        if saved is not None:
            return saved
        found = list_checkpoints(path / "checkpoints") or list_checkpoints(path)
        if found:
            return found[-1][1]
        raise EvaluationInputError(
            f"{path} holds neither {SEED_MODEL} nor checkpoints/checkpoint-NNN.h5; "
            "point evaluate.model at a training run dir or a .h5 model file"
        )
    raise EvaluationInputError(
        f"evaluate.model={model}: no such file or directory; point it at a training run dir or a .h5 file"
    )


def check_no_code(path: Path, trust_model: bool, trusted_layers: Sequence[str] = ()) -> None:
    """Refuse a model file whose architecture would run code on loading, unless the user trusts it
    (the file, or the module its layers come from: ``trusted_layers``)."""
    if trust_model:
        return
    try:
        found = code_in_model_file(path, set(trusted_layers))
    except model_files.ModelFileError as exc:  # a damaged or oversized .keras: its own true line
        raise EvaluationInputError(str(exc)) from None
    except Exception:  # not HDF5 or damaged: load_model reports it
        return
    if found:
        raise EvaluationInputError(
            f"{path} holds layers that run Python code when loaded ({', '.join(found)}); refusing to load it. "
            "If they are your own model's layers, evaluate with the model option that built it (model=<name>: "
            "the module of its _target_ is trusted); "
            "set evaluate.trust_model=true only if you trust whoever made this file"
        )


def trusted_layers_of(modules: Sequence[str]):
    """The layer classes of the user's modules (model_trust.trusted_module_layers); one line if one fails to import."""
    try:
        return trusted_module_layers(modules)
    except Exception as exc:  # ImportError, or an error inside the module
        raise EvaluationInputError(
            f"cannot import {', '.join(modules)} to load its layers ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); "
            "run from the directory that holds it or add that to PYTHONPATH"
        ) from None


def load_model(
    path: Path,
    num_classes: Optional[int],
    trust_model: bool = False,
    image_size: Optional[int] = 32,
    trusted_modules: Sequence[str] = (),
):
    """The Keras model in ``path`` (compile=False: scoring needs no optimizer), checked against the data's shapes.

    ``num_classes`` / ``image_size`` None: not known before the images are read; not checked here.

    Built-in Keras layers and this package's only, plus the layers of ``trusted_modules`` (the user's
    own model module, named by the model option evaluated with), unless ``trust_model`` (model_trust.py):
    a model file someone sent must not run their code here.
    """
    own = trusted_layers_of(trusted_modules) if trusted_modules else {}
    check_no_code(path, trust_model, list(own))
    try:
        model = model_files.load(path, own, trust_model)
    except model_files.ModelFileError as exc:
        raise EvaluationInputError(str(exc)) from None
    except Exception as exc:  # h5py/Keras raise many types for a bad file
        raise EvaluationInputError(
            f"{path} is not a loadable Keras model "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
            "point evaluate.model at a saved_models/*.h5 (.keras) or checkpoints/*.h5 (.keras) written by cifar_dist"
        ) from None
    shape_ok = tuple(model.input_shape[1:]) == (image_size, image_size, 3) if image_size else model.input_shape[-1] == 3
    if not shape_ok or (num_classes is not None and model.output_shape[-1] != num_classes):
        raise EvaluationInputError(
            f"{path} maps {model.input_shape[1:]} to {model.output_shape[-1]} classes, not {image_size or 'HxW'}x"
            f"{image_size or ''}x3 images to {num_classes} classes; "
            "use a model trained on this data (the same data=...)"
        )
    return model


@dataclass
class Images:
    x: np.ndarray  # uint8 (N, 32, 32, 3), or float32 in [0, 1] from data=folder/custom
    labels: np.ndarray  # int64 (N,), -1 where unknown
    class_names: Sequence[str]
    source: str
    names: Optional[List[str]] = None  # per-image file names, for folders of images


def load_images(
    spec: str,
    data_cfg,
    default_class_names: Sequence[str],
    seed: int = 0,
    image_size: int = 32,
    processes_here: int = 1,
) -> Images:
    """The images named by evaluate.input ("test"/"train": that split of the data group, any data option, read by
    each of the ``processes_here`` processes on this host); a folder of images is read as ``data=folder`` reads one
    for training, resized to ``image_size``."""
    if spec in ("test", "train"):
        # every rank reads the split, in order, and scores its part
        data = load_dataset(data_cfg, seed, arrays=True, processes_here=processes_here)
        x, y = (data.x_test, data.y_test) if spec == "test" else (data.x_train, data.y_train)
        return Images(
            x, np.asarray(y, np.int64), tuple(data.class_names) or tuple(default_class_names), f"{data.source} ({spec})"
        )
    path = Path(spec).expanduser()
    if path.is_dir() and _image_files(path):
        return _image_folder(path, default_class_names, image_size, data_cfg.get("bad_files", REFUSE))
    files = sorted(Path(p) for p in glob.glob(str(path))) if any(c in spec for c in "*?[") else [path]
    if path.is_dir():
        batches_dir = path / "cifar-10-batches-py" if (path / "cifar-10-batches-py").is_dir() else path
        files = sorted(p for p in batches_dir.iterdir() if p.name.startswith(("data_batch_", "test_batch")))
    files = [f for f in files if f.is_file()]
    if not files:
        raise EvaluationInputError(
            f"evaluate.input={spec}: no CIFAR batch files or images there; use 'test', 'train', a CIFAR batch file "
            "(or a glob of them), a cifar-10-batches-py folder, or a folder of images"
        )

    xs, ys = [], []
    for f in files:
        x, y = read_batch_file(f)
        xs.append(x)
        ys.append(y)
    return Images(
        np.concatenate(xs),
        np.concatenate(ys).astype(np.int64),
        tuple(default_class_names),
        ", ".join(str(f) for f in files),
    )


def _image_folder(folder: Path, class_names: Sequence[str], image_size: int, bad_files: str = REFUSE) -> Images:
    """Every image under ``folder``; labelled when it sits in a sub-folder named after a class. One rule with
    training (``data=folder``): an unreadable file is refused in one line (or left out: ``data.bad_files=skip``)
    and every image is decoded and resized to ``image_size`` by the same decoder (``folder.decoder``)."""
    bad = bad_images(_image_files(folder), bad_files)
    files = [f for f in _image_files(folder) if f not in bad]
    if not files:
        raise EvaluationInputError(f"evaluate.input={folder} holds no readable image; point it at a folder of images")
    index = {name: i for i, name in enumerate(class_names)}
    rel = [f.relative_to(folder) for f in files]
    labels = [index.get(r.parts[0], -1) if len(r.parts) > 1 else -1 for r in rel]
    x = decode_files([str(f) for f in files], int(image_size))
    return Images(x, np.asarray(labels, np.int64), tuple(class_names), str(folder), [str(r) for r in rel])
