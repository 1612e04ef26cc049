"""What the mpirun and Gloo launchers share: N ranks of the same job, one run dir.

A subclass only says how to spell the runner's command line
(``runner_command``) and how the runner reaches other hosts. Everything else
is here: pre-flight checks, the per-rank wrapper (``rank_exec``: per-rank log
files, exit records), the environment every rank needs, streaming and
stopping the job (``runner_supervisor``), and naming the rank that failed
(``rank_failure``). The flow of ``launch`` is ``start(job).wait()``; a sweep's
points go one after another through ``launch_all`` (mpirun's
``launcher.concurrent=k`` runs k of them at once: ``concurrent_points.py``).
"""

from __future__ import annotations

import logging
import shlex
import shutil
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from cifar_dist.common.engine_facts import ENGINES, engine_facts
from cifar_dist.common.environment import snapshot
from cifar_dist.common.results import read_results
from cifar_dist.config.override_syntax import rerun_hint, shell_command
from cifar_dist.launchers.base import RANK_GUARD_ENV, JobSpec, Launcher, LaunchError, LaunchResult
from cifar_dist.launchers.ranks import hosts as hostlib
from cifar_dist.launchers.ranks.heartbeat import HeartbeatWatch, stall_timeout_problems
from cifar_dist.launchers.ranks.hosts import Host, check_reachable, check_slots, is_local, resolve_hosts
from cifar_dist.launchers.ranks.rank_env import LEGACY_KERAS_ENV, LOG_DIR, NONCHIEF_OVERRIDES, rank_environment
from cifar_dist.launchers.ranks.rank_failure import first_failure, read_exit_records, stalled_rank_failure
from cifar_dist.launchers.ranks.runner_supervisor import Supervisor
from cifar_dist.rundir.ranks_lock import current_launch

log = logging.getLogger(__name__)

BIND_TO = ("auto", "core", "none")  # launcher.bind_to's values
RUNNER_LOG = "launcher.log"  # the runner's own output, in LOG_DIR

# Variables every rank needs, forwarded by name (never by value on the command line).
ALWAYS_FORWARDED = (LEGACY_KERAS_ENV, RANK_GUARD_ENV, "PYTHONUNBUFFERED")
FORWARDED_IF_SET = (
    "PYTHONPATH",
    "TF_CPP_MIN_LOG_LEVEL",
    "HYDRA_FULL_ERROR",
    "TF_ENABLE_ONEDNN_OPTS",
    "CIFAR_DIST_TF_LOGS",
    # tracking=mlflow: rank 0 logs to the same tracker as a local run would
    "MLFLOW_TRACKING_URI",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_TRACKING_INSECURE_TLS",
)


@dataclass
class MultiRankConf:
    """Fields every multi-rank launcher takes (see docs/launchers.md)."""

    np: int = 2  # ranks in total
    hosts: List[str] = field(default_factory=list)  # ["h1:4", "h2:4"]; empty: this machine
    hostfile: Optional[str] = None  # OpenMPI hostfile ("node slots=4" lines)
    # auto: bind each rank to cores/np cores of this machine when np <= cores
    # (TensorFlow then sizes its thread pools to them); core: bind always; none.
    bind_to: str = "auto"
    oversubscribe: bool = False  # allow more ranks than slots (slow; for tests)
    env: Dict[str, str] = field(default_factory=dict)  # set for, and forwarded to, every rank
    forward_env: List[str] = field(default_factory=list)  # names passed on from this environment
    extra_args: List[str] = field(default_factory=list)  # appended to the runner's own options
    python: Optional[str] = None  # interpreter on the ranks (default: this one, same path on every host)
    dry_run: bool = False  # print the command and exit
    # Horovod's stall check: a rank missing from a collective this long ends
    # the job (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS); so does a rank whose
    # heartbeat stops this long (frozen or SIGSTOPped: launchers/ranks/heartbeat.py).
    # 0 keeps Horovod's default and turns the heartbeat watch off.
    stall_shutdown_s: int = 120
    # How often Horovod's background thread coordinates the ranks
    # (HOROVOD_CYCLE_TIME, ms); 0 keeps Horovod's default. Each cycle is a
    # small collective; with one core per rank, fewer cycles leave more of
    # the core to TensorFlow (docs/scaling.md).
    cycle_time_ms: float = 5.0
    # After a rank has failed, stop the job ourselves if the runner has not
    # within this many seconds.
    rank_failure_grace_s: float = 15.0
    kill_grace_s: float = 10.0  # after asking the runner to stop: SIGKILL the tree
    host_check_timeout_s: float = 10.0  # pre-flight "does every host answer"
    # Sweeps: run this many points at once, np ranks each, inside one mpirun
    # whose world is split into groups (launchers/concurrent_points.py); 1: one after another.
    concurrent: int = 1


