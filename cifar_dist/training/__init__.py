"""Training: Horovod set-up, the training loop and its callbacks."""
