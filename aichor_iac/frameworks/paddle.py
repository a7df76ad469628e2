"""PaddlePaddle (Kubeflow PaddleJob contract, training-operator release-1.9,
`pkg/controller.v1/paddlepaddle/envvar.go`): `Worker` replicas alone (collective mode), or
`Master` parameter servers + `Worker` trainers (parameter-server mode).

Every replica gets `PYTHONUNBUFFERED`, `PADDLE_JOB_ID` (the experiment) and `PADDLE_NNODES`
(every replica); `python -m paddle.distributed.launch` reads them and `PADDLE_MASTER` from the
env. Rank 0 — worker 0, or master 0 in PS mode — hosts the launch's rendezvous on port 36543
(named `master`) and is told its own pod IP (`POD_IP_DUMMY`), since Paddle's launcher starts
that server only where the master address is the node's own IP; the others get rank 0's host.
In PS mode each pod is one server (`PADDLE_SERVER_NUM=1`) or one trainer
(`PADDLE_TRAINER_NUM=1`). `MASTER_ADDR`/`MASTER_PORT` are never set: Paddle would prefer them.
"""

from __future__ import annotations

from ..experiment.model import Spec
from .base import Endpoint, Env, Names, Plan, Slot, coordinated, ranked, world_size

PORT = 36543
PORT_NAME = "master"  # the Training Operator's PaddleJobDefaultPortName


def plan(spec: Spec, names: Names) -> Plan:
    slots = ranked(spec.types, ("Master", "Worker"))
    # A PaddleJob custom resource may name another port `master` on its container.
    port = spec.origin.port(slots[0].replica_type, PORT_NAME) if spec.origin else PORT
    coordinator = Endpoint(names.host(slots[0].role, 0), port)
    parameter_servers = slots[0].role == "master"

    def env(slot: Slot) -> tuple[Env, ...]:
        entries = [
            Env("PYTHONUNBUFFERED", "1"),
            Env("PADDLE_JOB_ID", names.experiment),
            Env("PADDLE_NNODES", str(world_size(slots))),
        ]
        if slot.offset == 0:  # the group of rank 0: its replica 0 publishes its own address
            entries += [
                Env.field("POD_IP_DUMMY", "status.podIP", only_first=True),
                Env("PADDLE_MASTER", str(coordinator), first=f"$POD_IP_DUMMY:{port}"),
            ]
        else:
            entries.append(Env("PADDLE_MASTER", str(coordinator)))
        if parameter_servers:
            role = "PADDLE_SERVER_NUM" if slot.role == "master" else "PADDLE_TRAINER_NUM"
            entries.append(Env(role, "1"))
        return tuple(entries)

    return coordinated("paddle", slots, coordinator, env, port_name=PORT_NAME)