class RunningJob:
    """One runner process for one job, started; ``wait()`` supervises it to the end."""

    def __init__(self, launcher: MultiRankLauncher, job: JobSpec, argv: List[str], env: Dict[str, str]):
        self.launcher = launcher
        self.job = job
        self.output_dir = job.output_dir
        self.argv = argv
        self.env = env

    def wait(self) -> LaunchResult:
        launcher, job = self.launcher, self.job
        log_dir = job.output_dir / LOG_DIR
        log_dir.mkdir(parents=True, exist_ok=True)
        started = time.time()
        launch = current_launch(job.output_dir)  # the ranks' exit records of this launch carry it

        # A rank that is not running at all (SIGSTOP, frozen host) blocks
        # Horovod's own stall check too: watch the ranks' heartbeats.
        heartbeats = HeartbeatWatch(log_dir, launcher.conf.np, launcher.conf.stall_shutdown_s)

        def rank_failed_long_ago() -> str:
            for record in read_exit_records(log_dir, launcher.conf.np, started, launch):
                if record.get("exit_code") and time.time() - record["time"] > launcher.conf.rank_failure_grace_s:
                    return f"rank {record['rank']} failed {launcher.conf.rank_failure_grace_s:g}s ago"
            return heartbeats()

        log.info("launching %d ranks: %s", launcher.conf.np, shlex.join(self.argv))
        outcome = Supervisor(
            self.argv,
            cwd=job.original_cwd,
            env=self.env,
            log_file=log_dir / RUNNER_LOG,
            kill_grace_s=launcher.conf.kill_grace_s,
            watch=rank_failed_long_ago,
            line_filter=launcher.line_filter(),
        ).run()

        if outcome.interrupted:
            message = f"interrupted: all ranks stopped; {rerun_hint(job.output_dir)} to resume from the last checkpoint"
            if job.multirun:
                log.error("%s", message)
                raise KeyboardInterrupt  # end the whole sweep, as Ctrl-C does without a launcher
            return LaunchResult(exit_code=130, message=message)
        if outcome.returncode == 0 and not outcome.stopped_reason:
            return LaunchResult(exit_code=0, metrics=read_results(job.output_dir))
        failure = first_failure(log_dir, launcher.conf.np, started, outcome.tail, launch)
        if heartbeats.stalled_rank is not None:
            failure = stalled_rank_failure(log_dir, heartbeats.stalled_rank, outcome.stopped_reason)
        code = outcome.returncode if outcome.returncode and outcome.returncode > 0 else 1
        return LaunchResult(exit_code=code, message=failure.message(job.output_dir))


