"""What Trainer's MPI plugin (v2.3.0, `pkg/runtime/framework/plugins/mpi/mpi.go`) does to the
JobSet of a TrainJob on an MPI runtime (`deepspeed-distributed`, `mlx-distributed`, or one in
the file): the `node` Job gets `numNodes` pods (one fewer when the launcher ranks too:
`runLauncherAsNode`), the launcher's `node` container OpenMPI's variables, and every `node`
container of the `node` and `launcher` Jobs the generated SSH key pair at `sshAuthMountPath`;
the launcher also the hostfile at /etc/mpi (`frameworks.mpi.trainer_mounts`, laid out by the
JobSet framework from the options `enforce` returns).

The plugin works by Job and container name (`node`, `launcher`), not by the ancestor label.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ...experiment.groups import Model
from ...experiment.options import TrainerMpi
from ...problems import Problem
from ...reading import podtemplate as templates
from ...rules.limits import INT32
from .runtimes import LAUNCHER, NODE, gpus, node_containers, upserted

HOSTFILE = "/etc/mpi/hostfile"
SSH_ARGS = "-o ConnectionAttempts=10"
# The variables the plugin sets on the launcher (constants.MPIReservedEnvNames)
RESERVED = (
    "OMPI_MCA_orte_default_hostfile",
    "OMPI_MCA_plm_rsh_args",
    "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_set_default_slots",
)


class MPIPolicy(Model):
    """The runtime's `mlPolicy.mpi`, with Trainer's defaults. (Its API also names Intel MPI
    and MPICH; the plugin builds OpenMPI's hostfile only, and refuses the others.)"""

    num_proc_per_node: int = Field(1, ge=1, le=INT32)
    mpi_implementation: Literal["OpenMPI"] = "OpenMPI"
    ssh_auth_mount_path: str = Field("/root/.ssh", min_length=1, max_length=4096)
    run_launcher_as_node: bool = False


def problems(policy: MPIPolicy, num_nodes: int | None, jobs: list[str]) -> list[Problem]:
    """What the plugin's webhook refuses: several nodes with the launcher ranking too, in a
    runtime without both a `launcher` and a `node` Job."""
    several = (num_nodes or 1) >= 2 and policy.run_launcher_as_node
    if several and (LAUNCHER not in jobs or NODE not in jobs):
        reason = (
            "must be 1: the runtime's MPI policy runs the launcher as a node, and it has no "
            f"'{LAUNCHER}' and '{NODE}' replicated Jobs for the others"
        )
        return [Problem("spec.trainer.numNodes", reason)]
    return []


def slots(policy: MPIPolicy, per_node: int | None, resources: dict[str, Any]) -> int:
    """Processes per node (the hostfile's slots): the trainer's numProcPerNode, else the
    runtime's; the runtime's 1 becomes the node's GPUs when it has several."""
    if per_node is not None:
        return per_node
    if policy.num_proc_per_node == 1 and gpus(resources) > 1:
        return gpus(resources)
    return policy.num_proc_per_node


def enforce(
    jobs: list[dict[str, Any]], policy: MPIPolicy, num_nodes: int | None, slot_count: int
) -> TrainerMpi:
    """The plugin's changes to the runtime's replicated Jobs (in place, before the trainer's
    own fields are set, as Trainer orders them); what the JobSet framework reads of it."""
    for rjob in jobs:
        job_spec = rjob["template"]["spec"]
        if rjob["name"] == NODE and num_nodes is not None:
            count = max(num_nodes - 1, 1) if policy.run_launcher_as_node else num_nodes
            job_spec.update(parallelism=count, completions=count)
        if rjob["name"] != LAUNCHER:
            continue
        added = [
            {"name": "OMPI_MCA_orte_default_hostfile", "value": HOSTFILE},
            {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
            {"name": "OMPI_MCA_orte_set_default_slots", "value": str(slot_count)},
            {"name": "OMPI_MCA_plm_rsh_args", "value": SSH_ARGS},
        ]
        for container in node_containers(rjob):
            own = templates.listed(container.get("env"))
            container["env"] = upserted(own, added)
    return TrainerMpi(policy.ssh_auth_mount_path, slot_count, policy.run_launcher_as_node)
