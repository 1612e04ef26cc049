"""Models, one module each, built by ``hydra.utils.instantiate(cfg.model)``.

A model builder takes its config fields as keyword arguments and returns an
uncompiled ``tf.keras.Model``; the trainer compiles it. Each built-in model's
option (``model=<name>``: its arguments, typed, with their defaults) is a
dataclass in ``cifar_dist/config.py``. A user's own model is a builder in their
own module named by ``_target_`` in their ``model/<name>.yaml``, checked by
``builder.py``; docs/models.md.
"""
