"""trainer.onednn: TensorFlow's oneDNN CPU kernels are chosen before TensorFlow loads, and a late choice fails loudly.

TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, at import, so every case runs in
a fresh interpreter.
"""

import json
import subprocess
import sys

import pytest

from helpers.cli import assert_ok, cli_env, read_metrics
from helpers.paths import REPO

PROBE = """
import json, sys
from cifar_dist.common.errors import CifarDistError
from cifar_dist.training.process.hardware import onednn_enabled, use_onednn
if sys.argv[1] == "late":
    import tensorflow  # imported before cifar_dist could choose
    try:
        use_onednn(sys.argv[2] == "on")
    except CifarDistError as exc:
        print(json.dumps({"error": str(exc), "onednn": onednn_enabled()}))
        raise SystemExit(0)
else:
    use_onednn(sys.argv[1] == "on")
print(json.dumps({"error": None, "onednn": onednn_enabled()}))
"""


def probe(*args, **env):
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=REPO,
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert_ok(proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("choice, env", [("on", "0"), ("off", "1")])
def test_the_config_choice_wins_over_the_environment_when_made_before_tensorflow_loads(choice, env):
    assert probe(choice, TF_ENABLE_ONEDNN_OPTS=env) == {"error": None, "onednn": choice == "on"}


def test_a_choice_tensorflow_already_made_otherwise_is_one_line_that_says_what_to_do():
    result = probe("late", "on", TF_ENABLE_ONEDNN_OPTS="0")
    assert result["onednn"] is False
    assert "export TF_ENABLE_ONEDNN_OPTS=1" in result["error"] and "trainer.onednn=false" in result["error"]
    assert "\n" not in result["error"]
    # Asking for what TensorFlow already does is fine.
    assert probe("late", "off", TF_ENABLE_ONEDNN_OPTS="0") == {"error": None, "onednn": False}


def test_training_records_the_kernels_it_ran_on(trained_run):
    run_dir, proc = trained_run
    assert read_metrics(run_dir)["run"]["onednn"] is True  # the default, whatever TensorFlow's own is on this CPU
    assert "CPU kernels oneDNN" in proc.stdout + proc.stderr
