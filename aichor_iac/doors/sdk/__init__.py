"""The Kubeflow SDK's Python ways in: a function, a CustomTrainer, optimize()."""
