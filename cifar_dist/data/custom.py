"""``data=custom``: the user's own tf.data factory, named by ``data._target_``.

The factory is imported by its dotted name (its module on PYTHONPATH, like a
Hydra ``_target_``) and called as ``factory(seed=trainer.seed, **data.kwargs)``
on every rank; it returns ``DataStreams`` (see ``streams.py`` for the per-rank
contract and docs/data.md for an example).
"""

from __future__ import annotations

from hydra.utils import get_method
from omegaconf import OmegaConf

from cifar_dist.data.batches import DataError, reason
from cifar_dist.data.checks import check_elements


def load_custom_streams(data_cfg, seed: int):
    """The DataStreams that ``data._target_`` returns for ``seed``; one-line DataErrors when it cannot."""
    from cifar_dist.data.streams import DataStreams  # lazy: TensorFlow

    target = str(data_cfg.get("_target_") or "")
    if not target or OmegaConf.is_missing(data_cfg, "_target_"):
        raise DataError(
            "data=custom needs data._target_=module.function (a factory returning DataStreams); see docs/data.md"
        )
    try:
        factory = get_method(target)
    except Exception as exc:  # ImportError, AttributeError, ... all mean "not found"
        raise DataError(
            f"data._target_={target} cannot be imported ({reason(exc)}); put its module on PYTHONPATH"
        ) from None
    kwargs = OmegaConf.to_container(data_cfg.kwargs, resolve=True) if "kwargs" in data_cfg else {}
    streams = factory(seed=int(seed), **kwargs)
    if not isinstance(streams, DataStreams):
        raise DataError(
            f"data._target_={target} returned {type(streams).__name__}, "
            "not cifar_dist.data.streams.DataStreams; see docs/data.md"
        )
    if streams.source == DataStreams.source:  # the default: name the factory instead
        object.__setattr__(streams, "source", f"tf.data factory {target}")
    check_elements(streams, f"data._target_={target}")  # labels, dtypes, image range: one line, not a silent run
    return streams
