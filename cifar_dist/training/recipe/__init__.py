"""The recipe pieces any model can use, each a no-op at the seed's defaults: lr schedules (``schedules.py``),
SGDW (``sgdw.py``; Keras 3's twins of the optimizers: ``keras3_optimizers.py``), lookahead (``lookahead.py``),
BatchNorm statistics averaged over the ranks (``batchnorm.py``), and ``hooks.py``, the few calls that put them
into the loop (``trainer.py``). The optimizer factories stay in ``training/optimizers.py``: configs name them
(``_target_``)."""
