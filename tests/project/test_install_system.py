"""scripts/install_system.sh, the apt steps of scripts/install.sh, with a fake apt-get (and a fake id and sudo) first
on PATH. Issue 57 item 18: two installs at once, the second's apt-get found apt's lock held, and install.sh said
"Slurm not installed (needs root)" as root; the Slurm tests were then skipped with nothing else said."""

from __future__ import annotations

import os
import subprocess

import pytest

from helpers.paths import REPO

LOCK_HELD = "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)"

FAKE_APT_GET = f"""#!/bin/bash
echo "$*" >> "$FAKE_APT_LOG"
if [ -n "$FAKE_APT_FAIL" ] && [[ " $* " == *" install "* ]]; then
    echo "Reading package lists..."
    echo "{LOCK_HELD}" >&2
    echo "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process using it?" >&2
    exit 100
fi
"""


@pytest.fixture
def fake_bin(tmp_path):
    """A folder for PATH with apt-get (records its arguments; fails installing when FAKE_APT_FAIL is set), id (the
    user FAKE_UID) and sudo (never allowed)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    scripts = {
        "apt-get": FAKE_APT_GET,
        "id": '#!/bin/bash\n[ "$1" = -u ] && { echo "$FAKE_UID"; exit 0; }\nexec /usr/bin/id "$@"\n',
        "sudo": "#!/bin/bash\nexit 1\n",
    }
    for name, text in scripts.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return folder


def install_step(fake_bin, step: str, uid: int = 0, fail: bool = False, **extra: str) -> subprocess.CompletedProcess:
    """``step`` (bash) after sourcing install_system.sh, Slurm taken for missing, with the fakes first on PATH."""
    env = dict(
        os.environ,
        **extra,
        PATH=f"{fake_bin}{os.pathsep}{os.environ['PATH']}",
        FAKE_APT_LOG=str(fake_bin / "apt.log"),
        FAKE_UID=str(uid),
        FAKE_APT_FAIL="1" if fail else "",
    )
    script = f"set -euo pipefail; source scripts/install_system.sh; slurm_missing() {{ return 0; }}; {step}"
    return subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def test_apt_get_waits_for_the_lock_and_a_failure_as_root_says_what_apt_get_said(fake_bin):
    done = install_step(fake_bin, "install_slurm", fail=True)
    assert done.returncode == 0, done.stderr  # Slurm is optional: the install goes on
    calls = (fake_bin / "apt.log").read_text().splitlines()
    assert [c.split()[:3] for c in calls] == [["-o", "DPkg::Lock::Timeout=600", "update"]] + [
        ["-o", "DPkg::Lock::Timeout=600", "install"]
    ]
    warning = [line for line in done.stderr.splitlines() if line.startswith("install.sh: warning:")]
    assert warning == [
        "install.sh: warning: Slurm not installed: apt-get failed (E: Unable to acquire the dpkg frontend lock "
        "(/var/lib/dpkg/lock-frontend), is another process using it?); the Slurm launcher's real-cluster tests will "
        "be skipped: run make install again once apt-get can install it"
    ]
    assert LOCK_HELD in done.stderr  # apt-get's own lines are shown too
    assert "needs root" not in done.stdout + done.stderr


def test_without_root_it_says_so_and_runs_no_apt_get(fake_bin):
    done = install_step(fake_bin, "install_slurm", uid=1000)
    assert done.returncode == 0 and not (fake_bin / "apt.log").exists()
    assert "Slurm not installed (needs root, or passwordless sudo)" in done.stdout


def test_the_wait_is_settable_and_a_working_apt_get_installs(fake_bin):
    done = install_step(fake_bin, "install_slurm", CIFAR_DIST_APT_LOCK_WAIT="5")
    assert done.returncode == 0 and "waiting up to 5 s for another apt or dpkg to finish" in done.stdout
    assert "not installed" not in done.stdout + done.stderr
    calls = (fake_bin / "apt.log").read_text().splitlines()
    assert calls[1].startswith("-o DPkg::Lock::Timeout=5 install -y -q --no-install-recommends slurmctld")


def test_openmpi_that_apt_get_cannot_install_stops_the_install_naming_apt_gets_error(fake_bin):
    done = install_step(fake_bin, "command() { return 1; }; install_openmpi current", fail=True)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "install.sh: OpenMPI is missing and apt-get could not install it (E: Unable to acquire the dpkg frontend "
        "lock (/var/lib/dpkg/lock-frontend), is another process using it?); fix that and re-run"
    )
