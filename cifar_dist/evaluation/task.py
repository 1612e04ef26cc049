"""Evaluate / batch-score a trained model, sharded over the ranks.

``python -m cifar_dist task=evaluate evaluate.model=<run dir or .h5>``.
Every rank scores images rank, rank + size, ...; the per-image results are
gathered on rank 0, which writes evaluation.json, confusion_matrix.png and
predictions.csv. Because whole per-image results are gathered (not
per-rank averages), every count equals a single-rank run's.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from omegaconf import DictConfig

from cifar_dist.common.atomic_files import write_json
from cifar_dist.common.results import EVALUATION_FILE, as_metrics, read_metrics
from cifar_dist.data import num_classes_of
from cifar_dist.data.checks import same_on_every_rank
from cifar_dist.data.folder import folder_class_names
from cifar_dist.evaluation import report
from cifar_dist.evaluation.inputs import EvaluationInputError, load_images, load_model, resolve_model_path
from cifar_dist.evaluation.run_data import command_overrides, evaluation_data, evaluation_engine, training_run_dir
from cifar_dist.training.engines import start_engine

log = logging.getLogger(__name__)

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def score(model, x: np.ndarray, batch_size: int):
    """Class probabilities of uint8 images, in order."""
    if len(x) == 0:
        return np.zeros((0, model.output_shape[-1]), np.float32)
    scaled = x.astype(np.float32) / 255.0 if x.dtype == np.uint8 else x.astype(np.float32)  # data=folder/custom: [0, 1]
    return model.predict(scaled, batch_size=batch_size, verbose=0)


def per_image_loss(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Categorical cross-entropy of each image as Keras computes it (clipped at 1e-7); NaN where unlabelled."""
    p = np.clip(probs / probs.sum(axis=1, keepdims=True), 1e-7, 1 - 1e-7)
    loss = np.full(len(labels), np.nan)
    known = labels >= 0
    loss[known] = -np.log(p[known, labels[known]])
    return loss


def trained_class_names(model_path: Path, num_classes: int) -> Optional[Tuple[str, ...]]:
    """The class names recorded by the training run that saved ``model_path`` (its run dir's metrics.json:
    ``saved_models/`` or ``checkpoints/`` of it), when they fit the model; None for a model file elsewhere."""
    run = training_run_dir(model_path)
    if run is None:
        return None
    names = ((read_metrics(run) or {}).get("run") or {}).get("class_names")
    return tuple(str(n) for n in names) if names and len(names) == num_classes else None


def _default_class_names(data_cfg, num_classes: int, model_path: Path):
    """Names for images given by evaluate.input: those the model was trained with, an image tree's class
    folders, CIFAR-10's, or "0", "1", ..."""
    trained = trained_class_names(model_path, num_classes)
    if trained:
        return trained
    if data_cfg.name == "folder" and data_cfg.path:
        return folder_class_names(data_cfg)
    return CIFAR10_CLASSES if num_classes == 10 else tuple(str(i) for i in range(num_classes))


def user_model_modules(model_cfg) -> List[str]:
    """The module of the evaluated model option's ``_target_`` when it is the user's (not cifar_dist's):
    its layers are trusted (model_trust.py), since naming ``model=<name>`` names that code."""
    target = str(model_cfg.get("_target_") or "") if model_cfg is not None else ""
    module = target.rpartition(".")[0]
    return [module] if module and module.split(".")[0] != "cifar_dist" else []


