"""JSON schemas published by the Batch AI service (API 2018-05-01), shipped as package data.

``horovod-2018-05-01.json`` and ``cluster-2018-05-01.json`` are
``schemas/2018-05-01/horovod.json`` and ``cluster.json`` of the public
Azure/BatchAI repository, unchanged (MIT licence, see LICENSE beside them).
"""
