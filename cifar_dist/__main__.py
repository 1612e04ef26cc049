"""``python -m cifar_dist [overrides]`` (and the ``cifar-dist`` script): see README."""
from cifar_dist.app import interrupted_exit
from cifar_dist.app import main as app_main
from cifar_dist.launchers.base import in_child_process


def main() -> None:
    """The app; Ctrl-C of the launching process ends in one line (a rank keeps Python's own end: its launcher
    tells a rank stopped by a signal from one that failed)."""
    try:
        app_main()
    except KeyboardInterrupt:
        if in_child_process():
            raise
        interrupted_exit()


if __name__ == "__main__":
    main()
