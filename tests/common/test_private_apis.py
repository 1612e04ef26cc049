"""Each private API of Keras, JAX, OmegaConf and Hydra that cifar_dist relies on (cifar_dist/common/*_internals.py),
checked on the release installed here: one test per private thing, named after it, whose failure is one line that
names it and the module to fix. A release that removes or changes one fails that test alone.

The stacks install each library's range at both ends (the horovod stack the lower, the current and jax stacks the
newest), so the file runs in all three passes. What Keras does only on JAX (its training state) is checked in one
fresh process on the JAX backend, shared by the tests that read it.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import io
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf

from cifar_dist.common import hydra_internals, jax_internals, keras_internals, omegaconf_internals
from cifar_dist.common.keras_callback import Callback
from helpers.cli import cli_env

pytestmark = [pytest.mark.both_stacks, pytest.mark.jax_stack]


class relied_on:
    """Any failure inside as one line: the private API, and the internals module that relies on it."""

    def __init__(self, api: str, home: str):
        self.api, self.home = api, home

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, traceback):
        if not isinstance(exc, Exception):
            return False
        raise pytest.fail.Exception(
            f"{self.api} is gone or changed in this release ({kind.__name__}: {str(exc)[:300]}); "
            f"cifar_dist/common/{self.home} relies on it: adapt it there",
            pytrace=False,
        ) from None


def keras_api(api: str):
    return relied_on(f"Keras' {api}", "keras_internals.py")


def tf_keras_api(api: str):
    return relied_on(f"tf_keras' {api}", "keras_internals.py")


def jax_api(api: str):
    return relied_on(f"JAX's {api}", "jax_internals.py")


def omegaconf_api(api: str):
    return relied_on(f"OmegaConf's {api}", "omegaconf_internals.py")


def hydra_api(api: str):
    return relied_on(f"Hydra's {api}", "hydra_internals.py")


# --- Keras 3 ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keras():
    """Keras 3 on this stack's backend: TensorFlow's where it is installed, else JAX's (the jax stack, where Keras'
    default backend cannot load and where the newest Keras is the one engine=jax trains with)."""
    import cifar_dist  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads, where it is installed)

    with pytest.MonkeyPatch.context() as env:
        if importlib.util.find_spec("tensorflow") is None:
            env.setenv("KERAS_BACKEND", "jax")
        return pytest.importorskip("keras")


def nested_model(k):
    """A model with a layer inside a layer: only ``_flatten_layers`` reaches the inner one."""
    inner = k.Sequential([k.layers.Dense(3, name="inner_dense"), k.layers.Dropout(0.5, seed=1, name="inner_drop")])
    inputs = k.Input((4,))
    return k.Model(inputs, k.layers.Dense(2, name="outer_dense")(inner(inputs)))


def test_keras_layer__flatten_layers(keras):
    with keras_api("Layer._flatten_layers(include_self=False)"):
        names = [layer.name for layer in keras_internals.nested_layers(nested_model(keras))]
        assert {"inner_dense", "inner_drop", "outer_dense"} <= set(names), names


def test_keras_layer__seed_generators(keras):
    with keras_api("Layer._seed_generators"):
        (generator,) = keras_internals.seed_generators(keras.layers.Dropout(0.5, seed=3))
        assert tuple(generator.state.shape) == (2,)  # (seed, counter): what ReseedEachEpoch assigns


def test_keras_default_hooks__is_default(keras):
    with keras_api("@default's _is_default (keras.src.utils.python_utils)"):
        assert keras_internals.is_default_hook(keras.callbacks.Callback.on_train_batch_end)
        assert not keras_internals.is_default_hook(keras.callbacks.History.on_epoch_end)
        from keras.src.utils.python_utils import is_default

        assert is_default(Callback.on_train_batch_end) and not is_default(Callback.set_model)


def test_keras_saving_lib_save_model_to_a_file_object(keras, tmp_path):
    model = nested_model(keras)
    with keras_api("keras.src.saving.saving_lib.save_model(model, file object)"):
        buffer = io.BytesIO()
        keras_internals.save_model_to_file(model, buffer)
        (tmp_path / "m.keras").write_bytes(buffer.getvalue())
        loaded = keras.saving.load_model(tmp_path / "m.keras", compile=False)
        for saved, read in zip(model.get_weights(), loaded.get_weights()):
            np.testing.assert_array_equal(saved, read)


def built_optimizer(keras, cls):
    variables = [keras.Variable(np.ones((2,), "float32"), name="a"), keras.Variable(np.ones((3,), "float32"), name="b")]
    optimizer = cls(learning_rate=0.1)
    optimizer.build(variables)
    return optimizer, variables


def test_keras_optimizer__get_variable_index(keras):
    with keras_api("Optimizer._get_variable_index"):
        optimizer, variables = built_optimizer(keras, keras.optimizers.SGD)
        assert keras_internals.optimizer_slot(optimizer, ["slot a", "slot b"], variables[1]) == "slot b"


def test_keras_optimizer__trainable_variables(keras):
    with keras_api("Optimizer._trainable_variables"):
        optimizer, variables = built_optimizer(keras, keras.optimizers.SGD)
        assert keras_internals.optimizer_model_variable(optimizer, variables[1]) is variables[1]


def test_keras_rmsprop__velocities(keras):
    with keras_api("RMSprop._velocities"):
        optimizer, variables = built_optimizer(keras, keras.optimizers.RMSprop)
        velocity = keras_internals.rmsprop_velocity(optimizer, variables[1])
        assert tuple(velocity.shape) == (3,) and "velocity" in velocity.path


def test_keras_module_utils_tensorflow_lazy_module(keras):
    """Keras' modules that ask whether TensorFlow is there (its serializer, its seeding) ask the one LazyModule
    instance ``tensorflow_only_where_loaded`` re-classes, through its ``available`` property."""
    with keras_api("keras.src.utils.module_utils.tensorflow (LazyModule.available)"):
        from keras.src.saving import serialization_lib
        from keras.src.utils import module_utils, rng_utils

        lazy = module_utils.tensorflow
        assert isinstance(lazy, module_utils.LazyModule) and isinstance(type(lazy).__dict__.get("available"), property)
        assert serialization_lib.tf is lazy and rng_utils.tf is lazy


LEAN_KERAS = textwrap.dedent(
    """
    import importlib.util, json, os, sys
    os.environ["KERAS_BACKEND"] = "jax"
    from cifar_dist.common import keras_internals
    keras = keras_internals.import_keras_for_training()
    skipped = [name for name in keras_internals.KERAS_OPTIONAL_IMPORTS if name in sys.modules]
    try:
        keras.wrappers.SKLearnClassifier(model=None)
        wrapper = "built"
    except ImportError as exc:
        wrapper = str(exc)
    import sklearn, pandas, matplotlib.pyplot  # as before for anyone who asks
    print("RESULTS " + json.dumps({"loaded": skipped, "wrapper": wrapper}))
    """
)


def test_keras_imports_its_optional_integrations_in_try_blocks():
    """Keras falls back where scikit-learn, pandas and matplotlib are missing, so a training process imports it
    without them (~1 s): checked in a fresh process on JAX, where all three are installed (MLflow's)."""
    for name in keras_internals.KERAS_OPTIONAL_IMPORTS:
        pytest.importorskip(name)
    pytest.importorskip("jax")
    with keras_api("optional imports of sklearn, pandas and matplotlib.pyplot in try blocks"):
        proc = subprocess.run(
            [sys.executable, "-c", LEAN_KERAS], env=cli_env(), capture_output=True, text=True, timeout=300
        )
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
        assert lines, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
        result = json.loads(lines[-1][len("RESULTS ") :])
        assert result["loaded"] == [], f"imported by Keras anyway: {result['loaded']}"
        assert "requires `scikit-learn`" in result["wrapper"], result["wrapper"]


# --- Keras 3 on JAX: one fresh process ----------------------------------------------------------------------------

KERAS_ON_JAX = textwrap.dedent(
    """
    import json, os
    os.environ["KERAS_BACKEND"] = "jax"
    import keras, numpy as np
    from cifar_dist.common import keras_internals as k

    def compiled():
        inputs = keras.Input((4,))
        model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(inputs))
        model.compile(optimizer="sgd", loss="categorical_crossentropy", metrics=["accuracy"])
        return model

    rng = np.random.default_rng(0)
    data = (rng.normal(size=(8, 4)).astype("float32"), np.eye(3, dtype="float32")[rng.integers(0, 3, 8)])
    fitted = compiled()
    fitted.fit(*data, epochs=1, verbose=0)  # built by Keras' own fit: each check below needs only its own API

    def symbolic_build():
        model = compiled()
        k.symbolic_build(model, data)
        assert model.optimizer.variables and model.metrics_variables, "the optimizer's and metrics' variables not built"

    def get_jax_state():
        state = k.jax_state(fitted, purge_model_variables=False)
        groups = (fitted.trainable_variables, fitted.non_trainable_variables, fitted.optimizer.variables,
                  fitted.metrics_variables)
        assert [len(s) for s in state] == [len(g) for g in groups], [len(s) for s in state]
        np.testing.assert_array_equal(np.asarray(state[0][0]), fitted.trainable_variables[0].numpy())

    def jax_state():
        state = k.jax_state(fitted, purge_model_variables=False)
        moved = ([v + 1.0 for v in state[0]], *state[1:])
        before = fitted.trainable_variables[0].numpy()
        k.hold_jax_state(fitted, moved)
        fitted._jax_state_synced = False  # plainly here: this check is of _jax_state alone
        fitted.jax_state_sync()
        np.testing.assert_allclose(fitted.trainable_variables[0].numpy(), before + 1.0)
        k.hold_jax_state(fitted, None)

    def jax_state_synced():
        k.set_jax_state_synced(fitted, False)
        assert k.jax_state_synced(fitted) is False, "not read back as set"
        fitted._jax_state = {"trainable_variables": [v.value for v in fitted.trainable_variables]}  # plainly here
        fitted.jax_state_sync()  # Keras' own: writes the held state back and says so
        assert k.jax_state_synced(fitted) is True, "jax_state_sync does not set it"
        fitted._jax_state = None

    results = {}
    for check in (symbolic_build, get_jax_state, jax_state, jax_state_synced):
        try:
            check()
            results[check.__name__] = None
        except Exception as exc:
            results[check.__name__] = f"{type(exc).__name__}: {exc}"
    print("RESULTS " + json.dumps(results))
    """
)


@pytest.fixture(scope="module")
def keras_on_jax():
    """Each Keras-on-JAX check's failure (None: it passed), from one process on Keras' JAX backend."""
    pytest.importorskip("jax")
    if importlib.util.find_spec("keras") is None:
        pytest.skip("Keras 3 is not installed")
    proc = subprocess.run(
        [sys.executable, "-c", KERAS_ON_JAX], env=cli_env(), capture_output=True, text=True, timeout=300
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
    assert lines, f"the Keras-on-JAX checks did not run (exit {proc.returncode}): {proc.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULTS ") :])


