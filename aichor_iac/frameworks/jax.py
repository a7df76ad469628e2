"""JAX (AIchor JAX operator contract): `Worker` × N processes, process 0 coordinates.

AIchor scripts read the `JAXOPERATOR_*` names; the `JAX_*` aliases are there for scripts that
pass them to `jax.distributed.initialize(coordinator_address=…, num_processes=…, process_id=…)`
(JAX reads only `JAX_COORDINATOR_ADDRESS` itself: without arguments it takes the count and id
from Slurm, Open MPI, TPU metadata or the Kubernetes API, none of which our pods give it).
A single process coordinates itself on the loopback address. With a multi-host TPU topology,
`count` is the number of slices: each slice is one Job of as many processes as it has hosts,
with GKE's TPU variables (`tpu_env`).
"""

from __future__ import annotations

from ..manifest import Spec
from .base import Endpoint, Env, Names, Plan, Slot, coordinated, ranked, tpu_env, world_size

PORT = 1234


def plan(spec: Spec, names: Names) -> Plan:
    slots = ranked(spec.types, ("Worker",))
    processes = world_size(slots)
    coordinator = Endpoint(names.host(slots[0].role, 0), PORT)
    address = str(coordinator) if processes > 1 else f"127.0.0.1:{PORT}"

    def env(slot: Slot) -> tuple[Env, ...]:
        return (
            Env("JAXOPERATOR_COORDINATOR_ADDRESS", address),
            Env("JAXOPERATOR_NUM_PROCESSES", str(processes)),
            Env.index("JAXOPERATOR_PROCESS_ID", slot.offset),
            Env("JAX_COORDINATOR_ADDRESS", "$(JAXOPERATOR_COORDINATOR_ADDRESS)"),
            Env("JAX_NUM_PROCESSES", "$(JAXOPERATOR_NUM_PROCESSES)"),
            Env.index("JAX_PROCESS_ID", slot.offset),
            Env("PYTHONUNBUFFERED", "1"),
            *tpu_env(names, slot),
        )

    return coordinated("jax", slots, coordinator, env, address_key="coordinator")
