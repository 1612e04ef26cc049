"""Config composition: the defaults are the seed's run; typos and bad values fail early."""

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from hydra.utils import get_object
from omegaconf import OmegaConf, open_dict

from cifar_dist.config.validation import ConfigError, validate
from cifar_dist.launchers.base import JobSpec
from helpers.cli import compose_cfg

pytestmark = pytest.mark.both_stacks  # also run on the current stack (Makefile: test-current)


def test_defaults_reproduce_the_seed_run():
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


def test_job_name_and_output_dir():
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
def test_typos_and_wrong_types_fail_at_composition(override, fragment):
    with pytest.raises(ConfigCompositionException) as err:
        compose_cfg(override)
    assert fragment in str(err.value) + str(err.value.__cause__)


def test_bad_values_listed_in_one_line():
    cfg = compose_cfg("trainer.epochs=0", "trainer.batch_size=-1", "optimizer.lr=0")
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    message = str(err.value)
    assert "\n" not in message
    for fragment in ("trainer.epochs=0", "trainer.batch_size=-1", "optimizer.lr=0"):
        assert fragment in message
    validate(compose_cfg())  # the defaults are valid


def config_options() -> dict:
    """{group: [option, ...]} for every config group of the app, as Hydra lists them (conf/ folder and
    ConfigStore alike, nested groups included, Hydra's own groups left out); ``*_schema`` entries are
    the typed bases options extend, not options."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    compose_cfg()  # registers the ConfigStore entries
    with initialize_config_module(config_module="cifar_dist.conf", version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        found, pending = {}, [g for g in loader.list_groups("") if g != "hydra"]
        while pending:
            group = pending.pop()
            pending += [f"{group}/{sub}" for sub in loader.list_groups(group)]
            options = [o for o in loader.get_group_options(group) if not o.endswith("_schema")]
            if options:
                found[group] = options
    return found


OPTIONS = config_options()


@pytest.fixture(scope="module")
def composed() -> dict:
    """Each option composed once: {(group, option): (choices, config without hydra)}, plus the defaults."""
    from hydra import compose, initialize_config_module

    out = {}
    with initialize_config_module(config_module="cifar_dist.conf", version_base="1.3"):  # once: 24 composes
        for key in [(None, None)] + [(g, o) for g, options in OPTIONS.items() for o in options]:
            cfg = compose("config", overrides=[f"{key[0]}={key[1]}"] if key[0] else [], return_hydra_config=True)
            choices = dict(cfg.hydra.runtime.choices)
            with open_dict(cfg):
                del cfg["hydra"]
            out[key] = choices, cfg
    return out


def missing_keys(cfg, prefix="") -> list:
    """Dotted keys whose value is ``???`` (the user must give them)."""
    found = []
    for key in cfg.keys():
        dotted = f"{prefix}{key}"
        if OmegaConf.is_missing(cfg, key):
            found.append(dotted)
        elif OmegaConf.is_dict(cfg[key]):
            found += missing_keys(cfg[key], dotted + ".")
    return found


def test_the_options_are_listed_from_hydra_not_by_hand():
    assert {"optimizer", "model", "data", "launcher", "task", "tracking", "trainer", "experiment", "debug"} <= set(
        OPTIONS
    )
    assert sum(map(len, OPTIONS.values())) >= 23 and {"sgdw", "adam"} <= set(OPTIONS["optimizer"])


NEEDS_HOROVOD = {("engine", "horovod")}  # validation refuses it where Horovod is not installed


@pytest.mark.parametrize(
    "group, option",
    [
        pytest.param(g, o, marks=[pytest.mark.horovod] if (g, o) in NEEDS_HOROVOD else [])
        for g, options in OPTIONS.items()
        for o in options
    ],
)
def test_every_option_composes(composed, group, option):
    choices, cfg = composed[group, option]
    assert choices[group] == option
    needed = missing_keys(cfg)
    if needed:  # values only the user can give: validation asks for each, in one line
        with pytest.raises(ConfigError) as err:
            validate(cfg)
        assert "\n" not in str(err.value) and all(key in str(err.value) for key in needed)
    else:
        validate(cfg)
        OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    node = OmegaConf.select(cfg, group.replace("/", "."))
    if OmegaConf.is_dict(node) and "_target_" in node:
        assert callable(get_object(node._target_)), node._target_
    # An option that is ignored, or a copy of another, would compose to the same config.
    others = [cfg_ for (g, o), (_, cfg_) in composed.items() if g == group and o != option]
    if composed[None, None][0].get(group) != option:
        others.append(composed[None, None][1])
    assert all(cfg != other for other in others), f"{group}={option} composes to the same config as another choice"


def test_child_overrides_recreate_the_job_pinned_to_its_dir(tmp_path):
    out = tmp_path / "run, with 'odd' = chars"
    job = JobSpec(
        cfg=OmegaConf.create(),
        output_dir=out,
        task_overrides=["optimizer.lr=0.0002", "launcher=mpirun", "launcher.np=2", "+launcher.extra=1", "data=sample"],
        hydra_overrides=[
            "hydra.run.dir=somewhere",
            "hydra.sweep.dir=x",
            "hydra.mode=MULTIRUN",
            "hydra.verbose=true",
            "hydra/launcher=basic",
        ],
    )
    overrides = job.child_overrides()
    assert overrides[:2] == ["optimizer.lr=0.0002", "data=sample"]
    assert "launcher=local" in overrides
    assert not any(
        o.startswith(("launcher.", "+launcher", "hydra.sweep", "hydra.mode", "hydra/launcher")) for o in overrides
    )
    assert "hydra.verbose=true" in overrides
    assert "hydra.output_subdir=null" in overrides
    parsed = {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(overrides)}
    assert parsed["hydra.run.dir"] == str(out)  # quoting survives Hydra's parser
