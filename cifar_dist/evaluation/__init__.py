"""task=evaluate: score a trained model on a data set or on given images, sharded over the ranks.

``task.py`` is the task function (``evaluate``, the ``_target_`` of
``task=evaluate``) and the sharded scoring; ``inputs.py`` finds the model and
reads the images, ``model_trust.py`` decides whether a model file's code may
be loaded, ``report.py`` writes evaluation.json, confusion_matrix.png and
predictions.csv. Test-time augmentation is ``models/tta.py`` (the trainer's final
test uses it too).
"""
