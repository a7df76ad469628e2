"""The KubeRay example's script (`examples/kuberay.yaml`): offline batch inference with Ray
Data, so that `aichor-iac run --local examples/kuberay.yaml --replicas 2` runs it on a laptop.

The submitter sends this script to the head with the Ray Jobs API once every node has joined;
a bare `ray.init()` connects to the cluster. The head offers no CPU (`num-cpus: 0`), so the
batches run on the worker pool: each actor loads the model once (here a fixed linear scorer)
and scores the batches it is given; the results are counted and summarised at the end."""

from __future__ import annotations

import argparse
import socket

import numpy as np
import ray

WEIGHTS = np.linspace(-1, 1, 8)


class Scorer:
    """The model, loaded once per actor (as a real model's weights would be)."""

    def __init__(self) -> None:
        self.weights = WEIGHTS
        self.host = socket.gethostname()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        generator = np.random.default_rng(batch["id"])
        features = generator.normal(size=(len(batch["id"]), len(self.weights)))
        return {
            "id": batch["id"],
            "score": features @ self.weights,
            "node": np.array([self.host] * len(batch["id"])),
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--actors", type=int, default=2, help="model replicas")
    parser.add_argument("--blocks", type=int, default=8, help="how the rows are split")
    args = parser.parse_args()
    ray.init()
    rows = ray.data.range(args.rows, override_num_blocks=args.blocks)
    scored = rows.map_batches(
        Scorer, batch_size=500, compute=ray.data.ActorPoolStrategy(size=args.actors), num_cpus=1
    )
    rows = scored.take_all()
    nodes = sorted({str(row["node"]) for row in rows})
    scores = np.array([row["score"] for row in rows])
    print(f"scored {len(rows)} rows on {', '.join(nodes)}", flush=True)
    print(f"mean score {scores.mean():.4f}", flush=True)


if __name__ == "__main__":
    main()
