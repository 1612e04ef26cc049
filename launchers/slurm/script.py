"""The batch script of one run, as text: ``#SBATCH`` lines, set-up, the ranks, the stop signal.

Pure functions of the launcher's config and the job: nothing here runs or
submits anything, so a dry run prints exactly what a launch would send.

The script starts every rank through ``rank_exec`` (per-rank logs in
``<run dir>/logs``, exit records naming the rank that failed first; rank 0's
output passes through to the job's output file) running the job's own
overrides with the in-process launcher. On USR1 (``--signal=B:USR1@N``: N s
before the time limit) it passes the signal to the ranks, which stop after
the current epoch with a checkpoint (training/preemption.py); if training is
unfinished the script then requeues its own job (``scontrol requeue``, as
submitit does on a timeout), which starts again in the same run dir and
resumes from that checkpoint.

Before the ranks start, the script takes the run dir's lock for the job's
whole life (``rundir_hold.py``): a run dir another run holds ends the job at
once, and while it runs no other run can write there.

Every ``#SBATCH`` value is quoted as Slurm's own parser reads it (double
quotes, backslash escapes), and a run dir's ``%`` is written ``%%`` in
``--output`` (Slurm's escape; ``%j`` is the job id there); a run dir Slurm
cannot take at all (a newline, or a backslash, which turns its file-name
patterns off) is refused in one line naming it.

A sweep's points are one job array (``array_script``): a dispatcher whose
``#SBATCH --array=0-(N-1)%k`` runs each point's own ``job.sbatch`` with
the task's output in that point's run dir.

The script is a file (mode 644): a ``launcher.env`` variable named as a
secret (``MY_TOKEN``, ``DB_PASSWORD``: ``redaction.is_secret_env``) is not
written into it. sbatch takes it from its own environment (``secret_env``:
the launcher submits with it there), ``--export`` names it, and Slurm keeps
it with the job (a requeue has it too), as Azure ML keeps a job's
``environment_variables`` in the workspace rather than on a command line.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Dict, List, Optional

from omegaconf import OmegaConf

from cifar_dist.common.engine_facts import engine_facts
from cifar_dist.common.redaction import is_secret_env
from cifar_dist.launchers.base import JobSpec, LaunchError
from cifar_dist.launchers.ranks import rank_env
from cifar_dist.launchers.ranks.rank_env import LOG_DIR, NONCHIEF_OVERRIDES, STOP_SIGNAL_ENV
from cifar_dist.launchers.slurm.config import RankStarter, SlurmLauncherConf
from cifar_dist.rundir.lock import LOCK_NAME

SLURM_DIR = "slurm"  # in the run dir: the batch script, the job's output files, the ids submitted
SCRIPT_NAME = "job.sbatch"
STOP_SIGNAL = "USR1"


LOCK_FD = 9  # the batch script's descriptor on the run dir's lock file, open for the job's whole life
# The job as the launcher knows it: 12, or 12_3 for task 3 of array 12.
_JOB_ID = (
    'job_id="${SLURM_ARRAY_JOB_ID:+${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID:-}}"; job_id="${job_id:-$SLURM_JOB_ID}"'
)


def check_path(path: Path, what: str = "run dir") -> None:
    """A path Slurm cannot take in a batch script, refused in one line naming it."""
    text = str(path)
    for char, why in (("\n", "a newline"), ("\\", "a backslash (it turns Slurm's file-name patterns off)")):
        if char in text:
            raise LaunchError(
                f"{what} {text!r} holds {why}, which launcher=slurm cannot pass to sbatch; "
                "choose another hydra.run.dir (hydra.sweep.dir for -m)"
            )


def slurm_file_name(path: Path) -> str:
    """A path as a literal in Slurm's file-name patterns (--output): ``%`` escaped as ``%%``."""
    return str(path).replace("%", "%%")


