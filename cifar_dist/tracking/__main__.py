"""``python -m cifar_dist.tracking import <run dir or sweep dir> [--uri URI]``: send run dirs to MLflow.

For what a job could not send (the tracking server was down), for run dirs
downloaded from a cluster, or to copy runs to another tracker (``--uri``).
Safe to repeat: runs are reused and only missing epochs are sent.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import List, Optional

from cifar_dist.common.results import read_point
from cifar_dist.tracking.failure_guard import one_line
from cifar_dist.tracking.job_hooks import import_run_dir
from cifar_dist.tracking.sweep_parent import close_sweep


def job_dirs(path: Path) -> List[Path]:
    """``path`` itself when it is a job's run dir, else every job run dir under it (a sweep dir)."""
    if (path / ".hydra" / "config.yaml").is_file():
        return [path]
    return sorted(p.parent.parent for p in path.rglob(".hydra/config.yaml"))


def plain(doc: str) -> str:
    """A module docstring as a terminal shows it: no RST literal markup."""
    return doc.replace("``", "").strip()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cifar_dist.tracking",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import", help="send a run dir (or every point of a sweep dir) to MLflow")
    imp.add_argument("path", type=Path, help="a run dir, or a sweep dir")
    imp.add_argument("--uri", help="tracking URI (default: the one the run dir recorded, else its config's)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(levelname)s: %(message)s")

    dirs = job_dirs(args.path) if args.path.is_dir() else []
    if not dirs:
        print(
            f"cifar_dist.tracking: error: {args.path} is neither a run dir (with .hydra/config.yaml) nor a "
            "sweep dir holding some; give the folder a job wrote",
            file=sys.stderr,
        )
        return 2
    failed = []
    for run_dir in dirs:
        point = read_point(run_dir)
        try:
            run_id = import_run_dir(run_dir, uri=args.uri, failed=point is not None and point.status == "failed")
        except Exception as exc:  # one line per run dir, then the next
            print(f"cifar_dist.tracking: error: {run_dir}: {one_line(exc)}", file=sys.stderr)
            failed.append(run_dir)
            continue
        print(f"{run_dir}: MLflow run {run_id}")
    if dirs != [args.path]:
        points = [read_point(d) for d in dirs]
        close_sweep(args.path, [p.num for p in points if p is not None and p.status != "ok"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
