"""Whatever kills the launcher of a multi-rank job, its ranks stop within seconds.

A launcher killed with SIGKILL (no chance to clean up) or SIGHUP (a closed
terminal, a dropped ssh session) used to leave mpirun (or horovodrun) and
every rank training and writing checkpoints into the run dir, racing the
re-run the docs recommend. Now the runner gets SIGTERM from the kernel when
the launcher dies (PR_SET_PDEATHSIG), SIGHUP stops the job like Ctrl-C, and
each rank's wrapper stops its rank when its own parent goes
(launchers/ranks/rank_exec.py). On another host the same holds: OpenMPI's orted
and horovodrun's ssh sessions are the wrapper's parents there.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.cli import cli_env, start_cli, wait_for
from helpers.mpirun_jobs import QUICK, processes_of
from helpers.paths import REPO


def files_state(run_dir: Path) -> dict:
    """Every file under the run dir with its size and modification time."""
    state = {}
    for path in run_dir.rglob("*"):
        try:
            st = path.stat()
        except OSError:
            continue
        if path.is_file():
            state[str(path.relative_to(run_dir))] = (st.st_size, st.st_mtime_ns)
    return state


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


RUNNERS = {"mpirun": shutil.which("mpirun"), "gloo": shutil.which("horovodrun", path=str(Path(sys.executable).parent))}


@pytest.mark.mpi
@pytest.mark.horovod
@pytest.mark.timeout(900)
# Each launcher and each signal once in the default suite; the other two pairings (about 9 s each) with -m slow.
@pytest.mark.parametrize(
    "launcher, sig",
    [
        pytest.param("mpirun", signal.SIGHUP, id="mpirun-SIGHUP"),
        pytest.param("gloo", signal.SIGKILL, id="gloo-SIGKILL"),
        pytest.param("mpirun", signal.SIGKILL, id="mpirun-SIGKILL", marks=pytest.mark.slow),
        pytest.param("gloo", signal.SIGHUP, id="gloo-SIGHUP", marks=pytest.mark.slow),
    ],
)
def test_killing_the_launcher_leaves_no_rank_and_no_writer_behind(tmp_path, launcher, sig):
    if RUNNERS[launcher] is None:
        pytest.skip(f"{launcher} not installed")
    run_dir = tmp_path / "run"
    runner = [f"launcher.horovodrun={RUNNERS['gloo']}"] if launcher == "gloo" else []
    proc = start_cli(
        f"launcher={launcher}",
        "launcher.np=2",
        *runner,
        *QUICK,
        "trainer.epochs=40",
        "trainer.verbose=0",
        "launcher.kill_grace_s=5",
        f"hydra.run.dir={run_dir}",
    )
    try:
        # Both ranks running (their heartbeats beat): left alone they would train 40 epochs into run_dir.
        beats = [run_dir / "logs" / f"rank.{rank}.alive" for rank in (0, 1)]
        wait_for(lambda: all(b.exists() for b in beats), 300, proc, "both ranks to start")
        assert len(processes_of(run_dir)) >= 3, "expected the runner and two ranks"
        os.kill(proc.pid, sig)
        proc.wait(timeout=60)
        stopped_by = time.time() + 45  # PDEATHSIG is immediate; SIGHUP: kill_grace_s, then SIGKILL of the tree
        wait_for(lambda: not processes_of(run_dir) or time.time() > stopped_by, 60, what="the ranks to stop")
        left = processes_of(run_dir)
        assert not left, f"still running after the launcher died: {left}"
        before = files_state(run_dir)
        time.sleep(5)
        assert files_state(run_dir) == before, "something still writes into the run dir"
    finally:
        proc.kill()
        for pid in processes_of(run_dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_rank_wrapper_whose_parent_is_killed_stops_its_rank(tmp_path):
    """rank_exec under a parent that dies by SIGKILL (a runner, an orted, an ssh session): its rank goes too."""
    pid_file = tmp_path / "rank.pid"
    rank_script = tmp_path / "rank.py"
    rank_script.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    parent_script = tmp_path / "runner.py"
    parent_script.write_text(
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-m', 'cifar_dist.launchers.ranks.rank_exec', "
        f"'--log-dir', {str(tmp_path)!r}, "
        f"'--', sys.executable, {str(rank_script)!r}])\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, str(parent_script)],
        cwd=REPO,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 60, parent, "the rank to start")
        rank = int(pid_file.read_text())
        assert alive(rank)
        parent.kill()
        parent.wait()
        wait_for(lambda: not alive(rank), 15, what="the rank to stop after its wrapper's parent died")
        record = tmp_path / "rank.0.exit.json"
        wait_for(record.exists, 15, what="the wrapper's exit record")
        assert '"signal_name": "SIGTERM"' in record.read_text()
    finally:
        parent.kill()
        if pid_file.exists() and pid_file.read_text().strip() and alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)  # only when the test failed: leave nothing behind