def sbatch_line(option: str) -> str:
    """One ``#SBATCH`` line, its option quoted for Slurm's parser when it holds spaces, quotes or ``#``."""
    if any(c.isspace() or c in "\"'\\#" for c in option):
        option = '"' + option.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"#SBATCH {option}"


def output_pattern(run_dir: Path) -> str:
    """The job's output file (batch script and rank 0), one per job id; requeues append to it."""
    return slurm_file_name(run_dir / SLURM_DIR) + "/slurm-%j.out"


def output_file(run_dir: Path, job_id: str) -> Path:
    return run_dir / SLURM_DIR / f"slurm-{job_id}.out"


def sbatch_options(conf: SlurmLauncherConf, job: JobSpec) -> List[str]:
    """The ``#SBATCH`` options, in the order Slurm users write them."""
    opts = [f"--job-name={conf.job_name}", f"--nodes={conf.nodes}", f"--ntasks-per-node={conf.tasks_per_node}"]
    if conf.cpus_per_task:
        opts.append(f"--cpus-per-task={conf.cpus_per_task}")
    if conf.gpus_per_node:
        opts.append(f"--gpus-per-node={conf.gpus_per_node}")
    if conf.gpus_per_task:
        opts.append(f"--gpus-per-task={conf.gpus_per_task}")
    if conf.gres:
        opts.append(f"--gres={conf.gres}")
    if conf.mem_gb:
        opts.append(f"--mem={int(round(conf.mem_gb * 1024))}M")
    for name in ("partition", "account", "qos", "constraint"):
        value = getattr(conf, name)
        if value:
            opts.append(f"--{name}={value}")
    opts.append(f"--time={conf.time_min}")
    if conf.exclusive:
        opts.append("--exclusive")
    opts += [
        f"--output={output_pattern(job.output_dir)}",
        "--open-mode=append",  # a requeued job goes on writing the same file
        f"--chdir={job.original_cwd}",
        f"--export={export_option(conf)}",
        "--requeue" if conf.requeue else "--no-requeue",
    ]
    if conf.signal_grace_s:
        opts.append(f"--signal=B:{STOP_SIGNAL}@{conf.signal_grace_s}")
    return opts + [str(line) for line in conf.sbatch_lines]


def secret_env(conf: SlurmLauncherConf) -> Dict[str, str]:
    """The entries of ``launcher.env`` named as secrets: passed to sbatch in its environment, never written."""
    return {name: value for name, value in conf.env.items() if is_secret_env(name)}


def export_option(conf: SlurmLauncherConf) -> str:
    """sbatch's ``--export``: ``launcher.forward_env`` (``ALL`` when empty), with the secret variables' names
    added where it lists names (``NONE``, then, becomes just those names)."""
    names = conf.forward_env or ["ALL"]
    if "ALL" in names:
        return ",".join(names)
    return ",".join(dict.fromkeys([n for n in names if n != "NONE"] + list(secret_env(conf)))) or "NONE"


def rank_environment(conf: SlurmLauncherConf, job: Optional[JobSpec] = None) -> Dict[str, str]:
    """What every rank needs (rank_env: the same as under every launcher, the job's own module
    roots on PYTHONPATH), the stop signal, then the user's env."""
    extra = {STOP_SIGNAL_ENV: STOP_SIGNAL} if conf.signal_grace_s else {}
    roots = job.carried.code_roots() if job is not None else []
    return rank_env.rank_environment(conf.env, extra, stall_shutdown_s=conf.stall_shutdown_s or 0, code_roots=roots)


def rank_command(conf: SlurmLauncherConf, job: JobSpec, python: str) -> List[str]:
    """``rank_exec`` around the job's own command (launcher=local on every rank)."""
    wrapper = [python, "-m", "cifar_dist.launchers.ranks.rank_exec", "--log-dir", str(job.output_dir / LOG_DIR)]
    wrapper += [f"--nonchief-arg={override}" for override in NONCHIEF_OVERRIDES]
    return [*wrapper, "--", *job.child_command(python=python)]


