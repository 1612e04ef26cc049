"""The package's import structure, read from the source with ``ast`` (issue 32).

Every module of the project (the packages setup.cfg installs: cifar_dist/, launchers/ as
cifar_dist.launchers, conf/ as cifar_dist.conf, hydra_plugins/) is parsed; each import of
another project module is an edge, wherever it stands (imports inside functions too: a
cycle hidden in a function is still a cycle). Imports under ``if TYPE_CHECKING:`` never run
and are not counted. The tests say:

- no import cycle between the project's modules (printed as a chain ``a -> b -> a``), nor
  between its folders: every folder is one node, its own modules and its ``__init__.py``
  together, and a folder inside another is a node of its own (training/ and evaluation/
  importing each other is a cycle even when no two modules do; so are training/ and
  training/engines/, or launchers/ and launchers/ranks/);
- cifar_dist/'s top holds only the app, and nothing below it imports the app; the leaf
  helpers in common/ import nothing of the project outside common/;
- the layering reads one way: the core never imports a launcher, a sweeper, the app or the
  Hydra plugin shims; launchers and sweepers never import the app; the shims in
  hydra_plugins/ import the behaviour they wrap, and only the app (which registers them)
  imports a shim;
- an import inside a function keeps a heavy dependency off the start-up path, and says so
  in a comment on its line or the line above (``# lazy: TensorFlow``);
- a library's private API (``keras.src``, ``jax._src``, ``hydra._internal``, ``omegaconf._utils``, and the
  private attributes of its objects those modules rely on) is touched by its internals module in common/ alone.
"""

from __future__ import annotations

import ast
import configparser
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The top: the command line, the Hydra app and the registry of every option; only they may import everything.
APP = (
    "cifar_dist.app",
    "cifar_dist.__main__",
    "cifar_dist.all_options",
    "cifar_dist.local_options",
    "cifar_dist.saved_run",
)
LAUNCHERS = ("cifar_dist.launchers",)
SWEEPERS = ("cifar_dist.sweepers",)
SHIMS = ("hydra_plugins",)
# The helpers below everything: they import nothing of the project but each other.
COMMON = "cifar_dist.common"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the project module it imports
    line: int
    in_function: bool
    commented: bool


