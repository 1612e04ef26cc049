"""Run the job on N Horovod ranks with Horovod's Gloo, for machines without MPI (engine=horovod only).

``launcher=gloo`` is the mpirun launcher's twin built on ``horovodrun --gloo``
(Horovod's own runner: it starts the ranks itself, locally or over ssh, and
Horovod's collectives then use Gloo over TCP). Same keys, same run dir,
per-rank logs and failure report; differences: remote hosts are reached with
plain ssh (``extra_args: [--ssh-port, "2222"]`` etc. go to horovodrun),
horovodrun passes this whole environment to the ranks, and core binding is
done by the per-rank wrapper since horovodrun does not bind.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List

from cifar_dist.common.engine_facts import engine_facts
from cifar_dist.config.options import config_option
from cifar_dist.launchers.multirank import MultiRankConf, MultiRankLauncher

# What horovodrun and the ranks need from this environment besides the
# variables a rank is always given (MultiRankLauncher.forwarded_names).
_BASIC_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TMPDIR",
    "VIRTUAL_ENV",
    "LD_LIBRARY_PATH",
    "PYTHONHOME",
)

_RANK_PREFIX = re.compile(rb"^\[\d+\]<std(?:out|err)>:")


@config_option("launcher", "gloo")
@dataclass
class GlooLauncherConf(MultiRankConf):
    """``launcher=gloo``: run the job on launcher.np Horovod ranks with Gloo (horovodrun
    --gloo), for machines without MPI. Same keys as launcher=mpirun except
    rsh_agent/mpirun; remote hosts are reached over ssh::

        python -m cifar_dist launcher=gloo launcher.np=2
    """

    _target_: str = "cifar_dist.launchers.gloo.GlooLauncher"
    horovodrun: str = "horovodrun"  # the executable (a name on PATH or a path)
    # Seconds horovodrun waits for every host to start (its --start-timeout).
    start_timeout_s: int = 30


class GlooLauncher(MultiRankLauncher):
    runner_name = "horovodrun"

    conf_class = GlooLauncherConf

    def runner_executable(self) -> str:
        return self.conf.horovodrun

    def engine_problems(self, engine: str) -> List[str]:
        """horovodrun --gloo gives its ranks Horovod's rendezvous only, which JAX processes cannot join (they
        find their peers in Open MPI's or Slurm's environment)."""
        facts = engine_facts(engine)
        if facts is not None and facts.peers_from_mpi_or_slurm:
            return [
                f"launcher=gloo starts Horovod's Gloo ranks, which engine={engine} processes cannot join; use "
                "launcher=mpirun (JAX's own collectives run over Gloo on CPU) or engine=horovod"
            ]
        return super().engine_problems(engine)

    def missing_runner_hint(self) -> str:
        return (
            "install Horovod with Gloo into this environment (HOROVOD_WITH_GLOO=1 pip install horovod) "
            "or set launcher.horovodrun=/path/to/horovodrun"
        )

    def line_filter(self):
        # horovodrun tags every line "[rank]<stdout>:"; only rank 0 reaches the console anyway.
        return lambda line: _RANK_PREFIX.sub(b"", line)

    def environment(self, *jobs) -> Dict[str, str]:
        """Only what the ranks need, not this shell's whole environment.

        horovodrun starts every rank as ``env NAME=VALUE ... <command>``, so
        each variable it is given shows in the ranks' process arguments
        (``ps``). A storage key or token exported in this shell must not get
        there: horovodrun gets the variables mpirun would forward
        (``launcher.env``, ``launcher.forward_env``, the project's own) plus
        the basics a process needs.
        """
        full = super().environment(*jobs)
        keep = set(self.forwarded_names(full)) | set(_BASIC_ENV)
        return {k: v for k, v in full.items() if k in keep or k.startswith("LC_")}

    def runner_command(self, rank_command: List[str], forwarded: List[str]) -> List[str]:
        # horovodrun exports its environment (see environment()) to the ranks,
        # so `forwarded` needs no flags here.
        argv = [
            self.conf.horovodrun,
            "--gloo",
            "-np",
            str(self.conf.np),
            "--start-timeout",
            str(self.conf.start_timeout_s),
        ]
        # horovodrun wants name:slots for every host (and a hostfile with
        # slots= on every line), so a hostfile is passed on as -H too.
        hosts = ",".join(f"{h.name}:{h.slots or 1}" for h in self.hosts) if self.hosts else f"localhost:{self.conf.np}"
        argv += ["-H", hosts]
        return argv + self.conf.extra_args + rank_command