def srun_mpi(conf: SlurmLauncherConf, engine: Optional[str]) -> str:
    """``srun --mpi``: ``launcher.mpi``, where ``auto`` is ``none`` for an engine whose ranks use no MPI (jax), and
    ``pmix`` for the others (Horovod's and engine=tensorflow's ranks talk over Open MPI) and where the engine is
    not known yet (an evaluation's: the engine its run trained on)."""
    if conf.mpi != "auto":
        return conf.mpi
    facts = engine_facts(engine) if engine else None
    return "none" if facts is not None and not facts.talks_over_mpi else "pmix"


def starter_command(conf: SlurmLauncherConf, names: List[str], engine: Optional[str]) -> List[str]:
    """srun (one task per rank, the whole step killed when one fails) or mpirun inside the allocation."""
    if conf.ranks == RankStarter.srun:
        return ["srun", f"--mpi={srun_mpi(conf, engine)}", "--kill-on-bad-exit=1", "--export=ALL", *conf.srun_args]
    argv = ["mpirun"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    argv += ["--bind-to", "none", "--map-by", "slot"]
    for name in names:
        argv += ["-x", name]
    return argv + list(conf.mpirun_args)


def hold_run_dir_lines(run_dir: Path, python: str) -> List[str]:
    """Take the run dir's lock for the job's life (``rundir_hold.py``): refused, the job ends with its message."""

    hold = f'{shlex.quote(python)} -m cifar_dist.launchers.slurm.rundir_hold --fd {LOCK_FD} --job "$job_id"'
    run_dir_q = shlex.quote(str(run_dir))
    return [
        "# The run dir's lock, held by this job until it ends (a second writer there is refused).",
        f"mkdir -p {run_dir_q} && exec {LOCK_FD}<>{shlex.quote(str(run_dir / LOCK_NAME))} || exit 2",
        f"lock_waiter=; {hold} {run_dir_q}; held=$?",
        f'if [ "$held" = 3 ]; then {hold} --wait {run_dir_q} & lock_waiter=$!; elif [ "$held" != 0 ]; then exit 2; fi',
        'trap \'[ -n "$lock_waiter" ] && kill "$lock_waiter" 2>/dev/null\' EXIT',
    ]


_REQUEUE_IF_UNFINISHED = """\
# After the stop signal: requeue this job if training is not finished (it resumes from its checkpoint).
if [ "$stop_requested" = 1 ] && [ "$status" = 0 ] && {python} -m cifar_dist.common.results unfinished {run_dir}; then
    if [ "${{SLURM_RESTART_COUNT:-0}}" -lt {max_resubmits} ]; then
        echo "cifar_dist: requeueing job $SLURM_JOB_ID" \\
            "(restart $(( ${{SLURM_RESTART_COUNT:-0}} + 1 )) of {max_resubmits}): it resumes from its last checkpoint"
        scontrol requeue "$SLURM_JOB_ID"
        exit 0
    fi
    echo "cifar_dist: job $SLURM_JOB_ID stopped unfinished and launcher.max_resubmits={max_resubmits} is used up" >&2
    exit 3
fi
"""


def batch_script(conf: SlurmLauncherConf, job: JobSpec, python: Optional[str] = None) -> str:
    """The whole batch script for ``job``."""

    check_path(job.output_dir)
    check_path(job.original_cwd, "working directory")
    python = python or conf.python or sys.executable
    env = rank_environment(conf, job)
    secrets = secret_env(conf)
    engine = OmegaConf.select(job.cfg, "engine.name", default=None)  # engine=auto is resolved by now
    ranks = starter_command(conf, list(env), engine) + rank_command(conf, job, python)
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"# cifar_dist launcher=slurm, run dir {job.output_dir}",
        "# Submit again by hand: sbatch " + q(str(job.output_dir / SLURM_DIR / SCRIPT_NAME)),
        *secrets_note(secrets),
        *(sbatch_line(opt) for opt in sbatch_options(conf, job)),
        "",
        "set -u",
        *(str(line) for line in conf.setup),
        *(f"export {name}={q(value)}" for name, value in env.items() if name not in secrets),
        _JOB_ID,
        'echo "cifar_dist: Slurm job $job_id (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST:'
        ' $SLURM_NTASKS rank(s)"',
        *hold_run_dir_lines(job.output_dir, python),
        "",
        "stop_requested=0 ranks=",
        "on_stop_signal() {",
        "    stop_requested=1",
        f'    echo "cifar_dist: {STOP_SIGNAL} (time limit or preemption ahead): the ranks stop after this epoch"',
        f'    [ -n "$ranks" ] && kill -{STOP_SIGNAL} "$ranks" 2>/dev/null',
        "}",
        f"trap on_stop_signal {STOP_SIGNAL}",
        shlex.join(ranks) + " &",
        "ranks=$!",
        "while :; do",
        '    wait "$ranks"; status=$?',
        "    # wait returns early when the trap runs: keep waiting while the ranks live",
        '    if [ "$status" -gt 128 ] && kill -0 "$ranks" 2>/dev/null; then continue; fi',
        "    break",
        "done",
        "",
    ]
    if conf.signal_grace_s:
        lines.append(
            _REQUEUE_IF_UNFINISHED.format(
                python=q(python),
                run_dir=q(str(job.output_dir)),
                max_resubmits=int(conf.max_resubmits),
            )
        )
    lines.append('exit "$status"')
    return "\n".join(lines) + "\n"


