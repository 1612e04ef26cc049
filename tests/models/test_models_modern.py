"""model=resnet9 and model=airbench: their layers and parameters, and the building blocks they share."""

import collections

import numpy as np
import pytest
import tensorflow as tf
from hydra.utils import instantiate
from omegaconf import OmegaConf

import cifar_dist  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from cifar_dist.config.schema import AirbenchConfig, ResNet9Config
from cifar_dist.models.blocks import PatchWhitening, Scale, adapt, partial_identity
from helpers.cifar_fixtures import sample_batches

pytestmark = pytest.mark.both_stacks  # also run on the current stack (Makefile: test-current)


def kinds(model):
    return collections.Counter(type(layer).__name__ for layer in model.layers)


def resnet9_parameters(w: int) -> int:
    """Page's ResNet-9 by hand: 3x3 convs w, 2w, 2x(2w) residual, 4w, 8w, 2x(8w) residual; BN 4 per channel;
    linear 8w x 10."""
    convs = 27 * w + 9 * w * 2 * w + 2 * 9 * (2 * w) ** 2 + 9 * 2 * w * 4 * w + 9 * 4 * w * 8 * w + 2 * 9 * (8 * w) ** 2
    bn = 4 * (w + 2 * w + 2 * 2 * w + 4 * w + 8 * w + 2 * 8 * w)
    return convs + bn + 8 * w * 10


@pytest.mark.parametrize("width", [64, 16])
def test_resnet9_layers_and_parameter_count(width):
    model = instantiate(OmegaConf.structured(ResNet9Config(width=width)), num_classes=10)
    assert resnet9_parameters(64) == 6_577_600  # Page's ResNet-9: 6.58 M parameters
    assert model.count_params() == resnet9_parameters(width)
    assert kinds(model) == {
        "InputLayer": 1,
        "Conv2D": 8,
        "BatchNormalization": 8,
        "Activation": 9,
        "MaxPooling2D": 3,
        "Add": 2,
        "GlobalMaxPooling2D": 1,
        "Dense": 1,
        "Scale": 1,
    }
    assert len(model.layers) == 34
    assert model.output_shape == (None, 10)
    assert [c.filters for c in model.layers if isinstance(c, tf.keras.layers.Conv2D)] == [
        width,
        2 * width,
        2 * width,
        2 * width,
        4 * width,
        8 * width,
        8 * width,
        8 * width,
    ]


def test_airbench_layers_and_parameter_count():
    model = instantiate(OmegaConf.structured(AirbenchConfig()), num_classes=10)
    # airbench94's net: 1,973,944 parameters, 288 of them the frozen whitening filters,
    # 2 x 3,136 the BatchNorm moving statistics (BN has no trained scale, as in airbench).
    assert model.count_params() == 1_973_944
    non_trainable = sum(int(np.prod(v.shape)) for v in model.non_trainable_weights)
    assert non_trainable == 288 + 2 * (64 + 64 + 256 + 256 + 256 + 256)
    assert kinds(model) == {
        "InputLayer": 1,
        "PatchWhitening": 1,
        "Activation": 8,
        "Conv2D": 6,
        "MaxPooling2D": 3,
        "BatchNormalization": 6,
        "GlobalMaxPooling2D": 1,
        "Dense": 1,
        "Scale": 1,
    }
    assert len(model.layers) == 28
    small = instantiate(OmegaConf.structured(AirbenchConfig(widths=[32, 64, 64])), num_classes=10)
    assert (
        small.count_params()
        == 312 + (9 * 24 * 32 + 9 * 32 * 32 + 9 * 32 * 64 + 3 * 9 * 64 * 64) + 3 * (2 * 32 + 4 * 64) + 640
    )


def test_partial_identity_passes_the_first_channels_through():
    kernel = partial_identity(tf.keras.initializers.HeUniform(seed=1)((3, 3, 4, 6)).numpy())
    x = np.random.default_rng(0).random((1, 8, 8, 4)).astype(np.float32)
    y = tf.nn.conv2d(x, kernel, 1, "SAME").numpy()
    np.testing.assert_allclose(y[..., :4], x, rtol=1e-6)  # identity on the first in-channels outputs
    assert np.abs(kernel[..., 4:]).sum() > 0  # the others keep the base (He) initialisation


def test_patch_whitening_whitens_the_training_patches():
    rng = np.random.default_rng(0)
    base = rng.random((200, 32, 32, 1)).astype(np.float32)
    images = np.concatenate(
        [base, 0.5 * base + 0.1 * rng.random((200, 32, 32, 1)), base**2], axis=-1
    )  # correlated channels
    layer = PatchWhitening(2, epsilon=1e-9)  # no regularisation: exactly white
    adapt(tf.keras.Sequential([tf.keras.Input((32, 32, 3)), layer]), images)
    out = layer(tf.constant(images)).numpy().reshape(-1, 24)[:, :12]  # the basis; the other 12 are its negative
    np.testing.assert_allclose(out.mean(axis=0), 0, atol=1e-3)
    cov = np.cov(out, rowvar=False)
    np.testing.assert_allclose(np.diag(cov), 1, atol=1e-3)
    assert np.abs(cov - np.diag(np.diag(cov))).max() < 1e-3
    assert not layer.kernel.trainable and layer.bias.trainable


def test_patch_whitening_fits_the_same_filters_as_numpys_float64_covariance():
    """The fit's statistics come from TensorFlow's kernels (fast); on the packaged sample's real images the
    filters and bias are those of the plain numpy float64 recipe (airbench's), to the float32 bit."""
    train, _ = sample_batches(per_batch=250)
    images = np.concatenate([x for x, _ in train]).astype(np.float32) / 255.0
    layer = PatchWhitening(2)
    adapt(tf.keras.Sequential([tf.keras.Input((32, 32, 3)), layer]), images)
    patches = tf.image.extract_patches(images, [1, 2, 2, 1], [1, 1, 1, 1], [1, 1, 1, 1], "VALID").numpy()
    patches = patches.reshape(-1, 12).astype(np.float64)
    eigenvalues, eigenvectors = np.linalg.eigh(np.cov(patches, rowvar=False))
    basis = eigenvectors / np.sqrt(eigenvalues + layer.epsilon)
    filters = np.concatenate([basis, -basis], axis=1)
    np.testing.assert_array_equal(layer.kernel.numpy(), filters.reshape(2, 2, 3, 24).astype(np.float32))
    np.testing.assert_array_equal(layer.bias.numpy(), (-patches.mean(axis=0) @ filters).astype(np.float32))


def test_a_saved_model_with_the_blocks_loads(tmp_path):
    model = instantiate(OmegaConf.structured(AirbenchConfig(widths=[8, 8, 8])), num_classes=10)
    path = tmp_path / "m.h5"
    model.save(path, save_format="h5")
    loaded = tf.keras.models.load_model(path, compile=False)
    x = np.random.default_rng(0).random((2, 32, 32, 3)).astype(np.float32)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-5)
    assert any(isinstance(layer, Scale) for layer in loaded.layers)
    first = next(layer for layer in model.layers if isinstance(layer, tf.keras.layers.Conv2D))
    assert first.kernel.numpy()[1, 1, 0, 0] == 1.0  # identity-initialised (airbench)
