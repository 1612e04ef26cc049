"""experiment=fast: a documented recipe on top of the seed's defaults, not a replacement of them."""

from cifar_dist.config.validation import validate
from helpers.cli import compose_cfg


def test_fast_changes_the_schedule_but_not_the_model_data_or_augmentation():
    seed, fast = compose_cfg(), compose_cfg("experiment=fast")
    validate(fast)
    assert fast.model == seed.model and fast.data == seed.data
    assert fast.optimizer._target_.endswith(".adam") and fast.optimizer.lr == 5e-4
    t = fast.trainer
    assert (t.epoch_policy.value, t.batch_size, t.epochs, t.precision.value) == ("shard", 64, 12, "auto")
    assert t.warmup_epochs == 1 and list(t.lr_decay_epochs) == [9]
    # Whatever is not part of the recipe stays the seed's.
    assert (t.lr_scaling, t.compression, t.jit_compile, t.seed) == (
        seed.trainer.lr_scaling,
        seed.trainer.compression,
        seed.trainer.jit_compile,
        seed.trainer.seed,
    )


def test_fast_leaves_room_for_the_users_overrides():
    cfg = compose_cfg("experiment=fast", "data=sample", "trainer.precision=float32", "trainer.epochs=20")
    assert cfg.data.name == "sample" and cfg.trainer.precision.value == "float32" and cfg.trainer.epochs == 20
