"""Models, one module each, built by ``hydra.utils.instantiate(cfg.model)``.

A model builder takes its config fields as keyword arguments and returns an
uncompiled ``tf.keras.Model``; the trainer compiles it. To add one, write
``models/<name>.py`` with a ``build(...)`` and ``conf/model/<name>.yaml``
with ``_target_: cifar_dist.models.<name>.build``.
"""
