"""The sweep example's trial (`examples/sweep.yaml`): a stand-in for training, in plain Python,
so that a sweep runs here with nothing installed. Its loss falls each epoch, fastest near
lr 0.03 and momentum 0.9, and it prints it as Katib's StdOut collector reads it
(`loss=<value>`)."""

from __future__ import annotations

import argparse
import math


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--momentum", type=float, required=True)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    distance = math.log10(args.lr / 0.03) ** 2 + (args.momentum - 0.9) ** 2
    for epoch in range(args.epochs):
        loss = (1 + 10 * distance) / (epoch + 1)
        print(f"epoch={epoch} loss={loss:.4f}", flush=True)


if __name__ == "__main__":
    main()