def _model_and_images(cfg: DictConfig, model_path: Path, processes_here: int = 1):
    """The model, the images to score and the class count, checked to agree with each other."""
    ev = cfg.evaluate
    expected = cfg.model.get("num_classes") or num_classes_of(cfg.data)  # None: data=folder/custom, known once read
    of_data = str(ev.input) in ("test", "train") and cfg.data.name != "custom"  # else: known once read
    model = load_model(
        model_path,
        expected,
        trust_model=bool(ev.get("trust_model", False)),
        image_size=cfg.data.get("image_size", 32) if of_data else None,
        trusted_modules=user_model_modules(cfg.model),
    )
    num_classes = int(model.output_shape[-1])
    images = load_images(
        str(ev.input),
        cfg.data,
        _default_class_names(cfg.data, num_classes, model_path),
        int(cfg.trainer.seed),
        image_size=model.input_shape[1] or 32,
        processes_here=processes_here,
    )
    if tuple(images.x.shape[1:]) != tuple(model.input_shape[1:]):
        raise EvaluationInputError(
            f"{model_path} takes {tuple(model.input_shape[1:])} images but {images.source} "
            f"gives {tuple(images.x.shape[1:])}; score it on images like those it was trained on"
        )
    if len(images.class_names) != num_classes:
        raise EvaluationInputError(
            f"{model_path} predicts {num_classes} classes but {images.source} has "
            f"{len(images.class_names)}; evaluate it with the data it was trained on"
        )
    return model, images, num_classes


def evaluate(cfg: DictConfig, output_dir: Path) -> Dict[str, Any]:
    start = time.time()
    output_dir = Path(output_dir)
    ev = cfg.evaluate
    model_path = resolve_model_path(ev.model)  # fails fast on every rank alike
    scored, data_used = evaluation_data(cfg, model_path, command_overrides())  # so does code the run dir names
    engine = start_engine(evaluation_engine(cfg, model_path, command_overrides()), cfg.trainer)
    world = engine.world
    from cifar_dist.models.tta import with_tta  # imports TensorFlow: only after the engine's start chose its kernels

    model, images, num_classes = _model_and_images(scored, model_path, world.local_processes)
    same_on_every_rank(f"{len(images.x)} images", images.class_names, images.source, engine.allgather_object)
    if world.is_chief:
        log.info("data: %s", data_used)
        log.info(
            "scoring %s on %d images from %s with %d process(es)",
            model_path,
            len(images.x),
            images.source,
            world.processes,
        )

    mine = np.arange(world.process, len(images.x), world.processes)
    tta = ev.tta.value if hasattr(ev.tta, "value") else str(ev.tta)
    probs = score(with_tta(model, tta), images.x[mine], int(ev.batch_size))
    # ENGINE: one gather of this rank's per-image results; rank 0 puts them back in order.
    parts = engine.allgather_object((mine, probs))
    if not world.is_chief:
        return {}

    order = np.concatenate([p[0] for p in parts])
    all_probs = np.empty((len(images.x), num_classes), np.float32)
    all_probs[order] = np.concatenate([p[1] for p in parts])
    predicted = all_probs.argmax(axis=1)
    confidence = all_probs.max(axis=1)
    losses = per_image_loss(all_probs, images.labels)

    result: Dict[str, Any] = {
        "model": str(model_path),
        "input": images.source,
        "data": data_used,
        "ranks": world.processes,
        "tta": tta,
        **report.summarize(images.labels, predicted, losses, images.class_names),
        "wall_time_s": time.time() - start,
    }
    output_dir.mkdir(parents=True, exist_ok=True)
    if "confusion_matrix" in result:
        report.plot_confusion(
            result["confusion_matrix"]["matrix"],
            images.class_names,
            output_dir / "confusion_matrix.png",
            title=f"accuracy {result['accuracy']:.4f} on {result['labelled']} images",
        )
        log.info("Test loss: %.4f", result["loss"])
        log.info("Test accuracy: %.4f", result["accuracy"])
    if ev.predictions:
        report.write_predictions(
            output_dir / "predictions.csv", images.labels, predicted, confidence, images.class_names, images.names
        )
    write_json(output_dir / EVALUATION_FILE, result)
    log.info("wrote %s", output_dir / EVALUATION_FILE)
    # The app reports metrics["test"]["accuracy"] as the job's result.
    return as_metrics(result)
