"""The JAX example's training script (`examples/jax.yaml`): data-parallel least squares over
every process of the experiment, so that `aichor-iac run --local examples/jax.yaml
--replicas 2` runs it on a laptop's CPUs.

Each replica joins the JAX cluster from the operator's env, explicitly: JAX's no-argument
`jax.distributed.initialize()` reads `JAX_COORDINATOR_ADDRESS` but takes the process count and
id only from clusters it detects (Slurm, Open MPI, Cloud TPU), so they are passed. Each process
holds its own shard; a global array over every device is sharded by process, and the
gradient of the mean loss is computed over all of it (XLA all-reduces across processes)."""

from __future__ import annotations

import argparse
import os
import socket

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

FEATURES, ROWS = 8, 1024  # rows per process


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    # Collectives across processes on CPUs (on GPUs, NCCL is used whatever this says).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
        process_id=int(os.environ["JAX_PROCESS_ID"]),
    )
    me, count = jax.process_index(), jax.process_count()
    truth = np.linspace(-1, 1, FEATURES, dtype=np.float32)
    generator = np.random.default_rng(me)  # this process's shard
    features = generator.normal(size=(ROWS, FEATURES)).astype(np.float32)
    labels = features @ truth

    mesh = Mesh(np.array(jax.devices()), ("data",))
    rows = NamedSharding(mesh, PartitionSpec("data"))
    x = multihost_utils.host_local_array_to_global_array(features, mesh, PartitionSpec("data"))
    y = multihost_utils.host_local_array_to_global_array(labels, mesh, PartitionSpec("data"))
    assert x.sharding.is_equivalent_to(rows, x.ndim) and x.shape[0] == ROWS * count

    @jax.jit
    def step(weights: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        loss, gradient = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(weights)
        return weights - args.lr * gradient, loss

    weights = jnp.zeros(FEATURES)
    for number in range(args.steps):
        weights, loss = step(weights, x, y)
        if me == 0 and number % 10 == 9:
            print(f"step {number + 1} loss {float(loss):.5f}", flush=True)
    distance = float(jnp.linalg.norm(weights - truth))
    print(f"process {me} of {count} on {socket.gethostname()}: distance {distance:.4f}", flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
