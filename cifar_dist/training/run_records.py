"""What a run records about itself: ``metrics.json``, which rank 0 alone writes.

The trainer asks for it in steps: ``start_record`` (the run's description:
world, batch, lr, data, versions; a resumed run's earlier epochs kept up to
the restored one), ``epoch_writers`` (the callbacks that write each epoch down:
metrics.json, the CSV log, TensorBoard), ``record_ranks`` (each rank's weight
digest and peak memory, gathered once training is done: a broken averaging
shows as ranks out of sync) and ``write_record`` (the final model, the learning
curves and the file).

Imports: as the trainer's (its module docstring): TensorFlow only inside the
step that runs after the engine's start.
"""

from __future__ import annotations

import hashlib
import logging
import resource
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any, Dict, List

from cifar_dist.common.atomic_files import write_json
from cifar_dist.common.keras_flavor import version_of
from cifar_dist.rundir import checkpoints
from cifar_dist.rundir.stack import keep_earlier_stack
from cifar_dist.training.artifacts import plot_learning_curves, read_metrics_to_resume, trim_csv_log
from cifar_dist.training.callbacks import EpochCSVLogger, EpochTensorBoard, MetricsRecorder
from cifar_dist.training.recipe import hooks as recipe

if TYPE_CHECKING:
    from cifar_dist.training.run import Run

log = logging.getLogger(__name__)


def start_record(run: Run, initial_epoch: int, policy: str, data, train_data):
    """metrics.json's content so far (rank 0; records after the restored epoch dropped) and its wall time."""
    metrics: Dict[str, Any] = {}
    if run.world.is_chief and initial_epoch:
        metrics = read_metrics_to_resume(run.metrics_path)  # {} when missing or damaged
        # Epochs logged after the restored checkpoint are redone: drop their records.
        metrics["epochs"] = [e for e in metrics.get("epochs", []) if e["epoch"] <= initial_epoch]
        trim_csv_log(run.output_dir / "training_log.csv", initial_epoch)
    previous_wall = float(metrics.get("wall_time_s", 0.0)) if initial_epoch else 0.0
    earlier_run = metrics.get("run")
    metrics.update(
        {
            "ranks": run.world.ranks,
            "processes": run.world.processes,
            "devices_per_process": run.world.devices,
            "run": describe_run(run, policy, data, train_data),
            "resumed_from_epoch": initial_epoch,
            "complete": False,
        }
    )
    keep_earlier_stack(metrics, earlier_run, initial_epoch)  # resumed on another stack: both (rundir/stack.py)
    metrics.setdefault("epochs", [])
    return metrics, previous_wall


def describe_run(run: Run, policy: str, data, train_data) -> Dict[str, Any]:
    """metrics.json's ``run``: what this run is (world, batch, lr, model, data, threads, versions)."""
    cfg, t, world = run.cfg, run.trainer, run.world
    return {
        "epochs": run.epochs,
        "epoch_policy": t.epoch_policy.value,
        "batch_size_per_rank": t.batch_size,
        "global_batch_size": t.batch_size * world.ranks,
        "layout": world.layout(),
        "lr_config": cfg.optimizer.lr,
        "lr_scaled": run.lr,
        "lr_scaling": t.lr_scaling.value,
        "optimizer": cfg.optimizer._target_.rsplit(".", 1)[-1],
        "model": cfg.model._target_,
        "precision": policy,
        "data": data.source,
        "train_images": int(data.train_size),
        "test_images": int(data.test_size),
        "class_names": list(data.class_names),
        "steps_per_epoch": train_data.steps_per_epoch,
        "steps_per_execution": t.steps_per_execution,
        "threads_intra_op": world.threads.intra_op,
        "threads_inter_op": world.threads.inter_op,
        "onednn": world.onednn,
        "tensorflow": tensorflow_version(),
        "engine": run.engine.name,
        "engine_reason": cfg.engine.why or f"engine={run.engine.name} as configured",
        "keras": version_of(run.keras),
        **run.engine.versions(),
        **recipe.run_info(t),
    }


def tensorflow_version():
    """The TensorFlow of this process, where it has one (an engine=jax run loads none: None)."""
    tf = sys.modules.get("tensorflow")
    return getattr(tf, "__version__", None)


