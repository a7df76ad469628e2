"""PyTorch (Kubeflow PyTorchJob contract): `Master` + `Worker`, or 0.2.3's single `worker`.

Every replica gets the `torch.distributed` env:// variables and their torchrun (`PET_*`)
aliases. Rank 0 is the master (or worker 0); worker i has rank i + 1 beside a master.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..experiment.model import Spec
from .base import Endpoint, Env, Group, Names, Plan, Slot, coordinated, master_env, ranked

PORT = 23456


def plan(spec: Spec, names: Names) -> Plan:
    if spec.origin is not None:
        return kubeflow_plan(spec, names)
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


def kubeflow_plan(spec: Spec, names: Names) -> Plan:
    """A `kubeflow.org/v1` PyTorchJob: each replica sees exactly the Training Operator's env
    (release-1.9 `pkg/controller.v1/pytorch/envvar.go`, `master.go`, `elastic.go`), host names
    aside. With a Master, workers wait for it and follow it; with workers alone, under an
    elastic policy they wait for and follow worker 0 (the rendezvous endpoint), else each
    runs on its own, as the operator gives them no peer."""
    origin = spec.origin
    assert origin is not None
    options, slots = origin.fields, ranked(spec.types, ("Master", "Worker"))
    elastic = options.get("elasticPolicy")
    nproc = options.get("nprocPerNode")
    if nproc is None and (elastic is None or "nProcPerNode" not in elastic):
        nproc = "auto"  # the operator's default
    total = sum(slot.count for slot in slots)
    world = total * (int(nproc) if nproc and nproc.isdigit() else 1)

    def port(type_name: str) -> int:
        return origin.port(type_name, PORT_NAME)

    master = Endpoint(names.host("master", 0), port("Master")) if "Master" in origin.kept else None
    rdzv = None
    if elastic is not None and "Worker" in origin.kept:
        host = elastic.get("rdzvHost") or names.host("worker", 0)
        rdzv = Endpoint(host, elastic.get("rdzvPort") or port("Worker"))

    def env(slot: Slot) -> tuple[Env, ...]:
        result = [Env("PYTHONUNBUFFERED", "1")]
        if master:
            result += [
                Env("MASTER_PORT", str(master.port)),
                Env("PET_MASTER_PORT", str(master.port)),
                Env("MASTER_ADDR", master.host),
                Env("PET_MASTER_ADDR", master.host),
                Env("WORLD_SIZE", str(world)),
                Env.index("RANK", slot.offset),
                Env.index("PET_NODE_RANK", slot.offset),
            ]
        if nproc is not None:
            result.append(Env("PET_NPROC_PER_NODE", nproc))
        if elastic is None:
            return (*result, Env("PET_NNODES", str(total)))
        return (*result, *elastic_env(elastic, rdzv, spec))

    follows_rdzv = rdzv is not None and elastic is not None and "rdzvHost" not in elastic
    plan = _shaped(slots, master or (rdzv if follows_rdzv else None), env, port)
    if elastic is None:
        return plan
    workers = tuple(s.role for s in slots if s.replica_type == "Worker")
    return dataclasses.replace(plan, rejoining=workers)  # (torchrun's agents re-form)


def _shaped(
    slots: list[Slot],
    coordinator: Endpoint | None,
    env: Callable[[Slot], tuple[Env, ...]],
    port: Callable[[str], int],
) -> Plan:
    """The ranks following their coordinator (the master, or worker 0's rendezvous), or,
    without one, workers that each run alone, as the operator gives them no peer."""
    if coordinator is not None:
        return coordinated("pytorch", slots, coordinator, env, port_name=PORT_NAME)
    (slot,) = slots
    group = Group(
        role=slot.role,
        replica_type=slot.replica_type,
        spec=slot.spec,
        env=env(slot),
        ports=((PORT_NAME, port(slot.replica_type)),),  # (its one type: Worker)
    )
    return Plan(framework="pytorch", groups=(group,), entry_point=slot.role, independent=True)


PORT_NAME = "pytorchjob-port"  # the operator's port name (its default number is PORT)


def elastic_env(elastic: dict, rdzv: Endpoint | None, spec: Spec) -> list[Env]:
    """The operator's `PET_*` variables of an elastic policy, in its order."""
    worker = spec.types.get("Worker")
    # The operator's defaulting: one bound given is both; none, both are the workers' count.
    low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
    low = low or high or (worker.count if worker else 0)
    nnodes = f"{low}:{high or low}"
    env = [
        Env("PET_RDZV_ENDPOINT", str(rdzv) if rdzv else ""),
        Env("PET_RDZV_BACKEND", elastic.get("rdzvBackend", "c10d")),
        Env("PET_NNODES", nnodes),
    ]
    if "maxRestarts" in elastic:
        env.append(Env("PET_MAX_RESTARTS", str(elastic["maxRestarts"])))
    if "nProcPerNode" in elastic:
        env.append(Env("PET_NPROC_PER_NODE", str(elastic["nProcPerNode"])))
    if "rdzvId" in elastic:
        env.append(Env("PET_RDZV_ID", elastic["rdzvId"]))
    if conf := elastic.get("rdzvConf"):
        env.append(Env("PET_RDZV_CONF", ",".join(f"{c['key']}={c.get('value', '')}" for c in conf)))
    if elastic.get("standalone"):
        env.append(Env("PET_STANDALONE", ""))
    return env
