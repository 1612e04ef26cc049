"""A training process's set-up, before any model is built: Horovod and TensorFlow (``horovod_env.py``), CPU
threads (``threads.py``) and kernels (``hardware.py``), TensorFlow's console (``tf_console.py``), a concurrent
sweep's MPI group (``mpi_groups.py``), Ctrl-C (``interrupts.py``) and what Keras must know first (seeds, dtype
policy: ``keras_setup.py``)."""
