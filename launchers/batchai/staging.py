"""What a Batch AI job needs on the share, prepared locally: this package as a
wheel, the run's composed config (with the in-process launcher inside) and the
node entry script.

The wheel is built from a copy of exactly the files that are hashed, and
cached by that hash: an unchanged source tree is neither rebuilt nor (since
the hash is part of its path on the share) uploaded again.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from cifar_dist.common.atomic_files import publish_dir
from cifar_dist.common.external_commands import BUILD_TIMEOUT_S, run_command
from cifar_dist.common.redaction import redact_text
from cifar_dist.launchers.azure.package_sources import content_hash, copy_files, source_files, source_root
from cifar_dist.launchers.base import LaunchError

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
            raise LaunchError(
                f"launcher.package={prebuilt!r} is not a wheel file; build one with `pip wheel . --no-deps`"
            )
        return Wheel(path, file_hash(path))
    root = source_root()
    copies = {rel: root / rel for rel in source_files(root)}
    digest = content_hash(copies)
    target = cache_dir / "wheels" / digest[:16]
    built = sorted(target.glob("cifar_dist-*.whl")) if target.is_dir() else []
    if built:
        return Wheel(built[0], digest)
    return Wheel(_build(copies, target), digest)


def _build(copies: Dict[Path, Path], target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cifar_dist-wheel-", dir=target.parent) as tmp:
        src = Path(tmp) / "src"
        copy_files(copies, src)
        out = Path(tmp) / "out"
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-q",
            "-w",
            str(out),
            str(src),
        ]
        proc = run_command(
            cmd,
            "building the cifar_dist wheel",
            "build it yourself (`pip wheel . --no-deps`) and pass launcher.package=<the wheel>",
            BUILD_TIMEOUT_S,
            error=LaunchError,
        )
        wheels = sorted(out.glob("cifar_dist-*.whl"))
        if proc.returncode != 0 or not wheels:
            detail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no wheel produced"]
            raise LaunchError(f"building the cifar_dist wheel failed: {detail[0]} (try `pip wheel . --no-deps`)")
        publish_dir(out, target)  # a concurrent build of the same hash is harmless
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
