"""A local stand-in for Azure Machine Learning as azure-ai-ml sees it (ARM
workspace, computes, code and environment versions, jobs, the run history
and the workspace's blob storage): test fixtures, not part of the package.
Importable as ``fake_azureml`` with tests/ on sys.path."""
