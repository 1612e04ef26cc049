"""``python -m cifar_dist [overrides]`` (and the ``cifar-dist`` script): see README."""
import sys


def main() -> None:
    """The app, after a YAML syntax check of the user's config files (one line, before Hydra);
    Ctrl-C of the launching process ends in one line (a rank keeps Python's own end: its
    launcher tells a rank stopped by a signal from one that failed)."""
    from cifar_dist.config_files import check_user_yaml, local_dir

    error = check_user_yaml(sys.argv[1:], local_dir())
    if error:
        print(f"cifar_dist: error: {error}", file=sys.stderr, flush=True)
        sys.exit(2)
    from cifar_dist.app import interrupted_exit
    from cifar_dist.app import main as app_main
    from cifar_dist.process_role import in_child_process

    try:
        app_main()
    except KeyboardInterrupt:
        if in_child_process():
            raise
        interrupted_exit()


if __name__ == "__main__":
    main()
