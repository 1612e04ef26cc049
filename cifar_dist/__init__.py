"""cifar_dist: data-parallel CIFAR-10 training with Horovod + Keras, configured by Hydra."""
import os

# Horovod 0.28 supports Keras 2 only. TensorFlow >= 2.16 binds tf.keras to
# Keras 3 unless this is set before TensorFlow is imported; with tf-keras
# installed it binds tf.keras to Keras 2. cifar_dist refuses to train on
# Keras 3 (see training/horovod_env.py), so an explicit "0" is not overridden.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

__version__ = "0.1.0"
