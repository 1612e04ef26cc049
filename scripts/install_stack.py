"""Which stack scripts/install.sh installs for a Python, and why: one line.

Run by install.sh with the interpreter it installs for (``"$PYTHON" scripts/install_stack.py "$CIFAR_DIST_STACK"``).
Prints ``STACK<TAB>WHY`` and exits 0, or prints one line saying what to do instead and exits 1.

setup.cfg's extras' Python markers are the one home of "where a stack installs":

* horovod: the ``horovod`` extra's line for horovod admits the Python (TensorFlow 2.18.1 has wheels there);
* current: the ``tensorflow`` extra's line for tensorflow admits it (TensorFlow 2.21 has no 3.14 wheel);
* jax: Python 3.12 or newer (JAX 0.12), no TensorFlow.

``auto`` takes the first of the three that admits the Python. ``--python-version X.Y`` asks for another Python
than the one running (the tests' way to ask about 3.14 on a machine without it).
"""

import argparse
import configparser
import functools
import re
import sys
from pathlib import Path

SETUP_CFG = Path(__file__).resolve().parent.parent / "setup.cfg"
JAX_OLDEST_PYTHON = (3, 12)  # JAX 0.12, the jax extra's newest
WHAT = {
    "horovod": "TensorFlow {tf} and Horovod {horovod} for Python {ver}",
    "current": "the newest TensorFlow, Keras and JAX for Python {ver}, no Horovod",
    "jax": "Keras 3 on JAX for Python {ver}, no TensorFlow, no Horovod",
}


@functools.cache
def extra_line(extra: str, package: str) -> str:
    """setup.cfg's line for PACKAGE in EXTRA (read once)."""
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    lines = cfg["options.extras_require"][extra].splitlines()
    line = next((x for x in lines if re.match(rf"\s*{re.escape(package)}(?![-\w])", x)), None)
    if line is None:
        raise SystemExit(f"install_stack.py: setup.cfg's {extra} extra names no {package}")
    return line


def python_upper_bound(extra: str, package: str):
    """The (major, minor) that EXTRA's line for PACKAGE must stay below (``python_version < "X.Y"``), or None."""
    match = re.search(r'python_version\s*<\s*"(\d+)\.(\d+)"', extra_line(extra, package).partition(";")[2])
    return (int(match[1]), int(match[2])) if match else None


def horovod_pins() -> dict:
    """The versions the horovod extra pins (``==``): Horovod's, and the TensorFlow it builds against."""
    pin = r"==\s*([^;\s]+)"
    return {name: re.search(pin, extra_line("horovod", package))[1] for name, package in
            (("tf", "tensorflow"), ("horovod", "horovod"))}  # fmt: skip


def admits(extra: str, package: str, python: tuple) -> bool:
    bound = python_upper_bound(extra, package)
    return bound is None or python < bound


def auto_choice(python: tuple) -> tuple:
    """The first stack PYTHON can hold, and why."""
    ver, pins = f"{python[0]}.{python[1]}", horovod_pins()
    if admits("horovod", "horovod", python):
        why = (
            f"Python {ver} has TensorFlow {pins['tf']} wheels, "
            f"the newest TensorFlow Horovod {pins['horovod']} builds against"
        )
        stack = "horovod"
    elif admits("tensorflow", "tensorflow", python):
        why = (
            f"Python {ver} has no TensorFlow {pins['tf']} wheel, so no Horovod; "
            "engine=auto trains on TensorFlow (1 process) or JAX"
        )
        stack = "current"
    else:
        why = f"TensorFlow has no wheel for Python {ver} in setup.cfg's range; engine=auto trains on JAX"
        stack = check_asked("jax", python)[0]
    return stack, why + "; CIFAR_DIST_STACK=horovod|current|jax picks one"


def check_asked(asked: str, python: tuple) -> tuple:
    """ASKED and why, or SystemExit with one line naming the way out when PYTHON cannot hold it."""
    ver, pins = f"{python[0]}.{python[1]}", horovod_pins()
    if asked not in WHAT:
        raise SystemExit(f"CIFAR_DIST_STACK={asked}: use auto, horovod, current or jax")
    if asked == "horovod" and not admits("horovod", "horovod", python):
        raise SystemExit(
            f"CIFAR_DIST_STACK=horovod needs Python 3.10 or 3.11 (TensorFlow {pins['tf']}, Horovod {pins['horovod']}); "
            f"this is {ver}: use CIFAR_DIST_STACK=current, or PYTHON=python3.11"
        )
    if asked == "current" and not admits("tensorflow", "tensorflow", python):
        raise SystemExit(
            f"CIFAR_DIST_STACK=current needs a Python that TensorFlow has wheels for (setup.cfg's tensorflow "
            f"extra); this is {ver}: use CIFAR_DIST_STACK=jax, or PYTHON=python3.13"
        )
    if asked == "jax" and python < JAX_OLDEST_PYTHON:
        raise SystemExit(
            f"CIFAR_DIST_STACK=jax needs Python 3.12 or newer (JAX 0.12); this is {ver}: use PYTHON=python3.12"
        )
    return asked, f"CIFAR_DIST_STACK={asked}: " + WHAT[asked].format(ver=ver, **pins)


def choose(asked: str, python: tuple) -> tuple:
    """(stack, why) for ASKED (auto or a stack's name) on PYTHON."""
    return auto_choice(python) if asked == "auto" else check_asked(asked, python)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stack", nargs="?", default="auto")
    parser.add_argument("--python-version", help="X.Y (default: the running interpreter's)")
    args = parser.parse_args(argv)
    python = tuple(sys.version_info[:2])
    if args.python_version:
        python = tuple(int(x) for x in args.python_version.split(".")[:2])
    stack, why = choose(args.stack, python)
    print(f"{stack}\t{why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
