"""Front doors: each reads one kind of input (an AIchor manifest, a Kubeflow v1 or KubeRay
custom resource, a Python function) into the neutral `aichor_iac.experiment.Experiment`.
`router` picks the door for a file; `load`, `parse` and `validate` are its three ways in.
"""

from .router import experiment_of, load, parse, validate

__all__ = ["experiment_of", "load", "parse", "validate"]
