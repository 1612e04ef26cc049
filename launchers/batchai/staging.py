"""What a Batch AI job needs on the share, prepared locally: this package as a
wheel, the run's composed config (with the in-process launcher inside) and the
node entry script.

The wheel is built from a copy of exactly the files that are hashed, and
cached by that hash: an unchanged source tree is neither rebuilt nor (since
the hash is part of its path on the share) uploaded again.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from omegaconf import DictConfig, OmegaConf

from cifar_dist.launchers.base import LaunchError
from cifar_dist.redaction import redact_text

_PROJECT_FILES = ("setup.cfg", "setup.py", "pyproject.toml", "README.md", "LICENSE")
# The source folders setup.cfg packages (cifar_dist.conf and cifar_dist.launchers
# live at the top level of the repository, mapped by package_dir; hydra_plugins/
# holds the sweep launcher's name for Hydra).
_SOURCE_DIRS = ("cifar_dist", "conf", "launchers", "hydra_plugins")
_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".hypothesis"}
_SKIP_SUFFIXES = {".pyc", ".pyo"}
# The user's own cluster/storage names (git-ignored) stay on the user's machine.
_SKIP_PARTS = ("conf", "local")

# Groups not repeated in the node's defaults list: hydra's own (the nodes get
# their own run dir), the presets (their effect is already in the other
# choices and in the values) and the user's git-ignored local names.
_NOT_REPEATED = ("hydra", "experiment", "debug", "local")

LOCAL_LAUNCHER = {"_target_": "cifar_dist.launchers.local.LocalLauncher"}


@dataclass(frozen=True)
class Wheel:
    path: Path
    digest: str  # content hash of the source it was built from (or of the wheel itself)

    @property
    def share_path(self) -> str:
        """Path below the experiment folder: packages/<hash>/<wheel file name>."""
        return f"packages/{self.digest[:16]}/{self.path.name}"


def source_root() -> Path:
    """The source tree this package runs from (an editable install or a checkout)."""
    import cifar_dist

    root = Path(cifar_dist.__file__).resolve().parent.parent
    if not (root / "setup.cfg").is_file():
        raise LaunchError(
            f"cifar_dist is installed from {root}, not from a source tree, so no wheel can be built; "
            "install it editable (pip install -e .) or pass launcher.package=<path to a cifar_dist wheel>"
        )
    return root


def source_files(root: Path) -> List[Path]:
    """The files that make the wheel, relative to ``root``, in a stable order."""
    files = [Path(name) for name in _PROJECT_FILES if (root / name).is_file()]
    for top in _SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(root / top):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
            rel_dir = Path(dirpath).relative_to(root)
            if rel_dir.parts[-2:] == _SKIP_PARTS:
                dirnames[:] = []
                continue
            for name in sorted(filenames):
                if Path(name).suffix not in _SKIP_SUFFIXES:
                    files.append(rel_dir / name)
    return files


def content_hash(root: Path, files: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for rel in files:
        digest.update(str(rel).encode() + b"\0")
        digest.update(hashlib.sha256((root / rel).read_bytes()).digest())
    return digest.hexdigest()


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def package_wheel(prebuilt: Optional[str], cache_dir: Path) -> Wheel:
    """The wheel to install on the nodes: ``prebuilt`` as is, or one built from
    the source tree (cached under ``cache_dir/wheels/<hash>``)."""
    if prebuilt:
        path = Path(prebuilt).expanduser().resolve()
        if not path.is_file() or path.suffix != ".whl":
            raise LaunchError(f"launcher.package={prebuilt!r} is not a wheel file; build one with `pip wheel . --no-deps`")
        return Wheel(path, file_hash(path))
    root = source_root()
    files = source_files(root)
    digest = content_hash(root, files)
    target = cache_dir / "wheels" / digest[:16]
    built = sorted(target.glob("cifar_dist-*.whl")) if target.is_dir() else []
    if built:
        return Wheel(built[0], digest)
    return Wheel(_build(root, files, target), digest)


def _build(root: Path, files: List[Path], target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cifar_dist-wheel-", dir=target.parent) as tmp:
        src = Path(tmp) / "src"
        for rel in files:
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, src / rel)
        out = Path(tmp) / "out"
        cmd = [
            sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
            "--disable-pip-version-check", "-q", "-w", str(out), str(src),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(out.glob("cifar_dist-*.whl"))
        if proc.returncode != 0 or not wheels:
            detail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no wheel produced"]
            raise LaunchError(f"building the cifar_dist wheel failed: {detail[0]} (try `pip wheel . --no-deps`)")
        try:
            os.replace(out, target)  # atomic: a concurrent build of the same hash is harmless
        except OSError:
            if not target.is_dir():
                raise
    return sorted(target.glob("cifar_dist-*.whl"))[0]


def node_job_config(cfg: DictConfig, choices: Dict[str, Optional[str]]) -> str:
    """The run's composed config as a primary config the nodes compose with Hydra.

    Its defaults list repeats this run's group choices (so every group gets
    its typed schema back) with the in-process launcher, and ``_self_`` last
    puts back every composed value. Interpolations stay unresolved, as in
    ``.hydra/config.yaml``: node-side values resolve on the node.
    """
    defaults: List[object] = ["config_schema"]
    for group, choice in choices.items():
        if choice is None or group.startswith("hydra/") or group in _NOT_REPEATED:
            continue
        defaults.append({group: "local" if group == "launcher" else choice})
    defaults.append("_self_")
    body = OmegaConf.to_container(cfg, resolve=False)
    body["launcher"] = dict(LOCAL_LAUNCHER)
    if body.get("tracking") and body["tracking"].get("remote", "import") == "import":
        # The launching machine imports the downloaded run dir (tracking/job_hooks.py after_download).
        body["tracking"]["backend"] = "none"
    doc = OmegaConf.create({"defaults": defaults, **body})
    header = (
        "# Composed by cifar_dist's Batch AI launcher: this run's config, run on every\n"
        "# Batch AI node with the in-process launcher (see launchers/batchai/node_entry.py).\n"
    )
    # A file on the share: the tracking URI without user:password (the job's secrets carry them).
    return header + redact_text(OmegaConf.to_yaml(doc))


def node_entry_source() -> str:
    return resources.files("cifar_dist.launchers.batchai").joinpath("node_entry.py").read_text("utf-8")
