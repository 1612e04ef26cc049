#!/usr/bin/env bash
# Check the README's set-up on a fresh Debian 13 (trixie), or another Debian suite (--suite forky: Debian 14, whose
# Python 3.14 TensorFlow has no wheel for), as a new user would do it.
#
# Builds a Debian root with debootstrap (once; its pristine result is kept beside the root and copied for
# each run), puts a clean clone of this checkout (HEAD, not the working tree's edits) into it as
# /root/cifar_dist, with the shared reference data beside it as /root/shared when there is one, and runs
# inside it with chroot, timing each step:
#
#   make install                                   the README's set-up (OpenMPI, Slurm, the Python stack)
#   versions                                       what got installed (python3, pip, TF, Keras, JAX, Slurm)
#   slurm-cluster                                  the tests' single-node Slurm starts and runs a job
#   python -m cifar_dist debug=fast                the README's first run
#   python -m cifar_dist engine=jax launcher=mpirun launcher.np=2 debug=fast   (its metrics: 2 ranks in sync)
#   python -m cifar_dist launcher=mpirun launcher.np=2 debug=fast   (no engine named: engine=tensorflow,
#                                                  TensorFlow's kernels on both ranks averaged over mpi4py)
#   make test                                      only with --make-test (~30 min on 2 cores)
#
# Where `make install` chose the jax stack (a Python TensorFlow has no wheel for: forky's 3.14), the two
# mpirun runs are one, naming no engine (engine=auto is jax there), and the jax stack's own tests run:
#   make test-jax JAX_VENV=.venv                   the tests marked jax_stack (engine=jax's loop, the data, the
#                                                  GPU choice, 2 mpirun processes and a 2-task Slurm job in sync)
#
# then prints a table of step, exit status and seconds, and exits non-zero if a step failed.
#
# Usage: sudo bash scripts/check_debian13.sh [--suite SUITE] [--root DIR] [--keep] [--make-test]
#   --suite SUITE the Debian suite (default trixie; forky is Debian 14, testing)
#   --root DIR    where the root lives (default /var/tmp/cifar_dist-debian13 for trixie, else
#                 /var/tmp/cifar_dist-SUITE; the pristine copy is DIR.base, the steps' logs DIR.logs/)
#   --keep        reuse DIR as the last run left it (its apt packages, .venv, pip cache): a quick re-run
#                 after a change; the clone is moved to the new HEAD. Without it, DIR starts anew from
#                 DIR.base, as a fresh machine would.
#   --make-test   also run `make test` (the whole default suite)
#
# Needs root (debootstrap, mount, chroot) and a Debian host whose apt reaches a Debian mirror. Reads nothing
# from standard input.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
ROOT=""
KEEP=0
MAKE_TEST=0
SUITE=trixie
# What a new user has before reading the README: Python with venv and pip, git to clone, make to run it.
INCLUDE=python3,python3-venv,python3-pip,git,make,ca-certificates
IN_ROOT_REPO=/root/cifar_dist

say() { printf '[check_debian13] %s\n' "$*"; }
die() { printf 'check_debian13: %s\n' "$*" >&2; exit 2; }

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

