"""Models, one module each, built by ``hydra.utils.instantiate(cfg.model)``.

A model builder takes its config fields as keyword arguments and returns an
uncompiled ``tf.keras.Model``; the trainer compiles it. Each built-in model's
option (``model=<name>``: its arguments, typed, with their defaults) is a
dataclass in ``cifar_dist/config.py``; README "Adding a model".
"""
