"""What an engine is, stated once (issue 47, item 7): ``training/engines/engine.py``'s ``Engine``.

- every member the project asks of an engine (``engine.X``, ``run.engine.X``, ``self.engine.X`` in the trainer, its
  parts, the evaluation, the run dir's checks) is a member of ``Engine``: none is asked that it does not state;
- every engine the facts list (``common/engine_facts.py``) names a class that subclasses ``Engine``, carries those
  very facts, leaves no member abstract, and takes every parameter ``Engine`` says the member takes;
- the engine modules load no framework until the engine starts: importing all three classes loads no TensorFlow,
  JAX, Horovod or Keras (a real interpreter, so that nothing the test run loaded hides it).
"""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
from typing import Dict, List, Set

import pytest

from cifar_dist.common.engine_facts import ENGINES
from cifar_dist.training.engines import engine_class
from cifar_dist.training.engines.engine import Engine
from helpers.cli import cli_env
from helpers.paths import REPO

# Where ``engine`` alone is the engine object (elsewhere it may be the config's ``engine`` node: cfg.engine.keras).
ENGINE_USERS = ("cifar_dist/training", "cifar_dist/evaluation")
ENGINE_OBJECTS = ("run.engine", "self.engine", "self.run.engine")


def engine_members() -> Set[str]:
    """What ``Engine`` states: its public attributes, methods and properties, and the instance attributes it names."""
    return {n for n in dir(Engine) if not n.startswith("_")} | set(Engine.__annotations__)


def asked_of_an_engine(root=REPO) -> Dict[str, List[str]]:
    """Every ``<engine>.<member>`` the project's code outside the engines package reads: member -> where."""
    found: Dict[str, List[str]] = {}
    for path in sorted((root / "cifar_dist").rglob("*.py")) + sorted((root / "launchers").rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith("cifar_dist/training/engines/"):
            continue
        bare = relative.startswith(ENGINE_USERS)
        for node in ast.walk(ast.parse(path.read_text(), relative)):
            if isinstance(node, ast.Attribute):
                owner = ast.unparse(node.value)
                if owner in ENGINE_OBJECTS or (bare and owner == "engine"):
                    found.setdefault(node.attr, []).append(f"{relative}:{node.lineno}")
    return found


def test_every_member_asked_of_an_engine_is_stated_by_engine():
    asked = asked_of_an_engine()
    assert {"fit", "train_input", "broadcast_object", "world", "facts"} <= set(asked)  # the scan finds the calls
    unstated = {member: where for member, where in asked.items() if member not in engine_members()}
    assert unstated == {}, "asked of an engine, but not a member of training/engines/engine.py's Engine"


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_each_engine_is_an_engine_with_every_member(name):
    cls = engine_class(name)
    assert issubclass(cls, Engine) and cls.facts is ENGINES[name]
    assert not inspect.isabstract(cls), f"{cls.__name__} leaves abstract: {sorted(cls.__abstractmethods__)}"
    for member in engine_members():
        stated, given = inspect.getattr_static(Engine, member, None), inspect.getattr_static(cls, member, None)
        if not callable(stated) or isinstance(stated, property):
            continue
        assert given is not None, f"{cls.__name__}.{member}"
        missing = takes_fewer(inspect.signature(getattr(Engine, member)), inspect.signature(getattr(cls, member)))
        assert missing == [], f"{cls.__name__}.{member} does not take {missing}"


def takes_fewer(stated: inspect.Signature, given: inspect.Signature) -> List[str]:
    """The parameters ``stated`` names that ``given`` cannot be called with: a positional one missing or out of
    its place, a keyword-only one that neither it nor a ``**`` of it takes."""

    def positional(signature):
        return [p.name for p in signature.parameters.values() if p.kind == p.POSITIONAL_OR_KEYWORD]

    takes_any = any(p.kind == p.VAR_KEYWORD for p in given.parameters.values())
    wanted = positional(stated)
    missing = [name for name, had in zip(wanted, positional(given) + [None] * len(wanted)) if name != had]
    return missing + [
        p.name
        for p in stated.parameters.values()
        if p.kind == p.KEYWORD_ONLY and p.name not in given.parameters and not takes_any
    ]


def test_a_member_that_takes_fewer_parameters_is_found():
    eval_input = inspect.signature(Engine.eval_input)
    assert takes_fewer(eval_input, inspect.signature(lambda self, data, **_: None)) == []
    assert takes_fewer(eval_input, inspect.signature(lambda self, data, *, batch_size: None)) == [
        "rank",
        "size",
        "equal_shards",
    ]
    fit = inspect.signature(Engine.fit)
    assert takes_fewer(fit, inspect.signature(lambda self, model, validation, train, **_: None)) == [
        "train",
        "validation",
    ]
    assert inspect.isabstract(type("NoMembers", (Engine,), {}))


def test_importing_every_engine_class_loads_no_framework():
    code = (
        "import json, sys\n"
        "from cifar_dist.common.engine_facts import ENGINES\n"
        "from cifar_dist.training.engines import engine_class\n"
        "classes = [engine_class(name).__name__ for name in ENGINES]\n"
        "frameworks = [m for m in ('tensorflow', 'jax', 'horovod', 'keras', 'tf_keras') if m in sys.modules]\n"
        "print(json.dumps([classes, frameworks]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=cli_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    classes, frameworks = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(classes) == ["HorovodEngine", "JaxEngine", "TensorflowEngine"] and frameworks == []