class MultiRankLauncher(Launcher):
    """Runs a job on ``np`` ranks under some runner (mpirun: any engine that runs several processes; horovodrun:
    Horovod's)."""

    runner_name = "runner"

    conf_class = MultiRankConf  # each subclass: its own dataclass (MpirunLauncherConf, GlooLauncherConf)
    splits_into_groups = False  # launcher.concurrent > 1: k points in one run of the runner (mpirun's MPMD form)

    def __init__(self, **fields):
        # The config node as Hydra's instantiate passes it, back in its dataclass: one field list.
        self.conf = self.conf_class(**fields)
        self.conf.env = {str(k): str(v) for k, v in (self.conf.env or {}).items()}
        self.conf.python = self.conf.python or sys.executable
        # Config problems surface as LaunchError from launch(), not from the
        # constructor (Hydra's instantiate would wrap them in a traceback).
        self._hosts: Optional[List[Host]] = None
        self._coordinator: Optional[str] = None

    @property
    def coordinator(self) -> str:
        """``host:port`` where the processes of an engine that needs a coordinator meet (``facts.coordinator_env``:
        engine=jax): the first host (rank 0 runs there; loopback when every rank is on this machine, its network
        name when others must reach it), on a port free on this machine when it is the first host (a guess
        elsewhere, as JAX's own Open MPI detection makes)."""
        if self._coordinator is None:
            first = self.hosts[0].name if self.hosts else "localhost"
            host = "127.0.0.1" if self.local_only else (socket.gethostname() if is_local(first) else first)
            with socket.socket() as probe:
                probe.bind(("", 0))
                self._coordinator = f"{host}:{probe.getsockname()[1]}"
        return self._coordinator

    @property
    def hosts(self) -> List[Host]:
        if self._hosts is None:
            bad = self._bind_to_problems()
            if bad:
                raise LaunchError(bad[0])
            self._hosts = resolve_hosts(self.conf.hosts, self.conf.hostfile)
        return self._hosts

    def _bind_to_problems(self) -> List[str]:
        if self.conf.bind_to in BIND_TO:
            return []
        return [f"launcher.bind_to={self.conf.bind_to!r} must be {', '.join(BIND_TO[:-1])} or {BIND_TO[-1]}"]

    # ---- what subclasses provide -------------------------------------------------
    def runner_command(self, rank_command: List[str], forwarded: List[str]) -> List[str]:
        raise NotImplementedError

    def remote_shell(self) -> List[str]:
        """Command prefix that runs a command on a host (host and command are appended)."""
        return ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(self.conf.host_check_timeout_s))}"]

    def runner_executable(self) -> str:
        raise NotImplementedError

    def missing_runner_hint(self) -> str:
        raise NotImplementedError

    def binds_itself(self) -> bool:
        """True when the runner binds ranks to cores (else rank_exec does it)."""
        return False

    def line_filter(self):
        return None

    # ---- shared logic --------------------------------------------------------------
    @property
    def local_only(self) -> bool:
        return all(is_local(h.name) for h in self.hosts)

    def cores_per_rank(self) -> int:
        """Cores each rank is bound to (0: no binding)."""
        if self.conf.bind_to == "none":
            return 0
        local_ranks = (
            self.conf.np
            if not self.hosts
            else max((h.slots or 1 for h in self.hosts if is_local(h.name)), default=self.conf.np)
        )
        cores = hostlib.local_cores()
        if self.conf.bind_to == "auto" and (not self.local_only or local_ranks > cores):
            return 0
        return max(1, cores // max(1, min(local_ranks, self.conf.np)))

    def rank_command(self, job: JobSpec, group: Optional[int] = None, group_size: int = 0) -> List[str]:
        """The per-rank wrapper around the job; in a concurrent sweep, ``group`` is its
        MPI group (of ``group_size`` ranks) inside the one mpirun."""
        wrapper = [
            self.conf.python,
            "-m",
            "cifar_dist.launchers.ranks.rank_exec",
            "--log-dir",
            str(job.output_dir / LOG_DIR),
        ]
        launch = current_launch(job.output_dir)  # written by the run dir's guard (cifar_dist/rundir/ranks_lock.py)
        if launch:
            wrapper += ["--launch", launch]
        if group is not None:
            wrapper += ["--mpi-group", str(group), "--group-size", str(group_size or self.conf.np)]
        if self.cores_per_rank() and not self.binds_itself():
            wrapper.append("--bind-cores")
        for override in NONCHIEF_OVERRIDES:
            wrapper.append(f"--nonchief-arg={override}")
        return [*wrapper, "--", *job.child_command(python=self.conf.python)]

    def rank_environment(self, *jobs: JobSpec) -> Dict[str, str]:
        """Variables set for the ranks (on top of this process's environment); the user modules
        of ``jobs`` first on PYTHONPATH (launchers/user_sources.py)."""
        extra = {"HOROVOD_CYCLE_TIME": f"{self.conf.cycle_time_ms:g}"} if self.conf.cycle_time_ms > 0 else {}
        for facts in ENGINES.values():  # where the processes of an engine meet under Open MPI 5 (engine=jax's)
            if facts.coordinator_env:
                extra[facts.coordinator_env] = self.coordinator
        roots = [root for job in jobs for root in job.carried.code_roots()]
        return rank_environment(self.conf.env, extra, stall_shutdown_s=self.conf.stall_shutdown_s, code_roots=roots)

    def forwarded_names(self, env: Dict[str, str]) -> List[str]:
        names = list(ALWAYS_FORWARDED) + [k for k in self.rank_environment() if k not in ALWAYS_FORWARDED]
        names += [n for n in FORWARDED_IF_SET if n in env]
        for name in self.conf.forward_env:
            if name in env:
                names.append(name)
            else:
                log.warning("launcher.forward_env: %s is not set here; not forwarded", name)
        return list(dict.fromkeys(names))

    def command(self, job: JobSpec, env: Optional[Dict[str, str]] = None) -> List[str]:
        env = env if env is not None else self.environment(job)
        return self.runner_command(self.rank_command(job), self.forwarded_names(env))

    def environment(self, *jobs: JobSpec) -> Dict[str, str]:
        """This process's environment plus the ranks' own (``rank_environment``) for ``jobs``."""
        env = snapshot()
        env.update(self.rank_environment(*jobs))
        return env

    def preflight(self) -> None:
        """Everything that can be checked before a rank starts; one-line LaunchError each."""
        check_slots(self.conf.np, self.hosts, self.conf.oversubscribe)
        if shutil.which(self.runner_executable()) is None:
            raise LaunchError(f"{self.runner_executable()} not found on PATH; {self.missing_runner_hint()}")
        check_reachable(self.hosts, self.remote_shell(), self.conf.host_check_timeout_s)

    def start(self, job: JobSpec) -> RunningJob:
        self.preflight()
        env = self.environment(job)
        return RunningJob(self, job, self.command(job, env), env)

    def config_problems(self) -> List[str]:
        """The stall timeout; launcher.np, bind_to, the hosts (or hostfile) and their slots, as ``preflight``
        checks them at launch; launcher.concurrent: >= 1, and > 1 only where the runner's world can be split into
        groups (mpirun)."""
        found = stall_timeout_problems(self.conf.stall_shutdown_s)
        if self.conf.np < 1:
            found.append(f"launcher.np={self.conf.np} must be >= 1")
        found += self._bind_to_problems()
        try:
            hosts = resolve_hosts(self.conf.hosts, self.conf.hostfile)
            if self.conf.np >= 1:
                check_slots(self.conf.np, hosts, self.conf.oversubscribe)
        except LaunchError as exc:
            found.append(str(exc))
        if self.conf.concurrent < 1:
            found.append(f"launcher.concurrent={self.conf.concurrent} must be >= 1 (points run at once)")
        elif self.conf.concurrent > 1 and not self.splits_into_groups:
            found.append(
                f"launcher.concurrent needs launcher=mpirun: {self.runner_name} starts one Horovod world that "
                "cannot be split into groups; use launcher=mpirun or launcher.concurrent=1"
            )
        return found

    def processes(self) -> int:
        return self.conf.np

    def engine_problems(self, engine: str) -> List[str]:
        """Concurrent points are Horovod groups of one mpirun: engine=jax joins the whole mpirun, and
        engine=tensorflow is one process of it (``splits_into_mpi_groups``: horovod only)."""
        facts = engine_facts(engine)
        if facts is not None and not facts.splits_into_mpi_groups and self.conf.concurrent > 1:
            return [
                f"launcher.concurrent={self.conf.concurrent} splits one mpirun into Horovod groups, but "
                f"engine={engine} joins the whole mpirun; use launcher.concurrent=1 with engine={engine}"
            ]
        return super().engine_problems(engine)

    def launch_all(self, jobs: Sequence[JobSpec]) -> List[LaunchResult]:
        """A sweep's points one after another (mpirun overrides this for launcher.concurrent > 1)."""
        problems = self.config_problems()
        if problems:
            raise LaunchError("; ".join(problems))
        return super().launch_all(jobs)

    def launch(self, job: JobSpec) -> LaunchResult:
        if self.conf.dry_run:
            check_slots(self.conf.np, self.hosts, self.conf.oversubscribe)
            argv = self.command(job)
            print(f"Dry run: the {self.runner_executable()} command for {job.output_dir} (nothing started):")
            print(shell_command(*argv), flush=True)
            return LaunchResult(exit_code=0, message="dry run: nothing started")
        return self.start(job).wait()