@pytest.mark.parametrize(
    "api, check",
    [
        pytest.param("Trainer._symbolic_build", "symbolic_build", id="Trainer__symbolic_build"),
        pytest.param("JAXTrainer._get_jax_state", "get_jax_state", id="JAXTrainer__get_jax_state"),
        pytest.param("JAXTrainer._jax_state", "jax_state", id="JAXTrainer__jax_state"),
        pytest.param("JAXTrainer._jax_state_synced", "jax_state_synced", id="JAXTrainer__jax_state_synced"),
    ],
)
def test_keras_on_jax(keras_on_jax, api, check):
    with keras_api(api):
        assert keras_on_jax[check] is None, keras_on_jax[check]


# --- Keras 2 (tf_keras) ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tf():
    import cifar_dist  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

    pytest.importorskip("tf_keras")
    return pytest.importorskip("tensorflow")


def test_tf_keras_layer__flatten_layers(tf):
    with tf_keras_api("Layer._flatten_layers(include_self=False)"):
        names = [layer.name for layer in keras_internals.nested_layers(nested_model(tf.keras))]
        assert {"inner_dense", "inner_drop", "outer_dense"} <= set(names), names


def test_tf_keras_default_hooks__is_default(tf):
    with tf_keras_api("@default's _is_default (tf_keras.src.utils.generic_utils)"):
        assert keras_internals.is_default_hook(tf.keras.callbacks.Callback.on_train_batch_end)
        from tf_keras.src.utils.generic_utils import is_default

        assert is_default(Callback.on_train_batch_end) and not is_default(Callback.set_model)


