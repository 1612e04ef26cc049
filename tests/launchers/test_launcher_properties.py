"""Property tests (hypothesis) of the config -> command and config -> job translations.

The CIFAR batch reader has its own (tests/data/test_data_batches.py:
test_any_valid_batch_round_trips, test_arbitrary_bytes_raise_nothing_but_data_error,
test_mutated_valid_batches_raise_nothing_but_data_error).
"""

import json
import string
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cifar_dist.config.override_syntax import quote_override_value
from cifar_dist.launchers.base import JobSpec
from cifar_dist.launchers.mpirun import MpirunLauncher

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text a user may put in a quoted override value or a run dir: anything printable, quotes,
# backslashes, commas, brackets, '=' and '$' included (Hydra's grammar has a meaning for each).
_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=30)

_SIMPLE = {  # key -> strategy of (override value as typed, value Hydra should parse)
    "optimizer.lr": st.floats(1e-6, 10, allow_nan=False).map(lambda f: (repr(f), f)),
    "trainer.epochs": st.integers(1, 10_000).map(lambda i: (str(i), i)),
    "trainer.batch_size": st.integers(1, 4096).map(lambda i: (str(i), i)),
    "trainer.seed": st.integers(0, 2**31).map(lambda i: (str(i), i)),
    "trainer.deterministic": st.booleans().map(lambda b: (str(b).lower(), b)),
    "data.path": _TEXT.map(lambda s: (quote_override_value(s), s)),
    "data.name": st.sampled_from(["sample", "cifar10"]).map(lambda s: (s, s)),
    "launcher.np": st.integers(1, 64).map(lambda i: (str(i), i)),  # the parent's: must not reach a rank
}
_PARENT_ONLY = [
    "hydra.mode=MULTIRUN",
    "hydra.sweep.dir=/sweeps/x",
    "hydra.sweep.subdir=3",
    "hydra/launcher=basic",
    "hydra.run.dir=/elsewhere",
    "hydra.output_subdir=.hydra",
    "hydra.job.chdir=false",
]
_KEPT_HYDRA = ["hydra.job.name=cifar_dist", "hydra.verbose=true"]


@st.composite
def jobs(draw):
    keys = draw(st.lists(st.sampled_from(sorted(_SIMPLE)), unique=True, max_size=len(_SIMPLE)))
    typed = {k: draw(_SIMPLE[k]) for k in keys}
    task = [f"{k}={raw}" for k, (raw, _) in typed.items()] + ["launcher=mpirun"]
    hydra = draw(st.lists(st.sampled_from(_PARENT_ONLY + _KEPT_HYDRA), unique=True))
    output_dir = "/" + draw(_TEXT).replace("\0", "")
    job = JobSpec(
        cfg=None,
        output_dir=Path(output_dir),
        task_overrides=draw(st.permutations(task)),
        hydra_overrides=hydra,
        original_cwd=Path("/"),
        multirun=draw(st.booleans()),
    )
    return job, {k: v for k, (_, v) in typed.items()}, hydra


@PROPERTY
@given(jobs(), st.integers(1, 8))
def test_every_rank_gets_the_jobs_overrides_and_nothing_of_the_sweep(drawn, np):
    job, expected, hydra = drawn
    launcher = MpirunLauncher(np=np, oversubscribe=True, bind_to="none")
    argv = launcher.command(job, env={})
    assert "-m" not in argv[argv.index("--") + 4 :] and "--multirun" not in argv
    child = argv[argv.index("--") + 4 :]
    parsed = {
        o.key_or_group: o for o in OverridesParser.create().parse_overrides(child)
    }  # Hydra's own parser accepts every one
    assert not any(o.is_sweep_override() for o in parsed.values())
    for key, value in expected.items():
        if key.startswith("launcher."):
            assert key not in parsed
        elif isinstance(value, float):
            assert parsed[key].value() == pytest.approx(value, rel=1e-12)
        else:
            assert parsed[key].value() == value
    assert parsed["launcher"].value() == "local"
    assert parsed["hydra.run.dir"].value() == str(job.output_dir)
    assert parsed["hydra.output_subdir"].value() is None
    for kept in _KEPT_HYDRA:
        assert (kept.split("=")[0] in parsed) == (kept in hydra)
    for parent_only in ("hydra.mode", "hydra.sweep.dir", "hydra.sweep.subdir", "hydra/launcher", "hydra.job.chdir"):
        assert parent_only not in parsed
    assert len(child) == len(parsed)  # nothing twice (e.g. two hydra.run.dir)


_NAME = st.text(string.ascii_letters + string.digits + "-_", min_size=1, max_size=64)
_ENV_NAME = st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,20}\Z")


@PROPERTY
@given(
    node_count=st.integers(1, 200),
    process_count=st.none() | st.integers(1, 1600),
    hours=st.floats(1 / 60, 24 * 365, allow_nan=False),
    workspace=_NAME,
    cluster=_NAME,
    experiment=_NAME,
    env=st.dictionaries(_ENV_NAME, _TEXT, max_size=4),
    priority=st.sampled_from(["low", "normal", "high"]),
    key_vault=st.booleans(),
    key=st.binary(min_size=16, max_size=64),
    image=_TEXT,
    reveal=st.booleans(),
)
def test_every_generated_job_validates_and_carries_the_key_only_in_its_credentials(
    node_count, process_count, hours, workspace, cluster, experiment, env, priority, key_vault, key, image, reveal
):
    import base64

    from cifar_dist.launchers.azure.job_names import job_name
    from cifar_dist.launchers.batchai.config import BatchAILauncherConf, resolve_settings
    from cifar_dist.launchers.batchai.job import ShareLayout, az_job_file, build_job_body, check_names
    from cifar_dist.launchers.batchai.schema import schema_errors

    secret = base64.b64encode(b"PLANTED" + key).decode()
    vault = (
        dict(
            key_vault_id="/subscriptions/s/resourceGroups/r/providers/Microsoft.KeyVault/vaults/kv",
            key_vault_secret_url="https://kv.vault.azure.net/secrets/k",
        )
        if key_vault
        else {}
    )
    conf = BatchAILauncherConf(
        subscription_id="sub",
        resource_group="rg",
        workspace=workspace,
        cluster=cluster,
        storage_account="acct",
        location="eastus",
        experiment=experiment,
        node_count=node_count,
        process_count=process_count,
        max_wall_clock_hours=hours,
        env=env,
        scheduling_priority=priority,
        image=image,
        **vault,
    )
    settings_ = resolve_settings(conf, {"AZURE_BATCHAI_STORAGE_KEY": secret}, submit=reveal)
    name = job_name(Path("/runs") / workspace, node_count)
    layout = ShareLayout(share="cifardist", base=experiment, job=name, wheel=f"{experiment}/packages/h/w.whl")
    check_names(settings_, layout)
    body = build_job_body(settings_, layout, reveal_key=reveal)

    assert schema_errors(az_job_file(body)) == []
    credentials = body["mountVolumes"]["azureFileShares"][0]["credentials"]
    if reveal and not key_vault:
        assert credentials.pop("accountKey") == secret  # the one place a real submission sends it
    assert secret not in json.dumps(body)
    assert body["horovodSettings"]["processCount"] == (process_count or node_count)
