"""Front doors: each reads one kind of input (an AIchor manifest, a Kubeflow v1 or KubeRay
custom resource, a Python function) into the neutral `aichor_iac.experiment.Experiment`.
`router` picks the door for a file; `load`, `parse` and `validate` are its ways in (`load_all`
and `parse_all` for a file or directory of several experiments).
"""

from .router import experiment_of, load, load_all, parse, parse_all, validate

__all__ = ["experiment_of", "load", "load_all", "parse", "parse_all", "validate"]