def test_tf_keras_layer__random_generator(tf):
    enabled = tf.keras.backend.experimental.is_tf_random_generator_enabled()
    tf.keras.backend.experimental.enable_tf_random_generator()
    try:
        with tf_keras_api("Layer._random_generator (its _maybe_init and _generator)"):
            layers = [tf.keras.layers.Dense(2), tf.keras.layers.Dropout(0.5, seed=1)]
            ((index, generator),) = keras_internals.tf_random_generators(layers)
            assert index == 1 and isinstance(generator, tf.random.Generator)
    finally:
        if not enabled:
            tf.keras.backend.experimental.disable_tf_random_generator()


def legacy_sgd(tf, **kwargs):
    variable = tf.Variable([1.0, 2.0], name="w")
    return tf.keras.optimizers.legacy.SGD(**kwargs), variable


def test_tf_keras_legacy_optimizer__create_all_weights(tf):
    with tf_keras_api("OptimizerV2._create_all_weights"):
        optimizer, variable = legacy_sgd(tf, learning_rate=0.1, momentum=0.9)
        keras_internals.create_legacy_optimizer_slots(optimizer, [variable])
        names = [v.name for v in optimizer.variables()]
        assert any("momentum" in name for name in names) and any("iter" in name for name in names), names


def test_tf_keras_legacy_optimizer__decayed_lr(tf):
    with tf_keras_api("OptimizerV2._decayed_lr"):
        schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.5, decay_steps=1, decay_rate=0.5)
        optimizer, variable = legacy_sgd(tf, learning_rate=schedule)
        optimizer.apply_gradients([(tf.constant([1.0, 1.0]), variable)])  # one step: the schedule's lr halves
        assert float(keras_internals.legacy_decayed_lr(optimizer, tf.float32)) == pytest.approx(0.25)


