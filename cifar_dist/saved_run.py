"""Re-running a run dir's experiment: ``python -m cifar_dist --config-path <run>/.hydra --config-name config``.

Left to Hydra, that folder's ``config.yaml`` becomes the primary config: a
relative path is looked up as a Python module (``Primary config module
'cifar_dist.outputs.runs....hydra' not found``), and an absolute one composes
without cifar_dist's Hydra settings (the log becomes ``app.log``, the run-dir
checks and the sweep launcher are gone, the schema's keys are refused). So the
launching command rewrites it: cifar_dist's own primary config, the overrides
the run was made with (``<run>/.hydra/overrides.yaml``), then the command's own
overrides, which win -- the run's own composition, in a new run dir unless
``hydra.run.dir`` says otherwise (a re-run into the same dir resumes it, checked
as every re-run is).

A run dir is data, not code: a recorded override that names code (a ``_target_``),
grants trust (``evaluate.trust_model``) or reads configs from inside the run dir is
refused in one line that lists it; the user trusts it by giving it on their own
command line (``rundir/run_code.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence

from omegaconf import OmegaConf

from cifar_dist.common.errors import CifarDistError
from cifar_dist.config.override_check import parsed_command_line, replace_overrides
from cifar_dist.config.override_syntax import override_key
from cifar_dist.rundir.run_code import refuse_recorded_code

SAVED_CONFIG = "config"  # what Hydra saved into <run>/.hydra/ (config.yaml), as --config-name names it
FLAGS = {"--config-path": "config_path", "-cp": "config_path", "--config-name": "config_name", "-cn": "config_name"}


class SavedRunError(CifarDistError):
    """A run's saved overrides cannot be read; the message names the file."""


def saved_run_folder(config_path: Optional[str], config_name: Optional[str]) -> Optional[Path]:
    """The ``.hydra`` folder of a run dir that ``--config-path``/``--config-name`` name, or None for any other."""
    if not config_path or (config_name or "").removesuffix(".yaml") != SAVED_CONFIG:
        return None
    folder = Path(config_path).expanduser()
    return folder if (folder / "hydra.yaml").is_file() and (folder / "overrides.yaml").is_file() else None


def recorded_overrides(folder: Path) -> List[str]:
    """The command-line overrides the run was made with (Hydra's ``overrides.yaml``)."""
    path = folder / "overrides.yaml"
    try:
        loaded = OmegaConf.load(path)
    except Exception as exc:  # noqa: BLE001 -- a YAML or I/O error, named in one line
        raise SavedRunError(
            f"cannot read {path} ({type(exc).__name__}); re-run with the run's overrides instead of --config-path"
        ) from None
    if not OmegaConf.is_list(loaded) or not all(isinstance(o, str) for o in loaded):
        raise SavedRunError(
            f"{path} is not a list of overrides; re-run with the run's overrides instead of --config-path"
        )
    return list(loaded)


def _without_config_flags(argv: Sequence[str]) -> List[str]:
    """``argv`` without ``--config-path``/``--config-name`` (``-cp``/``-cn``, ``--flag=value`` too) and their values."""
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in FLAGS:
            skip = True
        elif word.split("=", 1)[0] not in FLAGS:
            out.append(word)
    return out


def from_saved_run(argv: Sequence[str]) -> List[str]:
    """``argv`` with a run's ``.hydra`` as its primary config rewritten into cifar_dist's own config plus the
    run's recorded overrides; any other ``argv`` as given."""
    parsed = parsed_command_line(argv)
    folder = saved_run_folder(parsed.config_path, parsed.config_name) if parsed is not None else None
    if folder is None:
        return list(argv)
    given = set(override_key(o) for o in parsed.overrides)
    recorded = [o for o in recorded_overrides(folder) if override_key(o) not in given]
    refuse_recorded_code(recorded, folder.parent, folder / "overrides.yaml")  # a run dir is data, not code
    rest = _without_config_flags(argv)
    return replace_overrides(rest, parsed.overrides, recorded + list(parsed.overrides)) or recorded + rest
