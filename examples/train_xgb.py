"""The XGBoost example's training script (`examples/xgboost.yaml`): distributed boosting over
the replicas the manifest describes, so that `aichor-iac run --local examples/xgboost.yaml
--replicas 2` runs it on a laptop.

Rank 0 (the Master) hosts the Rabit tracker at `MASTER_PORT`; every replica joins it from the
operator's env alone (`DMLC_TRACKER_URI`, `DMLC_TRACKER_PORT`, `DMLC_TASK_ID`, `RANK`,
`WORLD_SIZE`) and trains on its own shard; the histograms are all-reduced between them."""

from __future__ import annotations

import argparse
import os

import numpy as np
import xgboost
from xgboost import collective
from xgboost.tracker import RabitTracker


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-round", type=int, default=10)
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    tracker = None
    if rank == 0:
        port = int(os.environ["MASTER_PORT"])
        tracker = RabitTracker(host_ip="0.0.0.0", n_workers=world, port=port, sortby="task")
        tracker.start()
    joined = {
        "dmlc_tracker_uri": os.environ["DMLC_TRACKER_URI"],
        "dmlc_tracker_port": int(os.environ["DMLC_TRACKER_PORT"]),
        "dmlc_task_id": os.environ["DMLC_TASK_ID"],
    }
    with collective.CommunicatorContext(**joined):
        generator = np.random.default_rng(rank)  # this replica's shard
        features = generator.normal(size=(2000, 8))
        labels = (features[:, 0] + features[:, 1] > 0).astype(float)
        train = xgboost.DMatrix(features, label=labels)
        params = {"objective": "binary:logistic", "tree_method": "hist", "eval_metric": "error"}
        history: dict = {}
        xgboost.train(
            params,
            train,
            args.num_round,
            evals=[(train, "train")],
            evals_result=history,
            verbose_eval=False,
        )
        error = history["train"]["error"][-1]
        print(f"rank {collective.get_rank()} of {collective.get_world_size()}: error {error:.3f}")
    if tracker is not None:
        tracker.wait_for(60)


if __name__ == "__main__":
    main()
