"""The README and docs agree with the code.

* Every ``python -m cifar_dist ...`` command in the README composes (Hydra's
  compose API; a sweep's comma list, range or interval is tried with its
  first value), so a renamed key or option breaks this test, not a reader.
* Every key the README's configuration tables name exists in its group.
* Every config group (read from Hydra's ConfigStore, where ``all_options.register_configs``
  stores cifar_dist's options; not a list of this file's) is named where the groups are listed:
  the README's configuration table, ``--help``'s "Chosen:" line, conf/config.yaml's opening
  comment, and the docstrings of the modules that define the options.
* Every relative link of the README and docs/*.md reaches a file, and a heading where it names one.
* docs/launchers.md has a row for every launcher, docs/tracking.md says
  how every launcher is tracked, and ``python -m cifar_dist.tracking --help``
  shows no RST markup.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set

import pytest
from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
from omegaconf import DictConfig, OmegaConf

import cifar_dist.app  # noqa: F401  (registers the config schema)
from cifar_dist.all_options import register_configs
from helpers.cli import assert_ok, cli_env
from helpers.paths import REPO

README = (REPO / "README.md").read_text("utf-8")
FLAGS_WITH_A_VALUE = (
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
)
FLAGS = ("-m", "--multirun", "--resolve", "--info", "-i")


@pytest.fixture(scope="module")
def hydra_conf():
    GlobalHydra.instance().clear()
    with initialize_config_module("cifar_dist.conf", version_base="1.3"):
        yield GlobalHydra.instance().config_loader()
    GlobalHydra.instance().clear()


def options(loader, group: str) -> List[str]:
    """The group's built-in options: YAML files of conf/ and cifar_dist's own ConfigStore entries
    (not an option another test module stored in the process-wide ConfigStore)."""
    repo = ConfigStore.instance().repo.get(group, {})
    return [
        o
        for o in loader.get_group_options(group)
        if not o.endswith("_schema") and (f"{o}.yaml" not in repo or repo[f"{o}.yaml"].provider == "cifar_dist")
    ]


def store_groups() -> Dict[str, Set[str]]:
    """Every config group with an option of cifar_dist's own in Hydra's ConfigStore (Hydra's groups under
    ``hydra/`` left out), each with the source files that define its options' dataclasses."""
    register_configs()
    groups: Dict[str, Set[str]] = {}
    for group, entries in ConfigStore.instance().repo.items():
        if group == "hydra" or not isinstance(entries, dict):
            continue
        for node in entries.values():
            if getattr(node, "provider", None) != "cifar_dist":
                continue
            kind = OmegaConf.get_type(node.node)
            source = getattr(sys.modules.get(getattr(kind, "__module__", "")), "__file__", None)
            groups.setdefault(group, set()).add(str(Path(source).resolve()) if source else "")
    return groups


def test_the_config_store_has_the_groups():
    """The derivation itself: if it found nothing, the tests below would check nothing."""
    groups = store_groups()
    assert len(groups) >= 8 and "launcher" in groups, sorted(groups)


def named(text: str) -> Set[str]:
    return set(re.findall(r"[a-z_]+", text))


def test_the_readme_table_has_a_row_for_every_group():
    section = README.split("## Configuration", 1)[1].split("### `trainer` keys", 1)[0]
    rows = {m for m in re.findall(r"^\| `(\w+)` \|", section, re.M)}
    missing = sorted(set(store_groups()) - rows)
    assert missing == [], f"the README's configuration table has no row for {missing}"


def test_help_chosen_line_names_every_group(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "cifar_dist", "--help"],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=tmp_path,
        timeout=120,
    )
    assert_ok(proc)
    chosen = [line for line in proc.stdout.splitlines() if line.startswith("Chosen:")]
    assert len(chosen) == 1, proc.stdout
    shown = set(re.findall(r"(\w+)=\S+", chosen[0]))
    missing = sorted(set(store_groups()) - shown)
    assert missing == [], f"--help's Chosen line does not show {missing}: {chosen[0]}"


