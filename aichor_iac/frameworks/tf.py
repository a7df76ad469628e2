"""TensorFlow (Kubeflow TFJob contract): `Chief`, `PS`, `Worker`, `Evaluator`.

Every replica gets `TF_CONFIG` (cluster map of `<host>:2222` per type, the evaluator left out
of it, its own task type and index, `"environment": "cloud"`), except when the experiment is a
single pod. The chief, or worker 0 without a chief, is the entry point: the other replicas
(parameter servers, which never exit on their own, included) stop once it has ended.
"""

from __future__ import annotations

import json

from ..experiment.model import Spec
from .base import INDEX_VAR, Env, Group, Names, Plan, ranked, world_size

PORT = 2222
PORT_NAME = "tfjob-port"  # the Training Operator's TFJob port name
ORDER = ("Chief", "PS", "Worker", "Evaluator")
IN_CLUSTER = ("chief", "ps", "worker")
_INDEX = "__index__"


def plan(spec: Spec, names: Names) -> Plan:
    """A manifest's replicas, or a `kubeflow.org/v1` TFJob's: the Training Operator's
    TF_CONFIG exactly (release-1.9 `pkg/controller.v1/tensorflow/tensorflow.go`: every type in
    its cluster, the evaluator too, each on its `tfjob-port`), host names aside."""
    slots = ranked(spec.types, ORDER)
    origin, port_name = spec.origin, "tensorflow" if spec.origin is None else PORT_NAME
    ports = {
        slot.role: origin.port(slot.replica_type, PORT_NAME) if origin else PORT for slot in slots
    }
    cluster = {  # keys sorted, as Go writes a map
        slot.role: [f"{names.host(slot.role, i)}:{ports[slot.role]}" for i in range(slot.count)]
        for slot in sorted(slots, key=lambda s: s.role)
        if slot.role in IN_CLUSTER or origin
    }
    entry = "chief" if "chief" in cluster else "worker"
    entry_host = names.host(entry, 0)
    groups = []
    for slot in sorted(slots, key=lambda s: s.role != entry):  # the entry point first
        env: tuple[Env, ...] = ()
        if world_size(slots) > 1:
            env = (Env("TF_CONFIG", tf_config(cluster, slot.role)),)
        only_entry = slot.role == entry and slot.spec.count == 1
        groups.append(
            Group(
                role=slot.role,
                replica_type=slot.replica_type,
                spec=slot.spec,
                env=env,
                ports=((port_name, ports[slot.role]),),
                follows=None if only_entry else entry_host,
                after=() if slot.role == entry else (entry,),
            )
        )
    return Plan(
        framework="tf",
        groups=tuple(groups),
        entry_point=entry,
        addresses={entry: f"{entry_host}:{ports[entry]}"},
    )


def tf_config(cluster: dict[str, list[str]], role: str) -> str:
    """TF_CONFIG whose task index Kubernetes fills in from the pod's completion index."""
    text = json.dumps(
        {"cluster": cluster, "task": {"type": role, "index": _INDEX}, "environment": "cloud"},
        separators=(",", ":"),
    )
    return text.replace(f'"{_INDEX}"', f"$({INDEX_VAR})")