def test_tf_keras_legacy_optimizer__resource_apply_dense_is_called(tf):
    called = []

    class Spy(tf.keras.optimizers.legacy.SGD):  # what training/recipe/sgdw.py's SGDW overrides
        def _resource_apply_dense(self, grad, var, apply_state=None):
            called.append(var.name)
            return super()._resource_apply_dense(grad, var, apply_state)

    with tf_keras_api("OptimizerV2._resource_apply_dense (SGDW overrides it)"):
        variable = tf.Variable([1.0, 2.0], name="w")
        Spy(learning_rate=0.1).apply_gradients([(tf.constant([1.0, 1.0]), variable)])
        assert called == ["w:0"], called


def test_tf_keras_legacy_optimizer__compute_gradients_is_called(tf):
    called = []

    class Spy(tf.keras.optimizers.legacy.SGD):  # what engines/mpi_gradients.py's averaging subclass overrides
        def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
            called.append(len(var_list))
            return super()._compute_gradients(loss, var_list, grad_loss=grad_loss, tape=tape)

    with tf_keras_api("OptimizerV2._compute_gradients (engine=tensorflow's averaging overrides it)"):
        variable = tf.Variable([1.0, 2.0], name="w")
        Spy(learning_rate=0.1).minimize(lambda: tf.reduce_sum(variable * variable), [variable])
        assert called == [1], called


def test_tf_keras_callback_list_asks__implements_batch_hooks(tf):
    asked = []

    class Quiet(Callback):  # common/keras_callback.py's Callback answers it
        def _implements_train_batch_hooks(self) -> bool:
            asked.append("train")
            return super()._implements_train_batch_hooks()

    with tf_keras_api("CallbackList's use of Callback._implements_train_batch_hooks"):
        tf.keras.callbacks.CallbackList([Quiet()])
        assert "train" in asked


