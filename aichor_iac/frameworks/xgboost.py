"""XGBoost (Kubeflow XGBoostJob contract): `Master` + `Worker`, or 0.2.3's single `worker`.

Rank 0 runs the Rabit tracker on `MASTER_ADDR:MASTER_PORT`; the `DMLC_*` aliases let
`xgboost.collective.CommunicatorContext(**os.environ-derived args)` and older Rabit scripts
connect unchanged. `WORKER_ADDRS` lists the `Worker` group's hosts.
"""

from __future__ import annotations

from ..experiment.model import Spec
from .base import Endpoint, Env, Names, Plan, Slot, coordinated, master_env, ranked, world_size

PORT = 9999


def plan(spec: Spec, names: Names) -> Plan:
    if spec.origin is not None:
        return kubeflow_plan(spec, names)
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


PORT_NAME = "xgboostjob-port"  # the operator's port name (its default number is PORT)


def kubeflow_plan(spec: Spec, names: Names) -> Plan:
    """A `kubeflow.org/v1` XGBoostJob: the Training Operator's env exactly (release-1.9
    `pkg/controller.v1/xgboost/xgboost.go`), host names aside: the master's address and port,
    the world size, the rank (workers after the master), and with workers their port and
    every worker's host. Workers wait for the master's port and follow it."""
    origin = spec.origin
    assert origin is not None
    slots = ranked(spec.types, ("Master", "Worker"))
    coordinator = Endpoint(names.host("master", 0), origin.port("Master", PORT_NAME))
    total = world_size(slots)
    workers: tuple[Env, ...] = ()
    if total > 1:
        hosts = ",".join(names.host("worker", i) for i in range(total - 1))
        workers = (
            Env("WORKER_PORT", str(origin.port("Worker", PORT_NAME))),
            Env("WORKER_ADDRS", hosts),
        )

    def env(slot: Slot) -> tuple[Env, ...]:
        return (
            Env("MASTER_PORT", str(coordinator.port)),
            Env("MASTER_ADDR", coordinator.host),
            Env("WORLD_SIZE", str(total)),
            Env.index("RANK", slot.offset),
            Env("PYTHONUNBUFFERED", "1"),
            *workers,
        )

    return coordinated("xgboost", slots, coordinator, env, port_name=PORT_NAME)