parse_args() {
    while [ $# -gt 0 ]; do
        case $1 in
            --root) [ $# -ge 2 ] || die "--root needs a directory"; ROOT=$2; shift 2 ;;
            --root=*) ROOT=${1#--root=}; shift ;;
            --suite) [ $# -ge 2 ] || die "--suite needs a Debian suite"; SUITE=$2; shift 2 ;;
            --suite=*) SUITE=${1#--suite=}; shift ;;
            --keep) KEEP=1; shift ;;
            --make-test) MAKE_TEST=1; shift ;;
            -h|--help) usage; exit 0 ;;
            *) die "unknown argument: $1 (see --help)" ;;
        esac
    done
    case $SUITE in
        *[!a-z]*|"") die "--suite $SUITE: a Debian suite's name, such as trixie or forky" ;;
    esac
    if [ -z "$ROOT" ]; then
        ROOT=/var/tmp/cifar_dist-$SUITE
        [ "$SUITE" = trixie ] && ROOT=/var/tmp/cifar_dist-debian13
    fi
    ROOT=$(realpath -m "$ROOT")
    case $ROOT/ in
        "$REPO"/*) die "the root must not be inside the repository ($ROOT)" ;;
        /|/usr/*|/etc/*|/var/|/tmp/) die "refusing $ROOT as the root" ;;
    esac
    BASE=$ROOT.base
    LOGS=$ROOT.logs
}

# The host's Debian mirror: the first URIs: of deb822 sources, else the first deb line of sources.list,
# so that debootstrap fetches from wherever this machine's apt already does.
debian_mirror() {
    local uri=""
    if [ -r /etc/apt/sources.list.d/debian.sources ]; then
        uri=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
    fi
    if [ -z "$uri" ] && [ -r /etc/apt/sources.list ]; then
        uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' \
            /etc/apt/sources.list)
    fi
    [ -n "$uri" ] || die "no Debian mirror found in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"
    printf '%s\n' "$uri"
}

# debootstrap once into DIR.base; an interrupted bootstrap (no marker) is started over.
build_base() {
    if [ -f "$BASE/.bootstrapped" ]; then
        say "reusing the bootstrapped $SUITE in $BASE"
        return
    fi
    command -v debootstrap >/dev/null 2>&1 || {
        say "installing debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap
    }
    local mirror
    mirror=$(debian_mirror)
    say "debootstrap $SUITE into $BASE from $mirror"
    rm -rf "$BASE"
    # Every Debian suite bootstraps with sid's script; a host's debootstrap older than the suite has none of
    # its own (Debian 12's knows no forky).
    local script=/usr/share/debootstrap/scripts/$SUITE
    [ -e "$script" ] || script=/usr/share/debootstrap/scripts/sid
    debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$BASE" "$mirror" "$script"
    touch "$BASE/.bootstrapped"
}

# DIR as a fresh machine (a copy of the base), or as the last run left it (--keep).
prepare_root() {
    if [ "$KEEP" = 1 ] && [ -f "$ROOT/.bootstrapped" ]; then
        say "reusing $ROOT as the last run left it (--keep)"
    else
        [ "$KEEP" = 1 ] && say "--keep: no root at $ROOT yet, making one"
        rm -rf "$ROOT"
        say "copying the pristine root to $ROOT"
        cp -a "$BASE" "$ROOT"
    fi
    # Services stay down while apt installs Slurm and munge in the root: there is no init in a chroot, and
    # a daemon started there would outlive this script (the tests start their own, on free ports).
    printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
    chmod 755 "$ROOT/usr/sbin/policy-rc.d"
    # Name resolution and localhost as on the host (the tests' Slurm talks to localhost).
    cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
    cp /etc/hosts "$ROOT/etc/hosts"
    copy_package_index_settings
}

# pip inside must reach the same package index as the host: its pip settings and the CA bundles its
# environment names (an index behind a TLS proxy has its own CA). Local CAs go into the root's
# /usr/local/share/ca-certificates too, so that ca-certificates' trigger (apt runs it when it installs
# packages) keeps them in the bundle it rewrites.
copy_package_index_settings() {
    local f
    [ -f /etc/pip.conf ] && cp /etc/pip.conf "$ROOT/etc/pip.conf"
    if [ -d /etc/xdg/pip ]; then
        mkdir -p "$ROOT/etc/xdg"
        rm -rf "$ROOT/etc/xdg/pip"
        cp -a /etc/xdg/pip "$ROOT/etc/xdg/pip"
    fi
    for f in "${SSL_CERT_FILE:-}" "${PIP_CERT:-}" "${REQUESTS_CA_BUNDLE:-}"; do
        [ -n "$f" ] && [ -f "$f" ] || continue
        mkdir -p "$ROOT$(dirname "$f")"
        cp -L "$f" "$ROOT$f"
    done
    if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
        mkdir -p "$ROOT/usr/local/share/ca-certificates"
        cp -L /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
    fi
}

# A clean clone of this checkout at HEAD (what a user gets from git, not this working tree's edits), and
# the shared reference data beside it, where tests/helpers/paths.py looks for it (../shared).
copy_repo() {
    local dest=$ROOT$IN_ROOT_REPO head
    head=$(git -C "$REPO" rev-parse HEAD)
    if [ -n "$(git -C "$REPO" status --porcelain --untracked-files=no)" ]; then
        say "note: $REPO has uncommitted changes; the root gets HEAD ($head) without them"
    fi
    if [ "$KEEP" = 1 ] && [ -d "$dest/.git" ]; then
        say "moving $IN_ROOT_REPO to $head (keeping its .venv)"
        git -C "$dest" fetch -q "$REPO" HEAD
        git -C "$dest" checkout -q -f --detach FETCH_HEAD
        git -C "$dest" clean -q -ffdx -e .venv
    else
        rm -rf "$dest"
        git clone -q --no-hardlinks "$REPO" "$dest"
        git -C "$dest" checkout -q --detach "$head"
    fi
    local shared=${CIFAR_DIST_SHARED:-$REPO/../shared}
    rm -rf "$ROOT/root/shared"
    if [ -d "$shared" ]; then
        cp -a "$(realpath "$shared")" "$ROOT/root/shared"
        say "shared reference data copied from $(realpath "$shared")"
    else
        say "no shared reference data beside the repo: the tests that need it will skip"
    fi
}

# /proc, /sys and /dev in the root (MPI, TensorFlow and Slurm read them); undone by cleanup on any exit.
MOUNTED=()
mount_filesystems() {
    mount -t proc proc "$ROOT/proc"
    MOUNTED+=("$ROOT/proc")
    local d
    for d in sys dev; do
        mount --rbind "/$d" "$ROOT/$d"
        # Unmounting our copy must not unmount the host's (a shared subtree would propagate it).
        mount --make-rslave "$ROOT/$d"
        MOUNTED+=("$ROOT/$d")
    done
}

# Processes still running inside the root (a daemon a failed test left, a stuck rank) would keep the
# mounts busy: end them, by pid, before unmounting.
end_processes_in_root() {
    local p root_of pids=()
    for p in /proc/[0-9]*; do
        root_of=$(readlink "$p/root" 2>/dev/null) || continue
        [ "$root_of" = "$ROOT" ] && pids+=("${p#/proc/}")
    done
    [ ${#pids[@]} -gt 0 ] || return 0
    say "ending processes left in the root: ${pids[*]}"
    kill -TERM "${pids[@]}" 2>/dev/null || true
    sleep 3
    kill -KILL "${pids[@]}" 2>/dev/null || true
}

cleanup() {
    local i
    [ ${#MOUNTED[@]} -gt 0 ] || return 0
    end_processes_in_root
    for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
        umount -R "${MOUNTED[i]}" 2>/dev/null || umount -R -l "${MOUNTED[i]}" 2>/dev/null \
            || say "could not unmount ${MOUNTED[i]}"
    done
    MOUNTED=()
}

# A login-like environment inside, as a new user's shell would have it: nothing of this script's caller
# but the settings that point pip and Python's TLS at the index and its CA.
in_root() {
    local env=(HOME=/root USER=root LOGNAME=root SHELL=/bin/bash LANG=C.UTF-8 TERM=dumb
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
    local v
    for v in SSL_CERT_FILE SSL_CERT_DIR PIP_CERT REQUESTS_CA_BUNDLE PIP_INDEX_URL PIP_EXTRA_INDEX_URL \
        PIP_TRUSTED_HOST PIP_DEFAULT_TIMEOUT http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
        [ -n "${!v:-}" ] && env+=("$v=${!v}")
    done
    chroot "$ROOT" /usr/bin/env -i "${env[@]}" /bin/bash -c "cd $IN_ROOT_REPO && $1" </dev/null
}

# Each step: its output on the terminal and in DIR.logs/NAME.log, its exit status and wall seconds.
STEPS=()
STATUS=()
SECS=()
run_step() {
    local name=$1 cmd=$2 start rc
    say "step $name: ${cmd%%$'\n'*}"
    start=$(date +%s.%N)
    set +e
    in_root "$cmd" 2>&1 | tee "$LOGS/$name.log"
    rc=${PIPESTATUS[0]}
    set -e
    STEPS+=("$name")
    STATUS+=("$rc")
    SECS+=("$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')")
    say "step $name: exit $rc after ${SECS[-1]} s"
    return "$rc"
}
skip_step() {
    STEPS+=("$1")
    STATUS+=("skipped")
    SECS+=("-")
}

# The tests' own Slurm helper (stdlib only, so the system python3 runs it): start the cluster, run one
# job, stop it. What tests/conftest.py's `slurm` fixture does for the real-cluster tests.
SLURM_PROBE='python3 - <<"EOF"
import subprocess, sys, tempfile, time
sys.path.insert(0, "tests")
from helpers.slurm_cluster import missing_packages, start_cluster
if missing_packages():
    sys.exit("Slurm not installed: " + ", ".join(missing_packages()))
cluster = start_cluster(tempfile.mkdtemp(prefix="slurm-"))
try:
    out = cluster.run("sbatch", "--parsable", "--wait", "--output=" + str(cluster.root / "job.out"),
                      "--wrap", "hostname", timeout=120)
    job = out.stdout.strip()
    print("job", job, "printed:", (cluster.root / "job.out").read_text().strip())
    print(cluster.run("scontrol", "-o", "show", "job", job).stdout.strip()[:300])
except BaseException:
    print(cluster.log_tail(40))
    raise
finally:
    cluster.stop()
EOF'

VERSIONS='echo "python3: $(python3 --version 2>&1)"; echo "pip: $(.venv/bin/python -m pip --version)"
.venv/bin/python - <<"EOF"
import importlib.metadata as m
for name in ("tensorflow", "tf-keras", "keras", "jax", "jaxlib", "horovod", "numpy", "cifar_dist"):
    try:
        print(f"{name}: {m.version(name)}")
    except m.PackageNotFoundError:
        print(f"{name}: not installed")
EOF
# Debian package versions (sinfo --version wants a cluster config before it answers)
dpkg-query -W -f "\${Package}: \${Version}\n" slurm-client slurmctld munge openmpi-bin
echo "debian: $(cat /etc/debian_version)"'

# A 2-rank run, checked for what it claims: an exit 0 is not enough, since ranks that each think they are
# alone (a launcher environment the engine does not recognise) also exit 0, each having trained its own
# model into the same run dir. metrics.json's `ranks` must be 2, its ranks in sync (equal weights), its
# engine the one expected. two_ranks OVERRIDES ENGINE fills in the template.
TWO_RANKS='set -o pipefail
.venv/bin/python -m cifar_dist @OVERRIDES@ launcher=mpirun launcher.np=2 debug=fast 2>&1 | tee /tmp/two-ranks.log
run_dir=$(sed -n "s/^cifar_dist: wrote \(.*\): .*/\1/p" /tmp/two-ranks.log | tail -n 1)
.venv/bin/python - "$run_dir" @ENGINE@ <<"EOF"
import json, pathlib, sys
m = json.loads((pathlib.Path(sys.argv[1]) / "metrics.json").read_text())
ranks, engine, in_sync = m["ranks"], m["run"]["engine"], m.get("ranks_in_sync")
print(f"metrics.json: ranks={ranks} engine={engine} ranks_in_sync={in_sync}")
if ranks != 2:
    sys.exit(f"2 ranks launched, but the run counted {ranks}: the ranks did not form one job")
