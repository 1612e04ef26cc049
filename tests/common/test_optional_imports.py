"""``optional_imports.hidden``: the one home of "import a framework without the optional packages it tries"."""

from __future__ import annotations

import sys

import pytest

from cifar_dist.common.optional_imports import hidden

pytestmark = [pytest.mark.both_stacks]


def test_a_hidden_package_is_missing_inside_and_imports_as_before_after():
    name = "json.tool"  # standard library: always installed; not imported by the test run itself
    sys.modules.pop(name, None)
    with hidden(name):
        with pytest.raises(ImportError):
            __import__(name)
    assert __import__(name) and sys.modules[name] is not None


def test_a_package_loaded_already_is_left_alone():
    with hidden("json"):
        import json  # noqa: F401  (loaded before: the block does not take it away)
    assert sys.modules["json"] is not None