def test_tf_keras_callback_list_reads__supports_tf_logs(tf):
    seen = []

    class Logs(Callback):  # _supports_tf_logs = False (keras_callback.py): numbers, not tensors
        def on_train_batch_end(self, batch, logs=None):
            seen.append(type(logs["loss"]))

    with tf_keras_api("CallbackList's use of Callback._supports_tf_logs"):
        tf.keras.callbacks.CallbackList([Logs()]).on_train_batch_end(0, {"loss": tf.constant(1.0)})
        assert seen and not issubclass(seen[0], tf.Tensor), seen


# --- JAX --------------------------------------------------------------------------------------------------------


def test_jax__src_xla_bridge_logger():
    pytest.importorskip("jax")
    with jax_api("jax._src.xla_bridge's logger"):
        from jax._src import xla_bridge

        assert xla_bridge.logger.name == jax_internals.BACKEND_LOGGER


def test_jax__src_lib__jax_make_gloo_tcp_collectives():
    pytest.importorskip("jax")
    with jax_api("jax._src.lib._jax.make_gloo_tcp_collectives(distributed_client=, hostname=)"):
        from jax._src.lib import _jax

        doc = _jax.make_gloo_tcp_collectives.__doc__ or ""
        assert "distributed_client" in doc and "hostname" in doc, doc


def test_jax__src_distributed_global_state_client():
    pytest.importorskip("jax")
    with jax_api("jax._src.distributed.global_state.client"):
        from jax._src import distributed

        assert hasattr(distributed.global_state, "client")


def test_jax__src_xla_bridge_make_cpu_client():
    pytest.importorskip("jax")
    with jax_api("jax._src.xla_bridge.make_cpu_client(collectives=)"):
        from jax._src import xla_bridge

        assert "collectives" in inspect.signature(xla_bridge.make_cpu_client).parameters


def test_jax__src_xla_bridge_register_backend_factory():
    pytest.importorskip("jax")
    with jax_api("jax._src.xla_bridge.register_backend_factory(name, factory, priority=, fail_quietly=)"):
        from jax._src import xla_bridge

        parameters = inspect.signature(xla_bridge.register_backend_factory).parameters
        assert {"name", "factory", "priority", "fail_quietly"} <= set(parameters), list(parameters)


def test_jax__src_distributed_client_key_value_set_and_blocking_key_value_get():
    pytest.importorskip("jax")
    with jax_api("the coordination client's key_value_set and blocking_key_value_get(key, timeout_in_ms)"):
        from jax._src.lib import _jax

        client = _jax.DistributedRuntimeClient
        assert callable(client.key_value_set) and callable(client.blocking_key_value_get)


# --- OmegaConf --------------------------------------------------------------------------------------------------


def test_omegaconf_node__set_flag():
    with omegaconf_api("Node._set_flag (a flag of cifar_dist's own, kept by copies)"):
        cfg = OmegaConf.create({"a": {"b": 1}})
        omegaconf_internals.mark(cfg, "cifar_dist_test_flag")
        assert omegaconf_internals.is_marked(cfg.copy(), "cifar_dist_test_flag")
        assert omegaconf_internals.is_marked(copy.deepcopy(cfg), "cifar_dist_test_flag")
        assert "cifar_dist_test_flag" not in OmegaConf.to_yaml(cfg)  # no saved config shows it


def test_omegaconf_node__get_node_flag():
    with omegaconf_api("Node._get_node_flag"):
        cfg = OmegaConf.create({"a": 1})
        assert not omegaconf_internals.is_marked(cfg, "cifar_dist_test_flag")
        OmegaConf.set_readonly(cfg, True)  # one of OmegaConf's own flags, set publicly, read the same way
        assert omegaconf_internals.is_marked(cfg, "readonly")


