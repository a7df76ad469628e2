"""Framework knowledge: one pure `plan(spec, names) -> Plan` per operator."""

from __future__ import annotations

from collections.abc import Callable

from ..experiment.model import Spec
from . import jax, jobset, kuberay, mpi, paddle, pytorch, ray, tf, xgboost
from .base import Endpoint, Env, Group, Names, Plan

Planner = Callable[[Spec, Names], Plan]


def _ray(spec: Spec, names: Names) -> Plan:
    """A KubeRay custom resource as KubeRay runs it; else AIchor's ray or kuberay operator."""
    return (kuberay if spec.origin is not None else ray).plan(spec, names)


PLANNERS: dict[str, Planner] = {
    "pytorch": pytorch.plan,
    "xgboost": xgboost.plan,
    "jax": jax.plan,
    "paddle": paddle.plan,
    "tf": tf.plan,
    "mpi": mpi.plan,
    "ray": _ray,
    "kuberay": _ray,
    "jobset": jobset.plan,
    "batchjob": jobset.batch_plan,
}

__all__ = ["PLANNERS", "Endpoint", "Env", "Group", "Names", "Plan", "Planner"]
