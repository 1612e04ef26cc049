"""cifar_dist: data-parallel CIFAR-10 training with Keras on Horovod or JAX, configured by Hydra."""

import os

from cifar_dist.common.keras_flavor import LEGACY_KERAS_ENV, legacy_keras

os.environ[LEGACY_KERAS_ENV] = legacy_keras(os.environ)  # before anything imports TensorFlow (keras_flavor.py)

__version__ = "0.1.0"
