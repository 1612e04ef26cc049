"""``python -m cifar_dist [overrides]``: see README."""
from cifar_dist.app import main

if __name__ == "__main__":
    main()
