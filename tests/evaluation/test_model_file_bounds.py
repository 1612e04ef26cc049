"""A ``.keras`` file is read within bounds and named truly (issue 37, item 6): a ``config.json`` over the limit is
refused before it is read (a 700 MB one was read whole: 2.27 GB peak), and a truncated or non-zip file says so
instead of Keras 3's "File not found" for a file that exists."""

from __future__ import annotations

import json
import zipfile

import pytest

from cifar_dist.evaluation import model_files
from cifar_dist.evaluation.inputs import EvaluationInputError, load_model

pytestmark = pytest.mark.both_stacks  # also run on the current stack (Makefile: test-current)


def keras_zip(path, config: bytes):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.8.0"}))
        z.writestr("config.json", config)
        z.writestr("model.weights.h5", b"\0" * 4096)
    return path


@pytest.mark.parametrize("trust_model", [False, True])
def test_a_truncated_or_garbage_keras_file_is_named_as_such_not_file_not_found(tmp_path, trust_model):
    whole = keras_zip(tmp_path / "whole.keras", json.dumps({"class_name": "Sequential", "config": {}}).encode())
    truncated = tmp_path / "truncated.keras"
    truncated.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    garbage = tmp_path / "garbage.keras"
    garbage.write_bytes(b"not a zip at all\n" * 100)
    for path in (truncated, garbage):
        with pytest.raises(EvaluationInputError) as err:
            load_model(path, 10, trust_model=trust_model)
        message = str(err.value)
        assert "not a complete .keras (zip) file" in message and str(path) in message, message
        assert "not found" not in message.lower() and "\n" not in message


@pytest.mark.parametrize("trust_model", [False, True])
def test_an_oversized_config_json_is_refused_before_it_is_read(tmp_path, monkeypatch, trust_model):
    path = keras_zip(tmp_path / "big.keras", b" " * (3 * 2**20))  # 3 MiB of spaces: a few KB zipped
    monkeypatch.setattr(model_files, "CONFIG_JSON_LIMIT", 2**20)
    read = []
    real_open = zipfile.ZipFile.open
    monkeypatch.setattr(
        zipfile.ZipFile, "open", lambda self, name, *a, **k: read.append(name) or real_open(self, name, *a, **k)
    )
    with pytest.raises(EvaluationInputError, match=r"config.json is 3 MiB, over the 1 MiB .*refusing to read it"):
        load_model(path, 10, trust_model=trust_model)
    assert not [n for n in read if "config.json" in str(getattr(n, "filename", n))]
