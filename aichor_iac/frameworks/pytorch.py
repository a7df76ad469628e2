"""PyTorch (Kubeflow PyTorchJob contract): `Master` + `Worker`, or 0.2.3's single `worker`.

Every replica gets the `torch.distributed` env:// variables and their torchrun (`PET_*`)
aliases. Rank 0 is the master (or worker 0); worker i has rank i + 1 beside a master.
"""

from __future__ import annotations

from ..manifest import Spec
from .base import Endpoint, Env, Group, Names, Plan

PORT = 23456


def plan(spec: Spec, names: Names) -> Plan:
    types = spec.types
    if types.Master is not None:
        layout = [("master", "Master", types.Master, 0), ("worker", "Worker", types.Worker, 1)]
    else:
        layout = [("worker", "Worker", types.Worker, 0)]
    layout = [entry for entry in layout if entry[2] is not None and entry[2].count > 0]
    coordinator_role = layout[0][0]
    coordinator = Endpoint(names.host(coordinator_role, 0), PORT)
    world_size = sum(entry[2].count for entry in layout)

    groups = []
    for role, replica_type, group, offset in layout:
        gpus = group.resources.gpus
        env = (
            Env("MASTER_ADDR", coordinator.host),
            Env("MASTER_PORT", str(PORT)),
            Env("WORLD_SIZE", str(world_size)),
            Env.index("RANK", offset),
            Env("PET_MASTER_ADDR", "$(MASTER_ADDR)"),
            Env("PET_MASTER_PORT", "$(MASTER_PORT)"),
            Env("PET_NNODES", "$(WORLD_SIZE)"),
            Env.index("PET_NODE_RANK", offset),
            Env("PET_NPROC_PER_NODE", str(gpus or 1)),
            Env("PYTHONUNBUFFERED", "1"),
        )
        # Everyone but the master waits for and follows rank 0 (worker 0 of the single-group
        # shape is rank 0 itself: the engine never makes a replica wait for or follow itself).
        peer = role != "master"
        groups.append(
            Group(
                role=role,
                replica_type=replica_type,
                spec=group,
                env=env,
                ports=(("pytorch", PORT),),
                waits_for=coordinator if peer else None,
                follows=coordinator.host if peer else None,
                after=(coordinator_role,) if role != coordinator_role else (),
            )
        )
    return Plan(
        framework="pytorch",
        groups=tuple(groups),
        entry_point=coordinator_role,
        addresses={coordinator_role: str(coordinator)},
    )
