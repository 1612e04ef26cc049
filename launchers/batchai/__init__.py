"""``launcher=batchai``: run the job on an Azure Batch AI cluster as a Horovod job.

One module per job: ``config`` (schema and settings), ``job`` (the job body,
job.json and az commands, pure), ``schema`` (offline schema check),
``staging`` (wheel, node config, entry script), ``storage`` (the file share),
``client`` (Batch AI's ARM API), ``monitor`` (following a submitted job),
``launcher`` (the Launcher), ``node_entry`` (what runs on the nodes).
Nothing here imports an Azure SDK at import time.
"""
