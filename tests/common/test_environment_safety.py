"""Reading the environment while another thread changes it, and MLflow's telemetry (issue 31, new user 2:
``python -m cifar_dist.tracking import`` failed in ~1 of 6 tries with ``KeyError: '_MLFLOW_TELEMETRY_SESSION_ID'``)."""

import os
import subprocess
import sys
import threading

import pytest

from cifar_dist.common.redaction import secret_values
from helpers.cli import assert_ok, cli_env

CHURN = [f"CIFAR_DIST_TEST_CHURN_{i}_TOKEN" for i in range(2000)]  # secret by name: secret_values reads them


@pytest.fixture
def churning_environment():
    """A thread that keeps removing and re-adding 2000 variables (as MLflow's telemetry thread removes one);
    yields the secret values found before it started."""
    before = set(secret_values())
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows: the race shows in every call
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            for name in CHURN:
                os.environ[name] = "churning-secret"
            for name in CHURN:
                os.environ.pop(name, None)

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        yield before
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
        for name in CHURN:
            os.environ.pop(name, None)


def test_secret_values_survive_a_thread_changing_the_environment(churning_environment):
    for _ in range(200):
        assert set(secret_values()) - churning_environment <= {"churning-secret"}


PROBE = (
    "import os, cifar_dist.tracking, mlflow.telemetry.client as t; "
    "print(t.get_telemetry_client() is not None, os.environ.get('MLFLOW_DISABLE_TELEMETRY'))"
)
CI_VARIABLES = ("PYTEST_CURRENT_TEST", "CI", "GITHUB_ACTIONS", "MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK")


@pytest.mark.parametrize(
    "user_set, expected",
    [
        ({}, "False true"),  # nobody asked: off
        ({"MLFLOW_DISABLE_TELEMETRY": "false"}, "True false"),  # the user's own choice stands
        ({"DO_NOT_TRACK": "true"}, "False None"),
    ],
    ids=["unset", "user-enabled", "do-not-track"],
)
def test_mlflow_telemetry_is_off_unless_the_user_set_it(user_set, expected):
    env = {k: v for k, v in cli_env().items() if k not in CI_VARIABLES}  # MLflow turns it off itself in CI
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env={**env, **user_set}, capture_output=True, text=True, timeout=300
    )
    assert_ok(proc)
    assert proc.stdout.split("\n")[-2] == expected, proc.stdout
