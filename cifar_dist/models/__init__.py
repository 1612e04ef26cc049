"""Models, one module each, built by ``hydra.utils.instantiate(cfg.model)``.

A model builder takes its config fields as keyword arguments and returns an
uncompiled Keras model (``tf.keras`` or Keras 3); the trainer compiles it. The
built-ins also take ``keras``, the Keras module to build with (None:
``tf.keras``), written once for both through ``blocks.py``. Each built-in model's
option (``model=<name>``: its arguments, typed, with their defaults) is a
dataclass in ``cifar_dist/config/schema.py``. A user's own model is a builder in their
own module named by ``_target_`` in their ``model/<name>.yaml``, checked by
``builder.py``; docs/models.md. ``tta.py`` wraps a trained model for
test-time augmentation (the trainer's final test and ``task=evaluate``).
"""