def test_config_yaml_opening_comment_names_every_group():
    text = (REPO / "conf" / "config.yaml").read_text("utf-8")
    comment = text.split("\ndefaults:", 1)[0]
    missing = sorted(set(store_groups()) - named(comment))
    assert missing == [], f"conf/config.yaml's opening comment does not name {missing}"


def test_the_modules_that_define_options_name_their_groups():
    """config/schema.py's docstring opens with the groups whose options it holds (or re-exports: data's, from
    data_options.py), config/options.py's says which module registers which groups: each group whose options
    are defined under cifar_dist/config/ must be in both."""
    config_dir = REPO / "cifar_dist" / "config"
    core = {g for g, files in store_groups().items() if any(Path(f).parent == config_dir for f in files)}
    assert core, "no option defined under cifar_dist/config/: the derivation is broken"
    schema = (config_dir / "schema.py").read_text("utf-8").split('"""')[1].split("\n\n", 1)[0]
    options_doc = (config_dir / "options.py").read_text("utf-8").split('"""')[1]
    registers = options_doc.split("register_configs", 1)[1]
    for where, text in (("config/schema.py's docstring", schema), ("config/options.py's docstring", registers)):
        missing = sorted(core - named(text))
        assert missing == [], f"{where} does not name {missing}"


def readme_commands() -> List[List[str]]:
    """Every ``python -m cifar_dist`` command in the README's shell blocks, as argv after the module."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.splitlines():
            argv = shlex.split(line, comments=True)
            if argv[:3] == ["python", "-m", "cifar_dist"]:
                commands.append(argv[3:])
    return commands


def concrete(overrides: List[str]) -> List[str]:
    """Each sweep override (``a=1,2``, ``range``, ``interval``) with its first value, so that it composes."""
    out = []
    for raw, parsed in zip(overrides, OverridesParser.create().parse_overrides(overrides)):
        value = parsed.value()
        if isinstance(value, ChoiceSweep):
            value = value.list[0]
        elif isinstance(value, (RangeSweep, IntervalSweep)):
            value = value.start
        else:
            out.append(raw)
            continue
        out.append(f"{parsed.get_key_element()}={value}")
    return out


def overrides_of(argv: List[str]) -> List[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in FLAGS_WITH_A_VALUE:
            skip = True
        elif arg in FLAGS:
            continue
        else:
            assert not arg.startswith("-"), f"the README uses {arg}: teach this test what it means"
            out.append(arg)
    return out


def test_the_readme_has_the_cookbook_commands():
    assert len(readme_commands()) >= 15


def composable_here(argv: List[str]) -> bool:
    """A command that names no config dir of the user's: those (README "Your own model and data") need the
    user's files, and tests/e2e/test_own_model_readme.py writes them and runs the commands end to end."""
    return "--config-dir" not in argv and "-cd" not in argv


@pytest.mark.parametrize(
    "argv", [a for a in readme_commands() if composable_here(a)], ids=lambda argv: " ".join(argv)[:80]
)
def test_every_readme_command_composes(hydra_conf, argv):
    cfg = compose("config", overrides=concrete(overrides_of(argv)), return_hydra_config=True)
    assert isinstance(cfg.trainer, DictConfig)


def flat_keys(node, prefix: str = "") -> Set[str]:
    keys = set()
    for key, value in node.items():
        name = f"{prefix}{key}"
        keys.add(name)
        if isinstance(value, dict):
            keys |= flat_keys(value, name + ".")
    return keys


def expand(token: str) -> List[str]:
    """``augment.{enabled,translate}`` -> ``augment.enabled``, ``augment.translate``."""
    m = re.fullmatch(r"(.*)\{(.*)\}(.*)", token)
    return [f"{m.group(1)}{part}{m.group(3)}" for part in m.group(2).split(",")] if m else [token]


KEYS = r"`([a-z_][a-z0-9_.{},]*)`"