def package_dirs() -> Dict[str, Path]:
    """Each installed package of the project -> its folder, as setup.cfg's packages and package_dir say."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    packages = cfg["options"]["packages"].split()
    mapped = dict(line.split("=") for line in cfg["options"]["package_dir"].strip().splitlines())
    mapped = {name.strip(): folder.strip() for name, folder in mapped.items()}

    def folder(package: str) -> Path:
        for name in sorted(mapped, key=len, reverse=True):
            if package == name or package.startswith(name + "."):
                return ROOT / mapped[name] / Path(*package[len(name) :].split(".")[1:])
        return ROOT / Path(*package.split("."))

    return {package: folder(package) for package in packages}


def project_modules() -> Dict[str, Path]:
    """Every module of the project: dotted name -> file (a package is its __init__.py)."""
    modules = {}
    for package, folder in package_dirs().items():
        for path in sorted(folder.glob("*.py")):
            modules[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return modules


def resolve(module: str, is_package: bool, level: int, name: Optional[str]) -> str:
    """The absolute name of ``from <level dots><name> import ...`` written in ``module``."""
    if not level:
        return name or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def project_target(name: str, modules: Dict[str, Path]) -> Optional[str]:
    """The deepest project module ``name`` is or lies in, or None (not the project's)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_nodes(tree: ast.AST) -> Iterator[Tuple[ast.stmt, bool]]:
    """Every import statement that can run, with whether it stands inside a function."""

    def walk(node: ast.AST, in_function: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and is_type_checking(child):
                for other in child.orelse:
                    yield from walk(other, in_function)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function
            yield from walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    yield from walk(tree, False)


def has_reason(lines: List[str], node: ast.stmt) -> bool:
    """A comment on the import's own line(s) or alone on the line above."""
    own = lines[node.lineno - 1 : node.end_lineno]
    above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
    return any("#" in line for line in own) or above.startswith("#")


def imports_of(module: str, path: Path, modules: Dict[str, Path]) -> Iterator[Import]:
    source = path.read_text()
    lines = source.splitlines()
    is_package = path.name == "__init__.py"
    for node, in_function in import_nodes(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:  # ``from P import x`` runs P (a package's __init__ too), then reads x from it
            base = resolve(module, is_package, node.level, node.module)
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in {project_target(name, modules) for name in names} - {None}:
            if target != module:
                yield Import(module, target, node.lineno, in_function, has_reason(lines, node))


@pytest.fixture(scope="module")
def imports() -> List[Import]:
    modules = project_modules()
    return [imp for module, path in modules.items() for imp in imports_of(module, path, modules)]


def find_cycles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """The cycles in each strongly connected component of more than one module (Tarjan), as chains."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    components: List[Set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(edges):
        if node not in index:
            connect(node)
    chains: List[List[str]] = []
    for component in components:  # the shortest cycle through each import in it, each cycle once
        for source in sorted(component):
            for target in sorted(edges[source] & component):
                chain = [source] + shortest_path(target, source, component, edges)
                if cycle_edges(chain) not in [cycle_edges(known) for known in chains]:
                    chains.append(chain)
    return chains


def cycle_edges(chain: List[str]) -> Set[Tuple[str, str]]:
    return set(zip(chain, chain[1:]))


def shortest_path(start: str, end: str, component: Set[str], edges: Dict[str, Set[str]]) -> List[str]:
    """start -> ... -> end inside the component (breadth first)."""
    came_from: Dict[str, str] = {start: start}
    frontier = [start]
    while end not in came_from:
        frontier = [
            came_from.setdefault(other, node) and other
            for node in frontier
            for other in sorted(edges.get(node, set()) & component)
            if other not in came_from
        ]
    path = [end]
    while path[-1] != start:
        path.append(came_from[path[-1]])
    return list(reversed(path))


def folder_of(module: str, modules: Dict[str, Path]) -> str:
    """The folder (package) that holds the module: a package's ``__init__.py`` is its own folder, any other module
    the package it lies in. Every folder is one node, however deep (training/engines/ is not training/)."""
    return module if modules[module].name == "__init__.py" else module.rpartition(".")[0]


def edges_between(imports: List[Import], node=lambda module: module) -> Dict[str, Set[str]]:
    edges: Dict[str, Set[str]] = {}
    for imp in imports:
        source, target = node(imp.source), node(imp.target)
        if source != target:
            edges.setdefault(source, set()).add(target)
    return edges


def within(module: str, prefixes: Tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def where(imp: Import) -> str:
    return f"{imp.source} (line {imp.line}) imports {imp.target}"


def test_the_module_map_finds_the_project():
    modules = project_modules()
    for name in (
        "cifar_dist.app",
        "cifar_dist.launchers.mpirun",
        "cifar_dist.conf",
        "hydra_plugins.cifar_dist_launcher.cifar_dist_launcher",
    ):
        assert name in modules, name
    assert len(modules) > 100


def test_cycles_are_found_and_printed_as_a_chain():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(edges) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_relative_imports_resolve_against_the_package():
    assert resolve("cifar_dist.tracking.store", False, 1, "settings") == "cifar_dist.tracking.settings"
    assert resolve("cifar_dist.tracking", True, 1, None) == "cifar_dist.tracking"
    assert resolve("cifar_dist.tracking.store", False, 2, "common") == "cifar_dist.common"


def test_no_import_cycle_between_the_projects_modules(imports):
    cycles = [" -> ".join(chain) for chain in find_cycles(edges_between(imports))]
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


def folder_cycles(imports: List[Import], modules: Dict[str, Path]) -> List[str]:
    edges = edges_between(imports, lambda module: folder_of(module, modules))
    return [" -> ".join(chain) for chain in find_cycles(edges)]


def test_no_import_cycle_between_the_projects_folders(imports):
    cycles = folder_cycles(imports, project_modules())
    assert cycles == [], "import cycles between folders:\n" + "\n".join(cycles)


def test_a_folder_and_the_folder_inside_it_are_two_nodes():
    """A parent folder and its subfolder importing each other (engines/ and process/ inside training/, launchers/ and
    launchers/ranks/) is a cycle, whichever flat module or ``__init__.py`` of the parent does it."""
    modules = {
        name: Path(f"{name.replace('.', '/')}/__init__.py") if is_package else Path(name.replace(".", "/") + ".py")
        for name, is_package in [
            ("p", True),
            ("p.run", False),
            ("p.sub", True),
            ("p.sub.part", False),
            ("p.other", True),
            ("p.other.piece", False),
        ]
    }

    def imp(source: str, target: str) -> Import:
        return Import(source, target, 1, False, False)

    assert folder_of("p.run", modules) == "p" and folder_of("p.sub", modules) == "p.sub"
    assert folder_of("p.sub.part", modules) == "p.sub"
    one_way = [imp("p.run", "p.sub.part"), imp("p.sub.part", "p.other.piece")]
    assert folder_cycles(one_way, modules) == []
    assert folder_cycles(one_way + [imp("p.sub.part", "p.run")], modules) == ["p -> p.sub -> p"]
    assert folder_cycles(one_way + [imp("p.other.piece", "p")], modules) == ["p -> p.sub -> p.other -> p"]


def test_cifar_dists_top_holds_only_the_app():
    top = {m for m in project_modules() if m.count(".") == 1 and m.startswith("cifar_dist.")}
    top = {m for m in top if project_modules()[m].name != "__init__.py"}
    assert sorted(top) == sorted(APP), "cifar_dist/ is the app's level: a helper goes into common/ or its area's folder"


def test_nothing_below_the_app_imports_it(imports):
    wrong = [where(imp) for imp in imports if within(imp.target, APP) and not within(imp.source, APP)]
    assert wrong == []


def test_the_common_helpers_import_nothing_of_the_project_but_each_other(imports):
    wrong = [where(imp) for imp in imports if within(imp.source, (COMMON,)) and not within(imp.target, (COMMON,))]
    assert wrong == []


def test_the_core_imports_no_launcher_sweeper_app_or_shim(imports):
    top = LAUNCHERS + SWEEPERS + APP + SHIMS
    wrong = [
        where(imp)
        for imp in imports
        if within(imp.source, ("cifar_dist",)) and not within(imp.source, top) and within(imp.target, top)
    ]
    assert wrong == []


def test_launchers_and_sweepers_never_import_the_app(imports):
    wrong = [where(imp) for imp in imports if within(imp.source, LAUNCHERS + SWEEPERS) and within(imp.target, APP)]
    assert wrong == []


def test_plugin_shims_import_the_behaviour_and_only_the_app_imports_a_shim(imports):
    wrong = [where(imp) for imp in imports if within(imp.target, SHIMS) and not within(imp.source, SHIMS + APP)]
    assert wrong == []


def silent_function_imports(module: str, path: Path) -> Iterator[str]:
    """Every import inside a function of ``module`` (of a project module or not) without a reason beside it."""
    source = path.read_text()
    lines = source.splitlines()
    for node, in_function in import_nodes(ast.parse(source, str(path))):
        if in_function and not has_reason(lines, node):
            yield f"{module} (line {node.lineno}): {lines[node.lineno - 1].strip()}"


def test_every_import_inside_a_function_says_why():
    silent = [line for module, path in project_modules().items() for line in silent_function_imports(module, path)]
    assert silent == [], f"{len(silent)} imports inside functions without a reason:\n" + "\n".join(silent)


def test_the_readme_layout_names_every_folder_and_only_modules_that_exist():
    readme = (ROOT / "README.md").read_text()
    layout = readme.split("## Project layout", 1)[1].split("```")[1]
    files = (
        {path.name for path in project_modules().values()}
        | {p.name for p in (ROOT / "scripts").glob("*")}
        | {p.name for p in (ROOT / "benchmarks").glob("*")}
        | {p.name for p in (ROOT / "tests").rglob("*.py")}
    )
    named = set(re.findall(r"[\w]+\.py\b", layout)) - {"setup.py"}
    assert sorted(named - files) == [], "the README's layout names modules that do not exist"
    folders = {path.parent.name for name, path in project_modules().items() if path.name == "__init__.py"}
    assert sorted(f for f in folders if f + "/" not in layout) == [], "folders the README's layout does not show"


# Where an engine's name may be compared: the engines package (which chooses and starts one) and the facts' module.
ENGINE_HOMES = ("cifar_dist.training.engines", "cifar_dist.common.engine_facts")
ENGINE_NAMES = {"horovod", "jax", "tensorflow"}


def engine_name_comparisons(module: str, path: Path) -> Iterator[str]:
    """Every comparison of something engine-named (its source says ``engine``) with an engine's name as a string
    literal (``engine == "jax"``, ``engine_name in ("horovod", "tensorflow")``): what differs by engine is a
    property of its facts (cifar_dist/common/engine_facts.py), not a name to compare."""
    source = path.read_text()
    for node in ast.walk(ast.parse(source, str(path))):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        literals = {
            c.value
            for operand in operands
            for c in ast.walk(operand)
            if isinstance(c, ast.Constant) and isinstance(c.value, str)
        }
        named = [o for o in operands if "engine" in ast.unparse(o).lower()]
        if literals & ENGINE_NAMES and named:
            yield f"{module} (line {node.lineno}): {ast.unparse(node)}"


def test_no_engine_name_is_compared_outside_the_engines_package():
    found = [
        line
        for module, path in project_modules().items()
        if not within(module, ENGINE_HOMES)
        for line in engine_name_comparisons(module, path)
    ]
    assert found == [], "engine names compared (ask the engine's facts instead):\n" + "\n".join(found)


def test_engine_name_comparisons_are_found(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        'if engine == "jax" or cfg.engine.name in ("horovod", "tensorflow"):\n    pass\n'
        'if "tensorflow" in sys.modules or backend != "tensorflow":\n    pass\n'
    )
    assert [line.split(": ", 1)[1] for line in engine_name_comparisons("m", path)] == [
        "engine == 'jax'",
        "cfg.engine.name in ('horovod', 'tensorflow')",
    ]


def test_the_trainer_imports_neither_horovod_nor_jax_not_even_in_a_function():
    """What differs by engine is the engine's (training/engines/): the trainer talks to it, never to Horovod or
    JAX, so no import of either stands anywhere in trainer.py."""
    path = project_modules()["cifar_dist.training.trainer"]
    found = []
    for node, _ in import_nodes(ast.parse(path.read_text(), str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        found += [f"line {node.lineno}: {name}" for name in names if name.split(".")[0] in ("horovod", "jax")]
    assert found == []


# Each library's private API is used in one module, its internals module (a release that changes one fails one named
# test, tests/common/test_private_apis.py): only it imports the library's private modules or touches the private
# attributes it relies on.
PRIVATE_HOMES = {
    "keras": "cifar_dist.common.keras_internals",
    "tf_keras": "cifar_dist.common.keras_internals",
    "jax": "cifar_dist.common.jax_internals",
    "jaxlib": "cifar_dist.common.jax_internals",
    "omegaconf": "cifar_dist.common.omegaconf_internals",
    "hydra": "cifar_dist.common.hydra_internals",
}


def private_library_module(name: str) -> Optional[str]:
    """The library whose private module ``name`` is (``keras.src.saving``, ``jax._src``, ``hydra._internal.utils``,
    ``omegaconf._utils``), else None."""
    top, *rest = name.split(".")
    if top in PRIVATE_HOMES and any(part.startswith("_") or (part == "src" and "keras" in top) for part in rest):
        return top
    return None


def imported_names(node: ast.stmt) -> List[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        return []
    return [node.module or ""] + [f"{node.module}.{alias.name}" for alias in node.names]


def private_module_imports(module: str, path: Path) -> Iterator[Tuple[str, str]]:
    """(library, where) of every import of a library's private module in ``module``."""
    for node, _ in import_nodes(ast.parse(path.read_text(), str(path))):
        found = [(private_library_module(name), name) for name in imported_names(node)]
        library, name = next(((library, name) for library, name in found if library), (None, None))
        if library:
            yield library, f"{module} (line {node.lineno}) imports {name}"


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_attributes(tree: ast.AST) -> Iterator[Tuple[str, int]]:
    """(name, line) of every private attribute read or set on another object than ``self``/``cls``: ``x._name``,
    ``getattr(x, "_name", ...)`` (and ``setattr``/``hasattr``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                yield node.attr, node.lineno
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2:
            name = node.args[1]
            if node.func.id in ("getattr", "setattr", "hasattr") and isinstance(name, ast.Constant):
                if isinstance(name.value, str) and is_private(name.value):
                    yield name.value, node.lineno


def test_only_each_librarys_internals_module_imports_its_private_modules():
    wrong = [
        f"{where}: only {PRIVATE_HOMES[library]} may"
        for module, path in project_modules().items()
        for library, where in private_module_imports(module, path)
        if module != PRIVATE_HOMES[library]
    ]
    assert wrong == [], "private modules imported outside their library's internals module:\n" + "\n".join(wrong)


def test_only_the_internals_modules_touch_the_private_attributes_they_rely_on():
    modules = project_modules()
    relied_on = {
        name: home
        for home in sorted(set(PRIVATE_HOMES.values()))
        for name, _ in private_attributes(ast.parse(modules[home].read_text()))
    }
    assert {"_jax_state", "_flatten_layers", "_set_flag", "_parse_overrides_and_create_caching_repo"} <= set(relied_on)
    wrong = [
        f"{module} (line {line}) touches {name}: call {relied_on[name]} instead"
        for module, path in modules.items()
        if module not in PRIVATE_HOMES.values()
        for name, line in private_attributes(ast.parse(path.read_text(), str(path)))
        if name in relied_on
    ]
    assert wrong == [], "\n".join(wrong)


def test_private_module_imports_and_attributes_are_found():
    assert [private_library_module(n) for n in ("keras.src.saving", "jax._src", "hydra._internal.utils")] == [
        "keras",
        "jax",
        "hydra",
    ]
    assert [private_library_module(n) for n in ("keras.saving", "jax.numpy", "omegaconf", "src.keras")] == [None] * 4
    tree = ast.parse('model._jax_state = None\nself._own = 1\ngetattr(hook, "_is_default", False)\nx.__dict__\n')
    assert list(private_attributes(tree)) == [("_jax_state", 1), ("_is_default", 3)]
