"""XGBoost (Kubeflow XGBoostJob contract): `Master` + `Worker`, or 0.2.3's single `worker`.

Rank 0 runs the Rabit tracker on `MASTER_ADDR:MASTER_PORT`; the `DMLC_*` aliases let
`xgboost.collective.CommunicatorContext(**os.environ-derived args)` and older Rabit scripts
connect unchanged. `WORKER_ADDRS` lists the `Worker` group's hosts.
"""

from __future__ import annotations

from ..manifest import Spec
from .base import Endpoint, Env, Names, Plan, Slot, coordinated, master_env, ranked

PORT = 9999


def plan(spec: Spec, names: Names) -> Plan:
    slots = ranked(spec.types, ("Master", "Worker"))
    coordinator = Endpoint(names.host(slots[0].role, 0), PORT)
    workers = slots[-1].spec.count if slots[-1].role == "worker" else 0
    worker_addrs = ",".join(names.host("worker", i) for i in range(workers))

    def env(slot: Slot) -> tuple[Env, ...]:
        return (
            *master_env(coordinator, slots, slot),
            Env("WORKER_PORT", str(PORT)),
            Env("WORKER_ADDRS", worker_addrs),
            Env("DMLC_TRACKER_URI", "$(MASTER_ADDR)"),
            Env("DMLC_TRACKER_PORT", "$(MASTER_PORT)"),
            Env.index("DMLC_TASK_ID", slot.offset),
            Env("DMLC_NUM_WORKER", "$(WORLD_SIZE)"),
            Env("PYTHONUNBUFFERED", "1"),
        )

    return coordinated("xgboost", slots, coordinator, env)
