"""The Ray example's script (`examples/ray.yaml`): a Ray Tune random search whose trials run
on the worker pools, so that `aichor-iac run --local examples/ray.yaml --replicas 1` runs it
on a laptop.

The Job replica starts once every node of the cluster has joined, with `RAY_ADDRESS` set: a
bare `ray.init()` connects to the head. Each trial fits a small least-squares model by
gradient descent with its own learning rate and batch size, and asks for one CPU of the
`big-cpu-workers` pool (the custom resource named after the pool, one unit per CPU of its
nodes), so no trial lands on the head or the small pool. The best configuration is printed
at the end."""

from __future__ import annotations

import argparse
import socket

import numpy as np
import ray
from ray import tune

POOL = "big-cpu-workers"


def objective(config: dict[str, float]) -> dict[str, float | str]:
    """One trial: gradient descent on a fixed synthetic problem; the final loss is its
    result (a function trainable may return its last metrics)."""
    generator = np.random.default_rng(0)
    features = generator.normal(size=(512, 8))
    truth = np.arange(1, 9, dtype=float)
    labels = features @ truth + generator.normal(scale=0.1, size=512)
    weights, batch = np.zeros(8), int(config["batch_size"])
    for step in range(200):
        rows = slice((step * batch) % 512, (step * batch) % 512 + batch)
        error = features[rows] @ weights - labels[rows]
        weights -= config["lr"] * features[rows].T @ error / len(error)
    loss = float(np.mean((features @ weights - labels) ** 2))
    return {"loss": loss if np.isfinite(loss) else 1e30, "node": socket.gethostname()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-samples", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=8, help="trials at once")
    args = parser.parse_args()
    ray.init()
    print("nodes", len([n for n in ray.nodes() if n["Alive"]]), flush=True)
    trainable = tune.with_resources(objective, {"cpu": 1, POOL: 1})
    tuner = tune.Tuner(
        trainable,
        param_space={"lr": tune.loguniform(1e-3, 0.5), "batch_size": tune.choice([16, 64, 256])},
        tune_config=tune.TuneConfig(
            num_samples=args.num_samples,
            metric="loss",
            mode="min",
            max_concurrent_trials=args.concurrency,
        ),
    )
    results = tuner.fit()
    errors = [r for r in results if r.error]
    best = results.get_best_result()
    nodes = sorted({r.metrics["node"] for r in results if r.metrics})
    print(f"trials {len(results)} errors {len(errors)} on {', '.join(nodes)}", flush=True)
    print(f"best lr={best.config['lr']:.4f} batch_size={best.config['batch_size']}", flush=True)
    print(f"best loss {best.metrics['loss']:.4f}", flush=True)
    raise SystemExit(1 if errors else 0)


if __name__ == "__main__":
    main()
