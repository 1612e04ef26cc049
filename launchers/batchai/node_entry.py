"""Entry script that Batch AI runs on every rank (``horovodSettings.pythonScriptFilePath``).

The launcher uploads this file next to the run's composed config; Batch AI
starts it under mpirun, once per rank, after jobPreparation has installed the
cifar_dist wheel. It runs the app as ``python -m cifar_dist`` with that config (in-process launcher)
and its run dir on the mounted share, so the outputs land where the launcher
downloads them from. It reads its rank as every rank wrapper does
(``rank_exec.RANK_VARS``) and quotes the run dir with the project's one rule
(``base.quote_override_value``).
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from typing import List, Optional, Sequence

from cifar_dist.common.environment import snapshot
from cifar_dist.config.override_syntax import quote_override_value, searchpath_override
from cifar_dist.launchers.ranks.rank_env import rank_environment
from cifar_dist.launchers.ranks.rank_exec import RANK_VARS, env_int


def _rank() -> int:

    return env_int(RANK_VARS, 0)


def hydra_argv(
    config_dir: str, config_name: str, run_dir: str, rank: int, search_dirs: Sequence[str] = ()
) -> List[str]:
    """Hydra arguments for this rank: rank 0 writes .hydra/ and cifar_dist_node.log,
    the others log to their own file and write no .hydra/ (all share one dir;
    the names differ from the launching side's cifar_dist.log, which the
    downloaded outputs must not overwrite). ``search_dirs``: the user's config
    dirs copied to the share, where the composed config's choices
    (``model: mine``) are found again."""

    argv = ["--config-dir", config_dir, "--config-name", config_name, f"hydra.run.dir={quote_override_value(run_dir)}"]
    if search_dirs:
        argv.append(searchpath_override(f"file://{d}" for d in search_dirs))
    if rank == 0:
        argv.append("hydra.job.name=cifar_dist_node")
    else:
        argv += [f"hydra.job.name=cifar_dist_node_rank{rank}", "hydra.output_subdir=null"]
    return argv


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-dir", required=True)
    parser.add_argument("--config-name", required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--search-dir", action="append", default=[], help="a config dir of the user's, copied")
    parser.add_argument("--code-dir", action="append", default=[], help="the user's _target_ modules, copied")
    args = parser.parse_args(argv)

    # A launched process always trains in-process (see launchers/base.py). The job's
    # environmentVariables carry rank_environment() from the launching side; what they
    # lack (a job sent by an older launcher) is filled in here, the guard always.
    from cifar_dist.launchers.base import RANK_GUARD_ENV

    os.environ.update({**rank_environment(), **snapshot(), RANK_GUARD_ENV: "1"})
    sys.path[:0] = args.code_dir  # the app runs in this process: the user's modules import from here
    sys.argv = [sys.argv[0], *hydra_argv(args.config_dir, args.config_name, args.run_dir, _rank(), args.search_dir)]
    # The app through its command line, `python -m cifar_dist`, as every launcher starts its ranks: in this
    # process (the user's modules on sys.path above), without importing the app (the layer above launchers).
    runpy.run_module("cifar_dist", run_name="__main__")


if __name__ == "__main__":
    main()
