"""``python -m cifar_dist [overrides]`` (and the ``cifar-dist`` script): see README."""

import sys

from cifar_dist.common.garbage_collector import unfreeze_at_exit
from cifar_dist.common.process_role import in_child_process
from cifar_dist.config.files import check_user_yaml, local_dir
from cifar_dist.local_options import local_problems


def main() -> None:
    """The app, after a YAML syntax check of the user's config files and the rules of ``conf/local``
    (local_options.py; one line each, before Hydra);
    Ctrl-C of the launching process ends in one line (a rank keeps Python's own end: its
    launcher tells a rank stopped by a signal from one that failed). However it ends, what the engine's start
    froze is handed back to the collector (``unfreeze_at_exit``): the interpreter's shutdown finalises every
    object, and a file the user's code never closed is written whole, as after plain ``python``."""
    refused, warnings = local_problems(sys.argv[1:], local_dir()) if not in_child_process() else (None, [])
    for warning in warnings:  # a rank's launcher checked: once per command, not per rank
        print(f"cifar_dist: warning: {warning}", file=sys.stderr, flush=True)
    error = check_user_yaml(sys.argv[1:]) or refused
    if error:
        print(f"cifar_dist: error: {error}", file=sys.stderr, flush=True)
        sys.exit(2)
    # after the checks above: importing the app registers every option (and its plugins) with Hydra
    from cifar_dist.app import interrupted_exit  # lazy: Hydra's app, after the checks above
    from cifar_dist.app import main as app_main  # lazy: Hydra's app, after the checks above

    try:
        app_main()
    except KeyboardInterrupt:
        if in_child_process():
            raise
        interrupted_exit()
    finally:
        unfreeze_at_exit()


if __name__ == "__main__":
    main()
