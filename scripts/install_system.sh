# The system packages of scripts/install.sh, which sources this file: OpenMPI and Slurm from apt, as root (or with
# passwordless sudo). apt-get waits for another apt or dpkg (a second install, unattended-upgrades) to let go of its
# locks, up to CIFAR_DIST_APT_LOCK_WAIT seconds (600); when it still fails, the line says what apt-get said, not
# "needs root". tests/project/test_install_system.py runs these functions with a fake apt-get.

APT_LOCK_WAIT=${CIFAR_DIST_APT_LOCK_WAIT:-600}
APT_FAILURE=""  # why the last apt_install failed: apt-get's last error line

say() { printf '[install] %s\n' "$*"; }
warn() { printf 'install.sh: warning: %s\n' "$*" >&2; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

as_root() {  # run "$@" as root (directly, or with passwordless sudo); 1 when neither is possible
    if [ "$(id -u)" = 0 ]; then
        env DEBIAN_FRONTEND=noninteractive "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo -n env DEBIAN_FRONTEND=noninteractive "$@"
    else
        return 1
    fi
}

apt_install() {  # apt_install WHAT PACKAGE...: 0 installed; 1 apt-get failed (APT_FAILURE says why); 2 no root
    local what=$1 errors status=0
    shift
    as_root true || return 2
    say "installing $what (apt-get: $*; waiting up to ${APT_LOCK_WAIT} s for another apt or dpkg to finish)"
    errors=$(mktemp)
    { as_root apt-get -o DPkg::Lock::Timeout="$APT_LOCK_WAIT" update -q \
        && as_root apt-get -o DPkg::Lock::Timeout="$APT_LOCK_WAIT" install -y -q --no-install-recommends "$@"; } \
        2>"$errors" || status=$?
    cat "$errors" >&2
    if [ "$status" != 0 ]; then
        APT_FAILURE=$(grep -E '^E: ' "$errors" | tail -n 1 || true)
        APT_FAILURE=${APT_FAILURE:-apt-get exited with status $status}
    fi
    rm -f "$errors"
    [ "$status" = 0 ] || return 1
}

install_openmpi() {  # install_openmpi STACK: mpirun (and mpicxx, which the horovod stack builds Horovod with)
    local pkgs="openmpi-bin" status=0
    [ "$1" = horovod ] && pkgs="libopenmpi-dev openmpi-bin"
    if command -v mpirun >/dev/null 2>&1 && { [ "$1" != horovod ] || command -v mpicxx >/dev/null 2>&1; }; then
        return 0
    fi
    # shellcheck disable=SC2086
    apt_install OpenMPI $pkgs || status=$?
    case $status in
        0) ;;
        2) die "OpenMPI is missing and installing it needs root; run 'sudo apt-get install $pkgs' and re-run" ;;
        *) die "OpenMPI is missing and apt-get could not install it ($APT_FAILURE); fix that and re-run" ;;
    esac
}

slurm_missing() {
    [ ! -x /usr/sbin/slurmctld ] || [ ! -x /usr/sbin/slurmd ] || [ ! -x /usr/sbin/munged ] \
        || ! command -v sbatch >/dev/null 2>&1
}

install_slurm() {  # Slurm and munge for the Slurm launcher's tests; optional: they skip, saying why, without it
    local status=0
    slurm_missing || return 0
    apt_install "Slurm for the tests" slurmctld slurmd slurm-client munge || status=$?
    case $status in
        0) ;;
        2) say "Slurm not installed (needs root, or passwordless sudo): the Slurm launcher's real-cluster tests will be skipped" ;;
        *) warn "Slurm not installed: apt-get failed ($APT_FAILURE); the Slurm launcher's real-cluster tests will be skipped: run make install again once apt-get can install it" ;;
    esac
}
