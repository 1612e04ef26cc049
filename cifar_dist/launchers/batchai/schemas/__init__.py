"""JSON schemas published by the Batch AI service (API 2018-05-01), shipped as package data.

``horovod-2018-05-01.json`` is ``schemas/2018-05-01/horovod.json`` of the public
Azure/BatchAI repository (MIT licence, see LICENSE beside it).
"""
