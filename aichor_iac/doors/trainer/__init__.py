"""Kubeflow Trainer v2's TrainJob, with its runtimes and plugins."""
