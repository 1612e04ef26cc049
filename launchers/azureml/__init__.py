"""``launcher=azureml``: the Batch AI job on Batch AI's successor, as an Azure ML
v2 command job with MPI distribution, through the azure-ai-ml SDK (imported
only inside the launcher's methods)."""