if engine != sys.argv[2] or in_sync is not True:
    sys.exit(f"expected engine={sys.argv[2]} with its 2 ranks in sync")
EOF'
two_ranks() {
    local script=${TWO_RANKS//@OVERRIDES@/$1}
    printf '%s' "${script//@ENGINE@/$2}"
}

print_table() {
    local i failed=0
    printf '\n%-16s %-8s %8s\n' step status seconds
    for i in "${!STEPS[@]}"; do
        printf '%-16s %-8s %8s\n' "${STEPS[i]}" "${STATUS[i]}" "${SECS[i]}"
        case ${STATUS[i]} in 0|skipped) ;; *) failed=1 ;; esac
    done
    printf '(logs: %s)\n' "$LOGS"
    return "$failed"
}

main() {
    parse_args "$@"
    [ "$(id -u)" = 0 ] || die "needs root (debootstrap, mount, chroot)"
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    build_base
    prepare_root
    copy_repo
    rm -rf "$LOGS"
    mkdir -p "$LOGS"
    mount_filesystems

    if run_step make-install "make install"; then
        local stack
        stack=$(cat "$ROOT$IN_ROOT_REPO/.venv/cifar_dist_stack")
        say "make install chose the $stack stack"
        run_step versions "$VERSIONS" || true
        run_step slurm-cluster "$SLURM_PROBE" || true
        run_step debug-fast ".venv/bin/python -m cifar_dist debug=fast" || true
        if [ "$stack" = jax ]; then
            run_step jax-mpirun-2 "$(two_ranks "" jax)" || true
            run_step test-jax "make test-jax JAX_VENV=.venv" || true
        else
            run_step jax-mpirun-2 "$(two_ranks engine=jax jax)" || true
            run_step tf-mpirun-2 "$(two_ranks "" tensorflow)" || true
        fi
        if [ "$MAKE_TEST" = 1 ]; then
            run_step make-test "make test" || true
        fi
    else
        for s in versions slurm-cluster debug-fast jax-mpirun-2; do skip_step "$s"; done
        [ "$MAKE_TEST" = 1 ] && skip_step make-test
    fi
    print_table
}

main "$@"
