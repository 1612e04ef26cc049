"""A real single-node Slurm on localhost, for the Slurm launcher's tests.

Debian's ``slurmctld``, ``slurmd``, ``slurm-client`` and ``munge``, started
without systemd in a temporary directory with free ports, the settings that
let it run unprivileged of cgroups (``proctrack/linuxproc``, ``task/none``),
without accounting (finished jobs are seen through ``scontrol``/``squeue``
while MinJobAge keeps them), and with fast scheduling so that a requeued job
comes back in seconds. Clients find it through ``SLURM_CONF``. Its TmpFS (where
PMIx makes each step's ``spmix_appdir_<uid>_<job>.<step>``) is its own too: job
ids start at 1 in every cluster, and two clusters sharing /tmp (two pytest
sessions) refused each other's steps ("File exists").
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

DAEMONS = ("munged", "slurmctld", "slurmd")
MUNGE_KEY = Path("/etc/munge/munge.key")


def missing_packages() -> List[str]:
    """What is not installed (empty: a cluster can be started)."""
    missing = [
        name
        for name in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")
        if shutil.which(name) is None and not Path("/usr/sbin", name).exists()
    ]
    if not MUNGE_KEY.is_file():
        missing.append(str(MUNGE_KEY))
    return missing


def free_ports(count: int) -> List[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def slurm_conf(root: Path, ctld_port: int, d_port: int, cpus: int, mem_mb: int) -> str:
    return f"""\
ClusterName=cifartest
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket,cred_expire=5
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
TmpFS={root}/tmp
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.txt
SchedulerParameters=bf_interval=1,sched_interval=1
MinJobAge=600
KillWait=5
ReturnToService=2
MailProg=/bin/true
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


@dataclass
class SlurmCluster:
    root: Path
    env: Dict[str, str]
    pids: Dict[str, int] = field(default_factory=dict)

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, check=check, timeout=timeout)

    def node_state(self) -> str:
        out = self.run("sinfo", "-h", "-N", "-o", "%T", check=False)
        return out.stdout.strip()

    def wait_idle(self, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.node_state().rstrip("*") == "idle":
                return
            time.sleep(0.5)
        raise RuntimeError(f"slurm node not idle after {timeout}s: {self.node_state()!r}\n{self.log_tail()}")

    def job_ids(self) -> List[str]:
        out = self.run("squeue", "-h", "-o", "%i", check=False)
        return out.stdout.split()

    def cancel_all(self) -> None:
        """Cancel every job and wait (up to ~KillWait) until none still runs, so the next test has the node."""
        ids = self.job_ids()
        if ids:
            self.run("scancel", *ids, check=False)
        deadline = time.time() + 30
        while time.time() < deadline:
            out = self.run("squeue", "-h", "-t", "PD,R,CG,S,RQ,RS,RF,SE", "-o", "%i", check=False)
            if not out.stdout.split():
                break
            time.sleep(0.5)
        self.wait_idle(30)

    def log_tail(self, lines: int = 20) -> str:
        parts = []
        for name in ("slurmctld.log", "slurmd.log"):
            path = self.root / name
            if path.is_file():
                parts.append(f"--- {name} ---\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel jobs, then end slurmd, slurmctld and munged by pid, in that order."""
        try:
            if "slurmctld" in self.pids:
                self.cancel_all()
        except Exception:  # noqa: BLE001 - teardown goes on whatever happened
            pass
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.pids.pop(name, None)
            if pid is not None:
                _stop_pid(pid)


def _stop_pid(pid: int, grace: float = 10) -> None:
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return
    deadline = time.time() + grace
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def _read_pid(path: Path, timeout: float = 15) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            text = path.read_text().strip()
            if text:
                return int(text)
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"no pid in {path} after {timeout}s")


def start_cluster(root: Path, cpus: Optional[int] = None) -> SlurmCluster:
    """Start munged, slurmctld and slurmd under ``root``; return once the node is idle."""
    root = Path(root)
    for sub in ("munge", "state", "spool", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "munge", 0o700)
    ctld_port, d_port = free_ports(2)
    cpus = cpus or os.cpu_count() or 2
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, ctld_port, d_port, cpus, mem_mb=4096))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = SlurmCluster(root=root, env=env)
    try:
        subprocess.run(
            [
                "munged",
                "--force",
                f"--socket={root}/munge/munge.socket",
                f"--key-file={MUNGE_KEY}",
                f"--pid-file={root}/munge/munged.pid",
                f"--log-file={root}/munge/munged.log",
                f"--seed-file={root}/munge/munged.seed",
            ],
            env=env,
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        )
        cluster.pids["munged"] = _read_pid(root / "munge" / "munged.pid")
        subprocess.run(["slurmctld", "-i"], env=env, check=True, capture_output=True, text=True, timeout=30)
        cluster.pids["slurmctld"] = _read_pid(root / "slurmctld.pid")
        subprocess.run(["slurmd", "-N", "localhost"], env=env, check=True, capture_output=True, text=True, timeout=30)
        cluster.pids["slurmd"] = _read_pid(root / "slurmd.pid")
        cluster.wait_idle()
    except BaseException:
        cluster.stop()
        raise
    return cluster
