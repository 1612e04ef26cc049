"""Which rank made a multi-rank job fail, and what its log said.

When one rank dies, Horovod shuts down on every other rank ("Horovod has been
shut down ...") and the runtime kills the rest, so the rank mpirun reports
first is often a victim. The per-rank exit records written by ``rank_exec``
tell the true order; the runner's own messages are the fallback when a rank
left no record (its wrapper was killed, or its host does not share the run
dir).
"""

from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from cifar_dist.common.log_tail import tail
from cifar_dist.config.override_syntax import rerun_hint
from cifar_dist.launchers.ranks.rank_exec import exit_record_path, log_path
from cifar_dist.rundir.checkpoints import list_checkpoints

HOROVOD_SHUTDOWN = "Horovod has been shut down"

_RUNNER_PATTERNS = (
    # mpirun: a rank killed by a signal
    re.compile(r"process rank (?P<rank>\d+) with PID \d+ on node (?P<host>\S+) exited on signal (?P<signal>\d+)"),
    # mpirun: the first rank to exit non-zero
    re.compile(r"Process name: \[\[\d+,\d+\],(?P<rank>\d+)\]\s+Exit code:\s+(?P<code>\d+)"),
    # srun --kill-on-bad-exit: the first task to exit non-zero
    re.compile(r"srun: error: (?P<host>\S+): task (?P<rank>\d+): Exited with exit code (?P<code>\d+)"),
    # horovodrun --gloo
    re.compile(r"Process (?P<rank>\d+) exit with status code (?P<code>-?\d+)"),
)


@dataclass
class RankFailure:
    rank: Optional[int]
    how: str  # "exited with code 3", "was killed by signal 9 (SIGKILL)"
    host: str = ""
    log: Optional[Path] = None
    log_tail: str = ""

    def message(self, output_dir: Path) -> str:
        who = f"rank {self.rank}" if self.rank is not None else "a rank"
        where = f" on {self.host}" if self.host else ""
        text = f"{who}{where} {self.how}; the whole job was stopped."
        if self.log is not None:
            text += f" Last lines of {self.log}:\n{self.log_tail}"
        if not list_checkpoints(output_dir / "checkpoints"):
            return text + "\nNo checkpoint was written: nothing to resume."
        return text + f"\nCheckpoints in {output_dir / 'checkpoints'} are kept: {rerun_hint(output_dir)} to resume."


def read_exit_records(log_dir: Path, np: int, since: float, launch: Optional[str] = None) -> List[dict]:
    """The exit records of this launch: with its ``launch`` id, those tagged with it (a rank of an earlier
    launch may have written its record after this one started); without, those written ``since``."""
    records = []
    for rank in range(np):
        path = exit_record_path(log_dir, rank)
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("time", 0) >= since and (launch is None or record.get("launch") == launch):
            records.append(record)
    return records


def _describe(code: int, sig: Optional[int]) -> str:
    if sig:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"was killed by signal {sig} ({name})"
    return f"exited with code {code}"


TEARDOWN_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def first_failure(
    log_dir: Path, np: int, since: float, runner_output: str, launch: Optional[str] = None
) -> RankFailure:
    """The rank to blame.

    In order: the earliest rank that failed on its own (non-zero exit that is
    neither Horovod's shutdown after another rank's failure nor the SIGTERM
    or SIGINT a runner uses to tear the job down); else the rank the runner
    reported (its wrapper left no record, e.g. it was killed itself); else
    the earliest failed rank of any kind. Only records of this launch count (``read_exit_records``).
    """
    records = read_exit_records(log_dir, np, since, launch)
    failed = sorted((r for r in records if r.get("exit_code")), key=lambda r: r["time"])

    def victim(record: dict) -> bool:
        return record.get("signal") in TEARDOWN_SIGNALS or HOROVOD_SHUTDOWN in tail(
            log_path(log_dir, record["rank"]), 60
        )

    causes = [r for r in failed if not victim(r)]
    if causes:
        return _from_record(log_dir, causes[0])
    reported = _from_runner_output(log_dir, runner_output)
    if reported is not None:
        return reported
    if failed:
        return _from_record(log_dir, failed[0])
    return RankFailure(rank=None, how="failed before any rank reported")


def stalled_rank_failure(log_dir: Path, rank: int, reason: str) -> RankFailure:
    """The rank the heartbeat watch found frozen (the others only waited for it)."""
    how = reason.split(" ", 2)[2] if reason.startswith(f"rank {rank} ") else "stopped responding"
    path = log_path(log_dir, rank)
    return RankFailure(rank=rank, how=how, log=path if path.exists() else None, log_tail=tail(path))


def _from_record(log_dir: Path, record: dict) -> RankFailure:
    rank = int(record["rank"])
    return RankFailure(
        rank=rank,
        how=_describe(record["exit_code"], record.get("signal")),
        host=record.get("host", ""),
        log=log_path(log_dir, rank),
        log_tail=tail(log_path(log_dir, rank)),
    )


def _from_runner_output(log_dir: Path, runner_output: str) -> Optional[RankFailure]:
    for pattern in _RUNNER_PATTERNS:
        match = pattern.search(runner_output)
        if match:
            rank = int(match["rank"])
            groups = match.groupdict()
            if groups.get("signal"):
                how = _describe(128 + int(groups["signal"]), int(groups["signal"]))
            else:
                code = int(groups["code"])
                how = _describe(code, -code if code < 0 else None)
            path = log_path(log_dir, rank)
            return RankFailure(
                rank=rank,
                how=how,
                host=groups.get("host") or "",
                log=path if path.exists() else None,
                log_tail=tail(path),
            )
    return None
