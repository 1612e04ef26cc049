"""cifar_dist's Hydra callbacks fail closed (``common/hydra_hooks.py``): Hydra 1.3 turns a callback's exception into
a warning and runs the job anyway, unchecked; an unforeseen error in one of cifar_dist's checks ends the command in
one line instead, secrets masked."""

from __future__ import annotations

import pytest

from cifar_dist.rundir import saved_config
from cifar_dist.rundir.saved_config import RedactSavedConfig
from cifar_dist.training.engines.choice import EngineChoice

pytestmark = [pytest.mark.both_stacks]


def test_a_check_that_breaks_stops_the_command_in_one_line_with_secrets_masked(monkeypatch, capsys):
    def unreadable(config):
        raise PermissionError("cannot read http://alice:Pw-in-clear@mlflow.example/.hydra/config.yaml")

    monkeypatch.setattr(saved_config, "saved_files", unreadable)
    with pytest.raises(SystemExit) as stopped:
        RedactSavedConfig().on_job_start(config=None)  # the masking of .hydra/'s secrets: never skipped silently
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("cifar_dist: error: RedactSavedConfig.on_job_start failed (PermissionError: cannot read")
    assert len(err.strip().splitlines()) == 1 and "Pw-in-clear" not in err


def test_cifar_dists_own_refusal_is_its_own_line(monkeypatch, capsys):
    from cifar_dist.common.errors import ConfigError
    from cifar_dist.training.engines import choice

    monkeypatch.setattr(choice, "in_child_process", lambda: False)

    def refused(config, run_dir):
        raise ConfigError("engine=auto cannot choose here; name one")

    monkeypatch.setattr(choice, "resolve_engine", refused)
    config = type("C", (), {"hydra": type("H", (), {"run": type("R", (), {"dir": "run"})()})()})()
    with pytest.raises(SystemExit):
        EngineChoice().on_run_start(config=config)
    assert capsys.readouterr().err.strip() == "cifar_dist: error: engine=auto cannot choose here; name one"
