"""The neutral experiment model: what every front door produces and every layer below reads.

`groups` (replica groups, resources, each framework's groups), `model` (`Spec`, `Experiment`),
`rules` (checks across fields), `origin` (a custom resource's pod templates and options, kept
as written). Pure data: no Pulumi or Kubernetes import.
"""

from .model import Experiment, Spec

__all__ = ["Experiment", "Spec"]
