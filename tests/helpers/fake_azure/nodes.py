"""Running a job's node for real: the uploaded entry script in a local
subprocess, against a directory standing in for the job's mounted shares.

With ``BatchAIState.node_root`` set, a job that starts running is not
simulated: its shares are copied out below ``node_root/<relativeMountPath>``,
``<pythonScriptFilePath> <commandLineArgs>`` runs as one process (so
processCount must be 1) with ``AZ_BATCHAI_JOB_MOUNT_ROOT=node_root`` and the
job's environment variables, writing stdout/stderr into the job's stdouterr
folder there; what it writes is copied back into the fake File service as it
appears, so the launcher streams and downloads it through the real SDKs.
jobPreparation is not run: this interpreter already has cifar_dist and its
dependencies (the test's checkout, not the uploaded wheel).

Preemption (``BatchAIState.preemptions``, run by ``node_process``): the process
is killed (SIGKILL, its whole process group) as soon as the run dir holds a
finished checkpoint, and the job goes back to queued, as Batch AI requeued a
job whose low-priority node was taken away; the next run starts a fresh
process on the same share.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Dict, Set, Tuple

from .files import FileStore
from .node_process import NodeProcess

MOUNT_ROOT_VAR = "$AZ_BATCHAI_JOB_MOUNT_ROOT"
REPO = Path(__file__).resolve().parents[3]


class Mirror:
    """Copies between the fake File service and a local directory per share:
    files uploaded through the API go out before a node starts, files the
    node writes come back in (changed ones only, by size and mtime; deleted
    ones are dropped)."""

    def __init__(self, files: FileStore, root: Path):
        self.files = files
        self.root = root
        self._seen: Dict[Tuple[str, str], Tuple[int, int]] = {}

    def export(self, share: str, mount: str) -> None:
        base = self.root / mount
        base.mkdir(parents=True, exist_ok=True)
        for path, entry in list(self.files.shares.get(share, {}).items()):
            target = base / path
            if entry is None:
                target.mkdir(parents=True, exist_ok=True)
                continue
            if (share, path) in self._seen:  # it came from the disk (or went there already)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(bytes(entry.data))
            stat = target.stat()
            self._seen[(share, path)] = (stat.st_size, stat.st_mtime_ns)

    def import_changes(self, share: str, mount: str) -> None:
        base = self.root / mount
        present: Set[Tuple[str, str]] = set()
        for dirpath, _dirs, names in os.walk(base):
            for name in names:
                local = Path(dirpath) / name
                rel = local.relative_to(base).as_posix()
                key = (share, rel)
                try:
                    stat = local.stat()
                    signature = (stat.st_size, stat.st_mtime_ns)
                    present.add(key)
                    if self._seen.get(key) != signature:
                        self.files.write(share, rel, local.read_bytes())
                        self._seen[key] = signature
                except FileNotFoundError:  # renamed or removed while we looked (a temp file)
                    continue
        for key in [k for k in self._seen if k[0] == share and k not in present]:
            self.files.shares.get(share, {}).pop(key[1], None)
            del self._seen[key]


class NodeRun(NodeProcess):
    """One run of a job's entry script (one attempt; a requeued job gets a new one)."""

    def __init__(
        self, root: Path, script: str, args: str, env: Dict[str, str], stdouterr: Path, run_dir: Path, preempt: bool
    ):
        stdouterr.mkdir(parents=True, exist_ok=True)
        expand = lambda text: text.replace(MOUNT_ROOT_VAR, str(root))  # noqa: E731  (Batch AI expands it)
        node_env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "FAKE_AZURE", "CIFAR_DIST_"))}
        node_env.update(env)
        node_env.update(
            {
                "AZ_BATCHAI_JOB_MOUNT_ROOT": str(root),
                "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), node_env.get("PYTHONPATH", "")) if p),
                "PYTHONUNBUFFERED": "1",
                "TF_CPP_MIN_LOG_LEVEL": "2",
            }
        )
        # A new run writes its stdout.txt/stderr.txt afresh (what Batch AI did on a retry is not
        # documented; the launcher copes with either).
        with open(stdouterr / "stdout.txt", "wb") as out, open(stdouterr / "stderr.txt", "wb") as err:
            super().__init__(
                [sys.executable, expand(script), *shlex.split(expand(args))],
                env=node_env,
                cwd=root,
                stdout=out,
                stderr=err,
                run_dir=run_dir,
                preempt=preempt,
            )
