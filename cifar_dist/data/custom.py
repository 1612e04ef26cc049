"""``data=custom``: the user's own data factory, named by ``data._target_``.

The factory is imported by its dotted name (its module on PYTHONPATH, like a
Hydra ``_target_``) and called as ``factory(seed=trainer.seed, **data.kwargs)``
on every rank. It returns one of (docs/data.md has an example of each):

- ``DataArrays`` (``arrays.py``): numpy arrays in memory, for every engine;
- ``DataSources`` (``sources.py``): random-access sources (grain's kind, a
  Keras ``PyDataset``), read once into arrays, for every engine;
- ``DataStreams`` (``streams.py``): ``tf.data`` datasets, which need
  TensorFlow; engine=jax reads them once into arrays (``as_arrays``).

A factory that needs TensorFlow where it is not installed (the jax stack) is
refused in one line that says what to install or return instead.
"""

from __future__ import annotations

import sys

from hydra.utils import get_method
from omegaconf import OmegaConf

from cifar_dist.data.arrays import DataArrays
from cifar_dist.data.batches import DataError, reason
from cifar_dist.data.checks import check_arrays, check_elements
from cifar_dist.data.sources import DataSources, host_memory_budget, read_sources

RETURNS = "cifar_dist.data.DataArrays, DataSources or (with TensorFlow) DataStreams"
NO_TENSORFLOW = (
    "needs TensorFlow (tf.data), which is not installed here; install cifar_dist's tensorflow extra "
    "(pip install 'cifar_dist[tensorflow]'), or return cifar_dist.data.DataArrays or DataSources (docs/data.md)"
)


def load_custom(data_cfg, seed: int, arrays: bool = False):
    """What ``data._target_`` returns for ``seed``, checked; one-line DataErrors when it cannot. ``arrays``: a
    tf.data factory's datasets read into memory too (engine=jax, scoring), and then checked whole."""
    target = str(data_cfg.get("_target_") or "")
    if not target or OmegaConf.is_missing(data_cfg, "_target_"):
        raise DataError(
            f"data=custom needs data._target_=module.function (a factory returning {RETURNS}); see docs/data.md"
        )
    factory = _import(target)
    kwargs = OmegaConf.to_container(data_cfg.kwargs, resolve=True) if "kwargs" in data_cfg else {}
    try:
        data = factory(seed=int(seed), **kwargs)
    except ImportError as exc:
        if _missing_tensorflow(exc):
            raise DataError(f"data._target_={target} {NO_TENSORFLOW}") from None
        raise
    where = f"data._target_={target}"
    if isinstance(data, DataArrays):
        data = _named(data, f"arrays from {target}")
        check_arrays(data, where)
        return data
    if isinstance(data, DataSources):
        data = read_sources(data, where)
        data = _named(data, f"sources of {target}")
        check_arrays(data, where)
        return data
    if _is_streams(data):
        streams = _checked_streams(data, target)
        if not arrays:
            return streams  # too big to read whole here: its batches are checked as they are read
        data = streams.as_arrays(host_memory_budget())
        check_arrays(data, where)  # every image now: a NaN past the first elements too
        return data
    raise DataError(f"{where} returned {type(data).__name__}, not {RETURNS}; see docs/data.md")


def _import(target: str):
    try:
        return get_method(target)
    except Exception as exc:  # ImportError, AttributeError, ... all mean "not found"
        if _missing_tensorflow(exc):
            raise DataError(f"data._target_={target} {NO_TENSORFLOW}") from None
        missing = f"cannot be imported ({reason(exc)}); put its module on PYTHONPATH"
        raise DataError(f"data._target_={target} {missing}") from None


def _missing_tensorflow(exc: BaseException) -> bool:
    """Whether ``exc``, or an error it was raised from (Hydra wraps the import's own), is "No module named
    'tensorflow'"."""
    while exc is not None:
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "tensorflow":
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _is_streams(data) -> bool:
    """A ``DataStreams``, known without importing TensorFlow (only a process that has it can have made one)."""
    if "tensorflow" not in sys.modules:
        return False
    from cifar_dist.data.streams import DataStreams  # lazy: TensorFlow (loaded already)

    return isinstance(data, DataStreams)


def _named(data: DataArrays, source: str) -> DataArrays:
    """``data`` with its source named after the factory when the factory left the default."""
    if data.source in (DataArrays.source, DataSources.source):
        object.__setattr__(data, "source", source)
    return data


def _checked_streams(streams, target: str):
    from cifar_dist.data.streams import DataStreams  # lazy: TensorFlow (the factory loaded it)

    if streams.source == DataStreams.source:  # the default: name the factory instead
        object.__setattr__(streams, "source", f"tf.data factory {target}")
    check_elements(streams, f"data._target_={target}")  # labels, dtypes, image range: one line, not a silent run
    return streams
