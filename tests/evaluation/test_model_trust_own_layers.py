"""task=evaluate's code check accepts this package's own layers (resnet9/airbench), nothing else new."""

from cifar_dist.evaluation.model_trust import builtin_names, code_in_config, own_layers


def _model(*layers):
    return {"class_name": "Functional", "config": {"layers": list(layers)}}


def test_own_layers_are_the_registered_blocks():
    assert {"cifar_dist>Scale", "cifar_dist>PatchWhitening"} <= own_layers()


def test_a_model_of_own_layers_runs_no_foreign_code():
    config = _model(
        {"class_name": "cifar_dist>Scale", "config": {"name": "scale", "factor": 0.125}},
        {"class_name": "Conv2D", "config": {"name": "conv"}, "module": "tf_keras.layers"},
    )
    assert code_in_config(config, builtin_names(), own_layers()) == []
    # Without this package's layers known, the same file would be refused.
    assert code_in_config(config, builtin_names()) == ["cifar_dist>Scale 'scale'"]


def test_lambda_and_look_alikes_are_still_refused():
    config = _model(
        {"class_name": "Lambda", "config": {"name": "evil"}},
        {"class_name": "Scale", "config": {"name": "fake"}, "module": "evil.layers", "registered_name": "evil>Scale"},
    )
    assert code_in_config(config, builtin_names(), own_layers()) == ["Lambda 'evil'", "Scale 'fake'"]
