"""Short real multi-rank jobs through the mpirun launcher (launchers/ tests: launcher_mpirun, heartbeat, rank_exec):
their settings, and the processes of a job found by its run dir in /proc."""

import os
from pathlib import Path

QUICK = (
    "debug=fast",
    "trainer.epoch_policy=shard",
    "trainer.batch_size=128",
    "trainer.plot=false",
    "trainer.verbose=2",
)


def processes_of(run_dir: Path):
    """Pids of processes whose command line names this run dir (ranks, wrappers, mpirun)."""
    found = []
    needle = str(run_dir).encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if needle in cmdline and state != "Z":
                found.append(int(entry.name))
    return found


def rank_pid(run_dir: Path, rank: int) -> int:
    """The training process (not its wrapper) of one rank of the job in run_dir."""
    for pid in processes_of(run_dir):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        is_trainer = cmdline[1:3] == [b"-m", b"cifar_dist"]  # not its rank_exec wrapper
        if is_trainer and f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
            return pid
    raise LookupError(f"rank {rank} of {run_dir} not running")
