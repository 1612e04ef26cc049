"""Hydra's command line on Python 3.14.

Python 3.14's argparse checks every argument's help as it is added (``ArgumentParser._check_help``: ``'%' in
help``). Hydra 1.3.8, its newest release, adds ``--shell-completion`` with a help object that renders itself
lazily (``LazyCompletionHelp``, with only ``__repr__``): the check raises, and every Hydra app fails before it
parses its command line (``ValueError: badly formed help string``; hydra issue 3121, fixed in Hydra's
repository but not released). Hydra prints that help itself (``f"{action.help}"`` in its ``--help``), never
through argparse's formatter, so the check is skipped for a help that is not a string; every other help is
checked as before.
"""

from __future__ import annotations

import argparse

_SKIPS_HELP_OBJECTS = "_cifar_dist_skips_help_objects"


def let_hydra_parse_on_python_314() -> None:
    """Make argparse's eager help check (Python 3.14 and newer) pass over help objects that are not strings.
    Nothing on older Pythons (no such check); idempotent."""
    check = getattr(argparse.ArgumentParser, "_check_help", None)
    if check is None or getattr(check, _SKIPS_HELP_OBJECTS, False):
        return

    def _check_help(self, action):
        if action.help is None or isinstance(action.help, str):
            check(self, action)

    setattr(_check_help, _SKIPS_HELP_OBJECTS, True)
    argparse.ArgumentParser._check_help = _check_help
