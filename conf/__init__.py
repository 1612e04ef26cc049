"""Hydra config groups (package data; also importable as pkg://cifar_dist.conf)."""
