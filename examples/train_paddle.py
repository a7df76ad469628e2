"""The PaddlePaddle example's training script (`examples/paddle.yaml`): data-parallel least
squares in collective mode, so that `aichor-iac run --local examples/paddle.yaml --replicas 2`
runs it on a laptop's CPUs.

`python -m paddle.distributed.launch` finds the job from the operator's env alone
(`PADDLE_MASTER`, `PADDLE_NNODES`, `PADDLE_JOB_ID`) and starts this script with the trainer's
env; the gradients are all-reduced after each backward pass (NCCL on GPUs, gloo on CPUs,
where `paddle.DataParallel` is not available), so every rank takes the same step on its own
shard. The launcher prints its local rank 0's output."""

from __future__ import annotations

import argparse
import socket

import numpy as np
import paddle
import paddle.distributed as dist

FEATURES, ROWS = 8, 1024  # rows per rank


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    paddle.seed(0)  # the same initial weights everywhere
    model = paddle.nn.Linear(FEATURES, 1)
    optimizer = paddle.optimizer.SGD(learning_rate=args.lr, parameters=model.parameters())
    generator = np.random.default_rng(rank)  # this rank's shard
    features = generator.normal(size=(ROWS, FEATURES)).astype("float32")
    truth = np.linspace(-1, 1, FEATURES).astype("float32")
    x, y = paddle.to_tensor(features), paddle.to_tensor((features @ truth)[:, None])
    for epoch in range(args.epochs):
        loss = paddle.nn.functional.mse_loss(model(x), y)
        loss.backward()
        for parameter in model.parameters():  # the mean gradient over every rank
            dist.all_reduce(parameter.grad)
            parameter.grad.set_value(parameter.grad / world)
        optimizer.step()
        optimizer.clear_grad()
        if rank == 0 and epoch % 10 == 9:
            print(f"epoch {epoch + 1} loss {float(loss):.5f}", flush=True)
    weights = model.parameters()[0].numpy().ravel()
    gathered: list[paddle.Tensor] = []
    dist.all_gather(gathered, paddle.to_tensor(weights))
    same = all(np.allclose(g.numpy(), weights) for g in gathered)
    print(f"rank {rank} of {world} on {socket.gethostname()}: weights match {same}", flush=True)


if __name__ == "__main__":
    main()
