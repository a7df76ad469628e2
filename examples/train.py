"""The PyTorch example's training script (`examples/pytorch.yaml`): data-parallel training
over the replicas the manifest describes, NCCL on GPUs and gloo otherwise, so that
`aichor-iac run --local examples/pytorch.yaml --replicas 2` runs it on a laptop's CPUs.

Every replica finds its peers from the operator's env alone (`MASTER_ADDR`, `MASTER_PORT`,
`WORLD_SIZE`, `RANK`: `init_process_group`'s `env://`), under `torchrun` too
(`examples/pytorch-torchrun.yaml`). With `--logdir` rank 0 writes the loss for TensorBoard
and with `--out` saves the model (`examples/pytorch-tensorboard.yaml`: both on the shared
volume)."""

from __future__ import annotations

import argparse
import gc
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def say(line: str) -> None:
    """A line in one write: the processes of a node (torchrun's) share its output, and
    `print` writes the text and its newline apart (another's line could come between)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--logdir", help="TensorBoard's log directory (rank 0 writes)")
    parser.add_argument("--out", help="where rank 0 saves the model")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    torch.manual_seed(0)  # the same initial weights everywhere
    model = DistributedDataParallel(
        torch.nn.Linear(8, 1).to(device), device_ids=[0] if cuda else None
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    inputs = torch.randn(512, 8, generator=torch.Generator().manual_seed(rank))  # rank's shard
    targets = inputs.sum(dim=1, keepdim=True)
    writer = None
    if args.logdir and rank == 0:
        from torch.utils.tensorboard import SummaryWriter  # (needs the tensorboard package)

        writer = SummaryWriter(args.logdir)
    for epoch in range(args.epochs):
        for start in range(0, len(inputs), args.batch_size):
            batch = slice(start, start + args.batch_size)
            optimizer.zero_grad()
            prediction = model(inputs[batch].to(device))
            loss = torch.nn.functional.mse_loss(prediction, targets[batch].to(device))
            loss.backward()  # gradients averaged over every rank
            optimizer.step()
        if rank == 0:
            say(f"epoch {epoch} loss {loss.item():.4f}")
        if writer is not None:
            writer.add_scalar("loss", loss.item(), epoch)
    if writer is not None:
        writer.close()
        say(f"loss written for TensorBoard in {args.logdir}")
    if args.out and rank == 0:
        os.makedirs(args.out, exist_ok=True)
        torch.save(model.module.state_dict(), os.path.join(args.out, "model.pt"))
        say(f"model saved in {args.out}")
    say(f"rank {rank} of {world} done")
    dist.barrier()  # every rank done before any tears its connections down
    # The model and optimizer freed while Python is whole: DDP's reference cycles otherwise
    # keep the gloo group's last user alive until the interpreter's final teardown, where
    # freeing it aborted 1 run in ~30 ("terminate called without an active exception").
    del model, optimizer
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
