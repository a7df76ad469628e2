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

from ..experiment.model import Spec
from .base import Endpoint, Env, Names, Plan, Slot, coordinated, ranked, tpu_env, world_size

PORT = 1234


def plan(spec: Spec, names: Names) -> Plan:
    if spec.origin is not None:
        return kubeflow_plan(spec, names)
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


PORT_NAME = "jaxjob-port"  # the Training Operator's JAXJob port (default number 6666)


def kubeflow_plan(spec: Spec, names: Names) -> Plan:
    """A `kubeflow.org/v1` JAXJob: the Training Operator's env exactly (release-1.9
    `pkg/controller.v1/jax/envvar.go`), host names aside: `COORDINATOR_ADDRESS` (worker 0's
    host, no port), `COORDINATOR_PORT`, `NUM_PROCESSES`, `PROCESS_ID` (the worker's index).
    Pass them to `jax.distributed.initialize` (JAX reads none of them itself). Workers wait
    for worker 0's port and follow it."""
    origin = spec.origin
    assert origin is not None
    slots = ranked(spec.types, ("Worker",))
    coordinator = Endpoint(names.host("worker", 0), origin.port("Worker", PORT_NAME))

    def env(slot: Slot) -> tuple[Env, ...]:
        return (
            Env("PYTHONUNBUFFERED", "1"),
            Env("COORDINATOR_PORT", str(coordinator.port)),
            Env("COORDINATOR_ADDRESS", coordinator.host),
            Env("NUM_PROCESSES", str(world_size(slots))),
            Env.index("PROCESS_ID", slot.offset),
        )

    return coordinated(
        "jax", slots, coordinator, env, address_key="coordinator", port_name=PORT_NAME
    )
