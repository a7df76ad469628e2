"""From a notebook: a three-node PyTorch experiment from a Python function.

Run it (`python examples/from_function.py`) to see the objects it would create; in a Pulumi
program, `aichor_iac.components.experiment("ddp", experiment())` creates them on the cluster.
The test suite runs them for real on its local cluster (tests/doors/test_function.py).
"""

from __future__ import annotations

import aichor_iac

STEPS = 3  # a module-level constant the function reads: it travels with it


def mean_of(values: list[float]) -> float:  # a helper the function calls: it travels too
    return sum(values) / len(values)


def train(learning_rate: float = 0.1) -> None:
    """One data-parallel step per rank: every rank's gradient all-reduced over gloo."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    weight = torch.zeros(1)
    for _ in range(STEPS):
        gradient = torch.tensor([float(rank + 1)])
        dist.all_reduce(gradient)
        weight -= learning_rate * gradient / world
    print(f"rank {rank} of {world}: weight {weight.item():.2f}, mean {mean_of([1.0, 2.0])}")
    dist.destroy_process_group()


def experiment() -> aichor_iac.Manifest:
    return aichor_iac.experiment_from_function(
        train,
        name="ddp",
        num_nodes=3,
        nproc_per_node=1,
        resources_per_node={"cpu": 1, "memory": "2Gi"},
        args={"learning_rate": 0.5},
    )


if __name__ == "__main__":
    from aichor_iac.review.output import summary

    for obj in aichor_iac.render(experiment()):
        print(f"{obj['kind']}/{obj['metadata']['name']}", summary(obj))
