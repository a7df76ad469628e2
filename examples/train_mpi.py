"""The MPI example's training script (`examples/mpi.yaml`): data-parallel least squares with
mpi4py, as Horovod does it for deep learning, so that `aichor-iac run --local
examples/mpi.yaml` runs it on a laptop.

`mpirun` starts one rank per slot on the workers (the hostfile the launcher is given lists
them); each rank holds its own shard of the data, computes its gradient, and the gradients
are averaged with an all-reduce, so every rank takes the same step. Rank 0 prints the loss;
at the end every rank prints its place and whether its weights match rank 0's."""

from __future__ import annotations

import argparse
import socket
import sys

import numpy as np
from mpi4py import MPI

FEATURES, ROWS = 16, 4096  # rows per rank


def say(line: str) -> None:
    """Print a line in one write: mpirun passes on the ranks' output as it reads it, and
    print() writes a line's text and its newline apart, so two ranks' lines could run
    together."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    truth = np.linspace(-1, 1, FEATURES)
    generator = np.random.default_rng(rank)  # this rank's shard
    features = generator.normal(size=(ROWS, FEATURES))
    labels = features @ truth + generator.normal(scale=0.01, size=ROWS)
    weights = np.zeros(FEATURES)
    for epoch in range(args.epochs):
        error = features @ weights - labels
        gradient = features.T @ error / ROWS
        total = np.empty_like(gradient)
        comm.Allreduce(gradient, total, op=MPI.SUM)
        weights -= args.lr * total / size
        loss = comm.allreduce(float(np.mean(error**2)), op=MPI.SUM) / size
        if rank == 0 and (epoch % 10 == 9 or epoch == args.epochs - 1):
            say(f"epoch {epoch + 1} loss {loss:.5f}")
    same = np.allclose(comm.bcast(weights, root=0), weights)
    say(f"rank {rank} of {size} on {socket.gethostname()}: weights match {same}")
    if rank == 0:
        say(f"distance to the truth {np.linalg.norm(weights - truth):.4f}")


if __name__ == "__main__":
    main()
