"""``python -m cifar_dist [overrides]``: see README."""
import sys
from pathlib import Path


def main() -> None:
    from cifar_dist.config_files import check_user_yaml

    error = check_user_yaml(sys.argv[1:], Path(__file__).parent / "conf" / "local")
    if error:
        print(f"cifar_dist: error: {error}", file=sys.stderr, flush=True)
        sys.exit(2)
    from cifar_dist.app import main as hydra_main

    hydra_main()


if __name__ == "__main__":
    main()