def table_keys(section: str) -> Dict[str, List[str]]:
    """``group -> keys`` from the README's configuration tables: the groups' table, and the trainer's keys."""
    groups, trainer = section.split("### `trainer` keys", 1)
    trainer = trainer.split("\n### ", 1)[0]
    found: Dict[str, List[str]] = {}
    for line in groups.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`"):
            found.setdefault(cells[0].strip("`"), []).extend(
                k for cell in cells[2:] for t in re.findall(KEYS, cell) for k in expand(t)
            )
    for line in trainer.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`"):
            found.setdefault("trainer", []).extend(k for t in re.findall(KEYS, cells[0]) for k in expand(t))
    return found


def test_every_key_in_the_configuration_tables_exists(hydra_conf):
    section = README.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    tables = table_keys(section)
    groups = set(store_groups())
    assert groups <= set(tables)
    assert len(tables["trainer"]) >= 25
    missing = []
    for group, keys in tables.items():
        if group not in groups:  # experiment, debug, local: presets and files of conf/, no keys of their own
            continue
        known: Set[str] = set()
        for option in options(hydra_conf, group):
            cfg = OmegaConf.to_container(compose("config", overrides=[f"{group}={option}"]), resolve=False)
            known |= flat_keys(cfg[group]) | flat_keys(cfg.get("evaluate") or {}, "evaluate.")
        missing += [f"{group}: {k}" for k in keys if k not in known]
    assert missing == []


def test_docs_launchers_has_a_row_for_every_launcher(hydra_conf):
    text = (REPO / "docs" / "launchers.md").read_text("utf-8")
    rows = set(re.findall(r"^\| `(\w+)`\s+\|", text, re.M))
    launchers = set(options(hydra_conf, "launcher"))
    assert launchers and launchers <= rows, f"no docs/launchers.md row for {sorted(launchers - rows)}"


def test_docs_tracking_says_how_every_launcher_is_tracked(hydra_conf):
    text = (REPO / "docs" / "tracking.md").read_text("utf-8")
    table = text.split("## Where metrics are logged from, per launcher", 1)[1].split("\n## ", 1)[0]
    named = {
        name
        for row in table.splitlines()
        if row.startswith("| `")
        for name in re.findall(r"`(\w+)`", row.split("|")[1])
    }
    assert set(options(hydra_conf, "launcher")) <= named
    assert "coming" not in table


def test_the_tracking_cli_help_has_no_rst_markup():
    proc = subprocess.run(
        [sys.executable, "-m", "cifar_dist.tracking", "--help"],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )
    assert_ok(proc)
    assert "import" in proc.stdout
    assert "``" not in proc.stdout and ":func:" not in proc.stdout


def test_the_packaging_and_launchers_package_name_every_launcher(hydra_conf):
    described = (REPO / "setup.cfg").read_text("utf-8").split("description", 1)[1].splitlines()[0].lower()
    package_doc = (REPO / "launchers" / "__init__.py").read_text("utf-8").lower()
    intro = README.split("\n## ", 1)[0].lower()
    names = {"mpirun": "mpirun", "gloo": "gloo", "slurm": "slurm", "azureml": "azure ml", "batchai": "batch ai"}
    for launcher in options(hydra_conf, "launcher"):
        if launcher == "local":
            continue
        for where, text in (("setup.cfg", described), ("launchers/__init__.py", package_doc), ("README intro", intro)):
            assert names[launcher] in text, f"{where} does not name {launcher}"
    assert "retired" in intro


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_in_the_readme_and_docs_resolves():
    """A moved section or file (docs/benchmarks.md's history went to docs/benchmarks-history.md) leaves no link
    to a file or heading that is gone."""
    broken = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = page.read_text("utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
            elif anchor and linked.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", linked.read_text("utf-8"), re.M)
                if anchor not in {slug(h) for h in headings}:
                    broken.append(f"{page.relative_to(REPO)}: {target}")
    assert broken == []