def epoch_writers(run: Run, metrics: Dict[str, Any], initial_epoch: int, previous_wall: float) -> list:
    """Rank 0's Keras callbacks that write each epoch down: the CSV log, TensorBoard (trainer.tensorboard) and
    metrics.json (``metrics``, with the wall time so far); the trainer puts the checkpoint after them."""
    writers = [EpochCSVLogger(str(run.output_dir / "training_log.csv"), append=bool(initial_epoch))]
    if run.trainer.tensorboard:
        writers.append(EpochTensorBoard(run.output_dir / "tensorboard"))
    run_start = time.time()
    writers.append(
        MetricsRecorder(
            run.metrics_path,
            metrics,
            on_update=lambda m: m.update(wall_time_s=previous_wall + time.time() - run_start),
        )
    )
    return writers


def engine_versions(run: Run) -> Dict[str, str]:
    """The engine and the versions it trains with, as the tracker records them (``engine``, ``keras``, its own)."""
    return {"engine": run.engine.name, "keras": version_of(run.keras), **run.engine.versions()}


def weights_digest(model) -> str:
    """A fingerprint of the model's weights, to check that ranks agree."""
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(w.tobytes())
    return h.hexdigest()[:16]


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def record_ranks(engine, model, metrics: Dict[str, Any]) -> None:
    """Each rank's weight digest and peak memory into rank 0's ``metrics`` (collectives: every rank calls it).

    ENGINE: with averaged gradients every rank ends with the same weights;
    each rank's fingerprint is recorded so that a broken averaging is visible."""
    digests: List[str] = engine.allgather_object(weights_digest(model))
    peak_rss = engine.allgather_object(peak_rss_mb())
    peak_device = engine.allgather_object(engine.device_peak_mb())
    if engine.world.is_chief:
        metrics["peak_rss_mb_per_rank"] = peak_rss
        if any(v is not None for v in peak_device):
            metrics["peak_device_mb_per_rank"] = peak_device
        metrics["rank_weight_digests"] = digests
        metrics["ranks_in_sync"] = len(set(digests)) == 1
        if not metrics["ranks_in_sync"]:
            log.warning("ranks ended with different weights: %s", digests)


def last_epoch_done(metrics: Dict[str, Any], initial_epoch: int) -> int:
    """The last epoch rank 0's record holds (``initial_epoch`` when this run recorded none)."""
    return max([e["epoch"] for e in metrics.get("epochs", [])] + [initial_epoch])


def write_record(run: Run, model, metrics: Dict[str, Any], finished: bool, done: int, previous_wall: float) -> None:
    """Rank 0: the final model, the learning curves and metrics.json."""
    t = run.trainer
    rates = [e["images_per_sec"] for e in metrics["epochs"] if "images_per_sec" in e]
    steady = rates[1:] or rates  # the first epoch includes tracing
    metrics["images_per_sec"] = statistics.median(steady) if steady else None
    metrics["wall_time_s"] = previous_wall + time.time() - run.wall_start
    metrics.update(run.engine.timings)  # ENGINE: engine=jax's compile time of the training step
    if finished:
        metrics["complete"] = True
        if t.save_model:
            model_path = checkpoints.saved_model_path(run.output_dir, checkpoints.model_suffix(model))
            checkpoints.atomic_save_model(model, model_path, include_optimizer=False)
            metrics["model_path"] = str(model_path.relative_to(run.output_dir))
            log.info("Saved trained model at %s", model_path)
        log.info("Test loss: %.4f", metrics["test"]["loss"])
        log.info("Test accuracy: %.4f", metrics["test"]["accuracy"])
    else:
        log.info(
            "stopped after epoch %d of %d (trainer.max_epochs_per_run or a stop signal); re-run to resume",
            done,
            run.epochs,
        )
    if t.plot and metrics["epochs"]:
        plot_learning_curves(
            metrics["epochs"],
            run.output_dir / "learning_curves.png",
            title=f"{metrics['run']['model'].rsplit('.', 2)[-2]} on {run.cfg.data.name}, {run.world.ranks} rank(s)",
        )
    write_json(run.metrics_path, metrics)
