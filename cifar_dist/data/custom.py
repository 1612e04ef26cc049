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
refused in one line that says what to install or return instead. A factory
that cannot be imported is refused in one line too: before anything is
written where its source says so (no such module, a syntax error, no such
function: ``factory_problem``, read without running it, in the launching
process's validation), else where it is imported, naming the error and the
line of the user's code it came from (``target_source.import_failure``).
"""

from __future__ import annotations

import ast
import importlib
import sys
from typing import Optional

from omegaconf import OmegaConf

from cifar_dist.common.errors import did_you_mean
from cifar_dist.common.target_source import (
    NoModule,
    declared_in,
    defined_names,
    import_failure,
    missing_import,
    module_source,
)
from cifar_dist.data.arrays import DataArrays
from cifar_dist.data.batches import DataError
from cifar_dist.data.checks import check_arrays, check_elements
from cifar_dist.data.sources import DataSources, read_sources

RETURNS = "cifar_dist.data.DataArrays, DataSources or (with TensorFlow) DataStreams"
ON_PYTHONPATH = "put its module on PYTHONPATH (or run from the directory that holds it)"
NO_TENSORFLOW = (
    "needs TensorFlow (tf.data), which is not installed here; install cifar_dist's tensorflow extra "
    "(pip install 'cifar_dist[tensorflow]'), or return cifar_dist.data.DataArrays or DataSources (docs/data.md)"
)


def load_custom(data_cfg, seed: int, arrays: bool, budget: int):
    """What ``data._target_`` returns for ``seed``, checked; one-line DataErrors when it cannot. ``arrays``: a
    tf.data factory's datasets read into memory too (engine=jax, scoring), and then checked whole. ``budget``: the
    bytes what is read into memory may take (``sources.host_memory_budget``)."""
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
        data = read_sources(data, where, budget)
        data = _named(data, f"sources of {target}")
        check_arrays(data, where)
        return data
    if _is_streams(data):
        streams = _checked_streams(data, target)
        if not arrays:
            return streams  # too big to read whole here: its batches are checked as they are read
        data = streams.as_arrays(budget)
        check_arrays(data, where)  # every image now: a NaN past the first elements too
        return data
    raise DataError(f"{where} returned {type(data).__name__}, not {RETURNS}; see docs/data.md")


def _import(target: str):
    """The object ``target`` names: its longest importable module, then attributes (``mod.Class.method``)."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:cut])
        try:
            found = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
                continue  # this prefix is no module: a shorter one may be
            raise _unimportable(target, name, exc) from None
        except Exception as exc:  # an error inside the user's module: its own words and line
            raise _unimportable(target, name, exc) from None
        try:
            for attr in parts[cut:]:
                found = getattr(found, attr)
        except AttributeError:
            raise DataError(f"data._target_={target}: {name} has no `{'.'.join(parts[cut:])}`") from None
        return found
    raise DataError(f"data._target_={target} cannot be imported: no module named {parts[0]!r}; {ON_PYTHONPATH}")


def _unimportable(target: str, module: str, exc: BaseException) -> DataError:
    if _missing_tensorflow(exc):
        return DataError(f"data._target_={target} {NO_TENSORFLOW}")
    return DataError(f"data._target_={target} cannot be imported: {import_failure(module, exc)}")


def factory_problem(target: str, packages_here: bool = True) -> Optional[str]:
    """One line for ``data._target_`` when its source says it cannot be imported: no such module, a syntax error
    (file:line), an import of a package not installed (unless ``packages_here`` is False: the job runs in an
    environment its launcher builds), no such function; read without running it (the launching process). None
    when it does not say."""
    module, _, attr = target.rpartition(".")
    if not module or not attr:
        return f"data._target_={target} is not module.function (a factory returning {RETURNS}; docs/data.md)"
    if module in sys.modules:
        return None  # imported already (a test, a rank): importing it tells
    try:
        source = module_source(module)
    except NoModule as missing:
        return f"data._target_={target} cannot be imported: no module named {missing.name!r}; {ON_PYTHONPATH}"
    if source is None:
        return None
    try:
        tree = ast.parse(source.read_bytes(), str(source))
    except SyntaxError as exc:
        return f"data._target_={target} cannot be imported: {import_failure(module, exc)}"
    except (OSError, ValueError):
        return None  # importing it reports that in Python's own words
    missing = missing_import(tree) if packages_here else None
    if missing is not None:
        line, name = missing
        if name == "tensorflow":
            return f"data._target_={target} {NO_TENSORFLOW}"
        return (
            f"data._target_={target} cannot be imported: importing {module} fails at {source}:{line}: "
            f"no module named {name!r} is installed here; install it (or put it on PYTHONPATH)"
        )
    if declared_in(tree, attr) is None:
        return f"data._target_={target}: {source} defines no `{attr}`{did_you_mean(attr, defined_names(tree))}"
    return None


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
