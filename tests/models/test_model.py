"""The model group builds exactly the seed tutorial's CNN."""

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

import cifar_dist  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from cifar_dist.config.schema import SeedCnnConfig

pytestmark = pytest.mark.both_stacks  # also run on the current stack (Makefile: test-current)

SEED_LAYERS = [
    ("Conv2D", 32),
    ("Activation", "relu"),
    ("Conv2D", 32),
    ("Activation", "relu"),
    ("MaxPooling2D", None),
    ("Dropout", 0.25),
    ("Conv2D", 64),
    ("Activation", "relu"),
    ("Conv2D", 64),
    ("Activation", "relu"),
    ("MaxPooling2D", None),
    ("Dropout", 0.25),
    ("Flatten", None),
    ("Dense", 512),
    ("Activation", "relu"),
    ("Dropout", 0.5),
    ("Dense", 10),
    ("Activation", "softmax"),
]


def _describe(layer):
    cfg = layer.get_config()
    kind = type(layer).__name__
    detail = cfg.get("filters") or cfg.get("units") or cfg.get("rate") or cfg.get("activation")
    if kind in ("MaxPooling2D", "Flatten"):
        detail = None
    return kind, detail


def test_seed_cnn_layers_and_parameter_count():
    model = instantiate(OmegaConf.structured(SeedCnnConfig), num_classes=10)
    assert [_describe(layer) for layer in model.layers] == SEED_LAYERS
    # The seed's model.summary(): 1,250,858 trainable parameters.
    assert model.count_params() == 1_250_858
    assert model.output_shape == (None, 10)
    convs = [layer for layer in model.layers if type(layer).__name__ == "Conv2D"]
    assert [c.get_config()["padding"] for c in convs] == ["same", "valid", "same", "valid"]
    assert all(c.get_config()["kernel_size"] == (3, 3) for c in convs)
