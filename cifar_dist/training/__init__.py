"""Training, by what each part is:

- the loop: ``trainer.py`` (``task=train``'s function), its Keras callbacks (``callbacks.py``, the stop on a
  signal: ``preemption.py``) and the files it leaves in the run dir (``artifacts.py``; checkpoints are
  ``rundir/checkpoints.py``);
- ``engines/``: what makes N processes one data-parallel job (docs/engines.md);
- ``recipe/``: the recipe pieces (schedules, SGDW, lookahead, BatchNorm sync) and their hooks in the loop;
  ``optimizers.py``, the optimizer factories the configs name by ``_target_``, stays here with the trainer;
- ``process/``: the process set-up before any model is built (Horovod/TensorFlow, threads, kernels, seeds).
"""
