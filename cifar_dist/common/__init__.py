"""The leaf helpers every part of cifar_dist uses; they import nothing of cifar_dist outside this folder.

``errors.py`` (the one exception family; ``sweep_errors.py``: a sweep's, which Hydra prints itself),
``atomic_files.py`` (writes a crash
never leaves half done), ``results.py`` (the one reader of a run dir's result
files, and a job's outcome as a sweep point), ``redaction.py`` (what counts as
a secret, and text with them masked), ``environment.py`` (the environment read
whole), ``external_commands.py`` (a short command's output, bounded),
``process_role.py`` (which role this process plays), ``console_line.py``
(whether the console line is open), ``keras_flavor.py`` and ``keras_ops.py``
(the two Keras flavours and the few tensor ops that differ between them),
``log_tail.py`` (a log's last lines, as every launcher prints them) and
``engine_facts.py`` (what each engine is, read without importing any).
"""