def test_omegaconf__utils_get_yaml_loader():
    with omegaconf_api("omegaconf._utils.get_yaml_loader"):
        loader = omegaconf_internals.yaml_loader()
        assert yaml.load("lr: 1e-3", Loader=loader) == {"lr": 0.001}  # YAML 1.1's SafeLoader reads a string
        with pytest.raises(yaml.YAMLError) as error:
            yaml.load("a: [1, 2", Loader=loader)
        assert error.value.problem_mark is not None


# --- Hydra ------------------------------------------------------------------------------------------------------


def test_hydra__internal_utils_get_args_parser():
    with hydra_api("hydra._internal.utils.get_args_parser"):
        args = hydra_internals.args_parser().parse_args(["--config-dir", "mine", "-cn", "other", "a=1", "b=2"])
        assert (args.config_dir, args.config_name, args.config_path, args.overrides) == (
            "mine",
            "other",
            None,
            ["a=1", "b=2"],
        )


def test_hydra__internal_utils_create_automatic_config_search_path():
    with hydra_api("hydra._internal.utils.create_automatic_config_search_path"):
        path = hydra_internals.app_search_path("cifar_dist.app", "conf")
        paths = [element.path for element in path.get_path()]
        assert "pkg://cifar_dist/conf" in paths and "structured://" in paths, paths  # the app's configs, the store


def test_hydra__internal_config_search_path_impl_ConfigSearchPathImpl():  # noqa: N802 (Hydra's class name)
    with hydra_api("hydra._internal.config_search_path_impl.ConfigSearchPathImpl"):
        path = hydra_internals.search_path([("main", "pkg://cifar_dist.conf"), ("schema", "structured://")])
        assert [(e.provider, e.path) for e in path.get_path()] == [
            ("main", "pkg://cifar_dist.conf"),
            ("schema", "structured://"),
        ]


def test_hydra__internal_config_repository_ConfigRepository():  # noqa: N802 (Hydra's class name)
    with hydra_api("hydra._internal.config_repository.ConfigRepository (get_group_options, group_exists)"):
        repo = hydra_internals.config_repository(hydra_internals.search_path([("main", "pkg://cifar_dist.conf")]))
        assert "experiment" in hydra_internals.subgroups_of(repo, "")
        assert "fast" in hydra_internals.options_of(repo, "experiment")
        assert hydra_internals.has_group(repo, "experiment") and not hydra_internals.has_group(repo, "no_such")


def test_hydra__internal_config_loader_impl_ConfigLoaderImpl(tmp_path):  # noqa: N802 (Hydra's class name)
    (tmp_path / "mine.yaml").write_text("hydra:\n  searchpath: [pkg://somewhere]\nkey: 1\n")
    with hydra_api("hydra._internal.config_loader_impl.ConfigLoaderImpl (and its repository.load_config)"):
        loader = hydra_internals.config_loader(hydra_internals.search_path([("main", f"file://{tmp_path}")]))
        primary = hydra_internals.primary_config(loader, "mine")
        assert OmegaConf.to_container(primary) == {"hydra": {"searchpath": ["pkg://somewhere"]}, "key": 1}
        assert hydra_internals.primary_config(loader, "none_such") is None


def test_hydra_job_return__return_value():
    from hydra.core.utils import JobReturn, JobStatus

    with hydra_api("JobReturn._return_value (a failed job's exception, unraised)"):
        failed = JobReturn()
        failed.status, failed._return_value = JobStatus.FAILED, ValueError("diverged")
        assert isinstance(hydra_internals.failure_of(failed), ValueError)
        with pytest.raises(ValueError):
            failed.return_value  # noqa: B018  (the public property raises it: why failure_of reads the field)


def test_hydra_config_loader__parse_overrides_and_create_caching_repo():
    with hydra_api("ConfigLoaderImpl._parse_overrides_and_create_caching_repo"):
        loader = hydra_internals.config_loader(hydra_internals.app_search_path("cifar_dist.app", "conf"))
        parsed, repo = hydra_internals.parsed_overrides(loader, "config", ["experiment=fast", "trainer.epochs=3"])
        assert [o.key_or_group for o in parsed] == ["experiment", "trainer.epochs"]
        assert hydra_internals.has_group(repo, "experiment") and "fast" in hydra_internals.options_of(
            repo, "experiment"
        )
