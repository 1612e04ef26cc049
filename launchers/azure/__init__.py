"""What both Azure launchers (launcher=azureml and the retired launcher=batchai)
share: credentials (``credentials``), the one-line wording of azure-core's errors
(``errors``), azure-core's retry and transport settings (``retries``), the
deterministic job names (``job_names``) and this package's source files a job ships
(``package_sources``). Neither launcher's package imports the other's.
"""
