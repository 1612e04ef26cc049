"""Config composition: the defaults are the seed's run; typos and bad values fail early."""
import pytest
from hydra import compose, initialize_config_module
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from cifar_dist.config import register_configs
from cifar_dist.launchers.base import JobSpec, parse_overrides
from cifar_dist.validation import ConfigError, validate

register_configs()


@pytest.fixture
def compose_cfg():
    with initialize_config_module(config_module="cifar_dist.conf", version_base="1.3"):
        yield lambda *overrides, **kw: compose("config", overrides=list(overrides), **kw)


def test_defaults_reproduce_the_seed_run(compose_cfg):
    cfg = compose_cfg()
    assert cfg.data.name == "cifar10"
    assert cfg.model._target_ == "cifar_dist.models.seed_cnn.build"
    assert cfg.optimizer._target_.endswith(".rmsprop")
    assert (cfg.optimizer.lr, cfg.optimizer.decay) == (1e-4, 1e-6)
    t = cfg.trainer
    assert (t.epochs, t.batch_size, t.epoch_policy.value, t.lr_scaling.value) == (100, 32, "divide", "linear")
    a = cfg.data.augment
    assert (a.enabled, a.width_shift, a.height_shift, a.horizontal_flip) == (True, 0.1, 0.1, True)
    assert cfg.launcher._target_ == "cifar_dist.launchers.local.LocalLauncher"


def test_job_name_and_output_dir(compose_cfg):
    cfg = compose_cfg(return_hydra_config=True)
    assert cfg.hydra.job.name == "cifar_dist"
    assert cfg.hydra.job.chdir is False
    assert cfg.hydra.run.dir.startswith("outputs/runs/")


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("trainer.epochz=3", "trainer.epochz"),
        ("trainer.epochs=many", "trainer.epochs"),
        ("trainer.epoch_policy=sideways", "trainer.epoch_policy"),
        ("optimizer=adagrad", "optimizer"),
    ],
)
def test_typos_and_wrong_types_fail_at_composition(compose_cfg, override, fragment):
    with pytest.raises(ConfigCompositionException) as err:
        compose_cfg(override)
    assert fragment in str(err.value) + str(err.value.__cause__)


def test_bad_values_listed_in_one_line(compose_cfg):
    cfg = compose_cfg("trainer.epochs=0", "trainer.batch_size=-1", "optimizer.lr=0")
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    message = str(err.value)
    assert "\n" not in message
    for fragment in ("trainer.epochs=0", "trainer.batch_size=-1", "optimizer.lr=0"):
        assert fragment in message
    validate(compose_cfg())  # the defaults are valid


@pytest.mark.parametrize("group, option", [("optimizer", "sgd"), ("optimizer", "adam"), ("data", "sample"), ("debug", "fast")])
def test_every_option_composes(compose_cfg, group, option):
    cfg = compose_cfg(f"{group}={option}")
    validate(cfg)
    OmegaConf.to_container(cfg, resolve=True)


def test_child_overrides_recreate_the_job_pinned_to_its_dir(tmp_path):
    out = tmp_path / "run, with 'odd' = chars"
    job = JobSpec(
        cfg=OmegaConf.create(),
        output_dir=out,
        task_overrides=["optimizer.lr=0.0002", "launcher=mpirun", "launcher.np=2", "+launcher.extra=1", "data=sample"],
        hydra_overrides=["hydra.run.dir=somewhere", "hydra.sweep.dir=x", "hydra.mode=MULTIRUN", "hydra.verbose=true", "hydra/launcher=basic"],
    )
    overrides = job.child_overrides()
    assert overrides[:2] == ["optimizer.lr=0.0002", "data=sample"]
    assert "launcher=local" in overrides
    assert not any(o.startswith(("launcher.", "+launcher", "hydra.sweep", "hydra.mode", "hydra/launcher")) for o in overrides)
    assert "hydra.verbose=true" in overrides
    assert "hydra.output_subdir=null" in overrides
    parsed = {o.key_or_group: o.value() for o in parse_overrides(overrides)}
    assert parsed["hydra.run.dir"] == str(out)  # quoting survives Hydra's parser