def secrets_note(secrets: Dict[str, str]) -> List[str]:
    """The script's comment naming the secret variables it does not hold (none: no comment)."""
    if not secrets:
        return []
    names = ", ".join(secrets)
    return [f"# launcher.env's secrets are not in this file: export {names} before submitting it by hand"]


def array_spec(points: int, concurrent: int) -> str:
    """``--array=0-(N-1)%k``: N tasks, at most k running at once (no limit for k = 0)."""
    return f"0-{points - 1}" + (f"%{concurrent}" if concurrent else "")


def array_script(conf: SlurmLauncherConf, jobs: List[JobSpec], array_dir: Path) -> str:
    """One job array for a sweep's points: task i redirects its output into point i's run dir and
    runs that point's own ``job.sbatch`` (written by ``batch_script``; its ``#SBATCH`` lines are then
    comments: the array's own, the same allocation, apply)."""
    check_path(array_dir, "sweep dir")
    q = shlex.quote
    array_out = f"--output={slurm_file_name(array_dir / SLURM_DIR)}/array-%A_%a.out"
    options = [array_out if opt.startswith("--output=") else opt for opt in sbatch_options(conf, jobs[0])]
    table = [f"    {i}) run_dir={q(str(job.output_dir))} ;;  # point #{job.job_num}" for i, job in enumerate(jobs)]
    return "\n".join(
        [
            "#!/bin/bash",
            f"# cifar_dist launcher=slurm: sweep points {', '.join(f'#{j.job_num}' for j in jobs)} as one job array;",
            "# array task i runs the batch script in the run dir of row i below.",
            *(sbatch_line(opt) for opt in options),
            sbatch_line(f"--array={array_spec(len(jobs), conf.concurrent)}"),
            "",
            "set -u",
            'case "$SLURM_ARRAY_TASK_ID" in',
            *table,
            '    *) echo "cifar_dist: no sweep point for array task $SLURM_ARRAY_TASK_ID" >&2; exit 2 ;;',
            "esac",
            'mkdir -p "$run_dir/slurm"',
            'exec >>"$run_dir/slurm/slurm-${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}.out" 2>&1',
            f'exec /bin/bash "$run_dir/{SLURM_DIR}/{SCRIPT_NAME}"',
            "",
        ]
    )
