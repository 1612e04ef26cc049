"""A model named by ``model._target_``: which arguments its builder takes, and one line for a key it does not.

A built-in model's option is a dataclass (``config/schema.py``), so Hydra refuses a
key it does not have. A user's own ``model/<name>.yaml`` (``_target_:
mymodels.build`` plus arguments) has no dataclass: its keys are checked
against the builder's parameters instead, the way ``hydra.utils.instantiate``
will pass them (``num_classes`` always comes from the data; ``keras``, the
Keras module a builder that takes it builds with, from the trainer: neither
is a key of the model's config, and ``keras`` is refused as one).

Two readings of the same parameters, one per moment:

- ``declared_parameters``: before anything is launched (``override_check``,
  ``validation``). It reads the builder's ``def`` from the module's source
  without running it, so no user code (and no TensorFlow, which must load
  only after the engine's start chose its kernels) runs in the launching process.
  None when the source does not say (a name bound by an import or an
  assignment, a class without its own ``__init__``): left to the next check.
- ``signature_parameters``: ``inspect.signature`` of the imported builder,
  on every rank after the engine's start (``start_engine``) and before any data is loaded.

A builder with ``**kwargs`` takes any key.
"""

from __future__ import annotations

import ast
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence, Tuple

from hydra.utils import get_object
from omegaconf import DictConfig, OmegaConf

from cifar_dist.common.errors import ConfigError, did_you_mean
from cifar_dist.common.keras_flavor import KERAS_ARGUMENT  # the Keras module to build with, passed by the trainer
from cifar_dist.common.target_source import NoModule, declared_in, defined_names, module_source

DATA_ARGUMENT = "num_classes"  # what the trainer passes from the data (training/model_setup.py, model_kwargs)
NOT_ARGUMENTS = ("_target_", "_recursive_", "_convert_", "_partial_", "_args_")  # Hydra's own keys


@dataclass(frozen=True)
class Parameters:
    """The keyword arguments a builder takes."""

    names: Sequence[str]
    any_keyword: bool  # **kwargs

    def takes(self, key: str) -> bool:
        return self.any_keyword or key in self.names


def _split(target: str):
    module, _, attr = target.rpartition(".")
    if not module or not attr:
        raise ConfigError(
            f"{target} is not module.function; name your builder as module.function "
            "(e.g. mymodels.build, with mymodels.py in the directory you run from)"
        )
    return module, attr


def _not_found(target: str, module: str, why: str) -> ConfigError:
    first = module.split(".")[0]
    return ConfigError(
        f"cannot import {target} ({why}); run from the directory that holds "
        f"{first}.py (or its package), or add that directory to PYTHONPATH"
    )


def _module_source(target: str, module: str) -> Optional[Path]:
    """The source file of ``module``, found as ``import`` would, without running any of it (``target_source``)."""
    try:
        return module_source(module)
    except NoModule as missing:
        raise _not_found(
            target, module, f"no module named {missing.name!r} on PYTHONPATH or in the current directory"
        ) from None


def _function_parameters(fn: ast.AST, skip_first: bool) -> Parameters:
    """The names a ``def`` takes by keyword (not ``self`` of a class's ``__init__``); whether it has ``**kwargs``."""
    a = fn.args
    positional = [*a.posonlyargs, *a.args][1 if skip_first else 0 :]
    positional_only = {p.arg for p in a.posonlyargs}
    names = [p.arg for p in positional if p.arg not in positional_only] + [p.arg for p in a.kwonlyargs]
    return Parameters(tuple(names), a.kwarg is not None)


def declared_parameters(target: str) -> Optional[Parameters]:
    """The builder's parameters as its source declares them (nothing is imported or run); None when it does not say."""
    module, attr = _split(target)
    if module in sys.modules:  # imported already (a rank, a test): ask the object itself
        return signature_parameters(target)
    source = _module_source(target, module)
    if source is None:
        return None  # a compiled or namespace module: only importing it would tell
    try:
        tree = ast.parse(source.read_text("utf-8"), str(source))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None  # importing it reports that in Python's own words
    node = declared_in(tree, attr)
    if node is None:
        defined = defined_names(tree)
        raise ConfigError(
            f"{source.name} defines no `{attr}`{did_you_mean(attr, defined)} (name a function or class of {module})"
        )
    if node == "bound":
        return None
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        return _function_parameters(init, skip_first=True) if init is not None else None
    return _function_parameters(node, skip_first=False)


def signature_parameters(target: str) -> Parameters:
    """The builder's parameters from ``inspect.signature`` of the imported object (its module runs)."""
    module, _ = _split(target)
    try:
        builder = get_object(target)
    except Exception as exc:  # ImportError, AttributeError, an error inside the module: all "cannot be imported"
        cause = exc.__cause__ or exc
        raise _not_found(
            target, module, f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}"
        ) from None
    try:
        signature = inspect.signature(builder)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check against
        return Parameters((), True)
    params = signature.parameters.values()
    names = tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    return Parameters(names, any(p.kind == p.VAR_KEYWORD for p in params))


def unknown_argument(target: str, keys: Iterable[str], params: Parameters) -> Optional[Tuple[str, str]]:
    """(key, why) for the first key ``params`` does not take, naming its nearest parameter; ("_target_", why)
    for a builder without ``num_classes``; None when it takes them all."""

    if not params.takes(DATA_ARGUMENT):
        return "_target_", (
            f"{target} takes no `{DATA_ARGUMENT}` argument; add one (def "
            f"{target.rpartition('.')[2]}({DATA_ARGUMENT}, ...)): the trainer passes it the data's class count"
        )
    for key in keys:
        if key == KERAS_ARGUMENT:
            return key, (
                f"`{KERAS_ARGUMENT}` is not a model option: the trainer passes the Keras module the model is "
                "built with; remove it from the model config"
            )
        if key in NOT_ARGUMENTS or params.takes(key):
            continue
        others = [n for n in params.names if n not in (DATA_ARGUMENT, KERAS_ARGUMENT)]
        return key, (
            f"{target} has no parameter `{key}`{did_you_mean(key, others)} "
            f"(its parameters: {', '.join(others) or 'only num_classes'})"
        )
    return None


def builder_problem(target: str, keys: Iterable[str], params_of=declared_parameters) -> Optional[Tuple[str, str]]:
    """(key, why) for the first of ``keys`` the builder ``target`` does not take; ("_target_", why) when the
    builder cannot be found or takes no ``num_classes``; None when all is well or its parameters are not known."""
    try:
        params = params_of(target)
    except ConfigError as exc:
        return "_target_", str(exc)
    return None if params is None else unknown_argument(target, keys, params)


def model_node_problem(model, params_of=declared_parameters) -> Optional[str]:
    """One line for a composed ``model`` node whose builder cannot be found or does not take one of its keys."""
    if (
        not isinstance(model, DictConfig)
        or "_target_" not in model
        or OmegaConf.is_missing(model, "_target_")
        or OmegaConf.is_interpolation(model, "_target_")
    ):
        return None
    target = str(model._target_)
    found = builder_problem(target, list(model.keys()), params_of)
    if found is None:
        return None
    key, why = found
    return f"model._target_={target}: {why}" if key == "_target_" else f"model.{key}: {why}"


def check_builder(model) -> None:
    """Import the builder ``model._target_`` names and check the node's keys against ``inspect.signature``.

    Called on every rank after the engine's start (the builder's module may import
    TensorFlow) and before any data is read; raises a one-line ConfigError."""
    problem = model_node_problem(model, params_of=signature_parameters)
    if problem:
        raise ConfigError(problem)
