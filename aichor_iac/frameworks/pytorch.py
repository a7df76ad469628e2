"""PyTorch (Kubeflow PyTorchJob contract): `Master` + `Worker`, or 0.2.3's single `worker`.

Every replica gets the `torch.distributed` env:// variables and their torchrun (`PET_*`)
aliases. Rank 0 is the master (or worker 0); worker i has rank i + 1 beside a master.
"""

from __future__ import annotations

from ..manifest import Spec
from .base import Endpoint, Env, Names, Plan, Slot, coordinated, master_env, ranked

PORT = 23456


def plan(spec: Spec, names: Names) -> Plan:
    slots = ranked(spec.types, ("Master", "Worker"))
    coordinator = Endpoint(names.host(slots[0].role, 0), PORT)

    def env(slot: Slot) -> tuple[Env, ...]:
        return (
            *master_env(coordinator, slots, slot),
            Env("PET_MASTER_ADDR", "$(MASTER_ADDR)"),
            Env("PET_MASTER_PORT", "$(MASTER_PORT)"),
            Env("PET_NNODES", "$(WORLD_SIZE)"),
            Env.index("PET_NODE_RANK", slot.offset),
            Env("PET_NPROC_PER_NODE", str(slot.spec.resources.gpus or 1)),
            Env("PYTHONUNBUFFERED", "1"),
        )

    return coordinated("pytorch", slots, coordinator, env)
