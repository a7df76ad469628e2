"""The TensorFlow example's script (`examples/tf.yaml`): parameter-server training with
`tf.distribute.ParameterServerStrategy` and a custom training loop, so that `aichor-iac run
--local examples/tf.yaml --replicas 1` runs it on a laptop.

Each replica reads its role from `TF_CONFIG`: the parameter servers and workers start a
TensorFlow server and serve until the chief is done (they follow it); the chief holds the
model's variables on the parameter servers, schedules training steps on the workers with a
`ClusterCoordinator` and writes a checkpoint every `--checkpoint-every` steps; the evaluator
(outside the training cluster) evaluates each new checkpoint until the last one. Chief and
evaluator share the checkpoint directory: `$AICHOR_OUTPUT_PATH` (a bucket, or a shared
volume), else `./model`."""

from __future__ import annotations

import argparse
import os
import time

import tensorflow as tf

FEATURES = 8
TRUTH = tf.linspace(-1.0, 1.0, FEATURES)


def data(seed: int) -> tuple[tf.Tensor, tf.Tensor]:
    """A synthetic regression problem (the same truth for every seed)."""
    x = tf.random.stateless_normal([2048, FEATURES], seed=[seed, 0])
    noise = tf.random.stateless_normal([2048], seed=[seed, 1], stddev=0.01)
    return x, tf.linalg.matvec(x, TRUTH) + noise


def model() -> tf.train.Checkpoint:
    return tf.train.Checkpoint(
        weights=tf.Variable(tf.zeros([FEATURES]), name="weights"),
        step=tf.Variable(0, dtype=tf.int64, name="step"),
    )


def loss_of(weights: tf.Tensor, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean((tf.linalg.matvec(x, weights) - y) ** 2)


def chief(resolver, args: argparse.Namespace) -> None:
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        state = model()

    def dataset() -> tf.data.Dataset:
        return tf.data.Dataset.from_tensor_slices(data(1)).shuffle(2048).batch(64).repeat()

    iterator = iter(coordinator.create_per_worker_dataset(dataset))

    @tf.function
    def step(iterator: object) -> tf.Tensor:
        def replica(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = loss_of(state.weights, x, y)
            state.weights.assign_sub(args.lr * tape.gradient(loss, state.weights))
            state.step.assign_add(1)
            return loss

        return strategy.run(replica, args=next(iterator))

    checkpoint = tf.train.CheckpointManager(state, args.model_dir, max_to_keep=None)
    workers = len(resolver.cluster_spec().job_tasks("worker"))
    for start in range(0, args.steps, args.checkpoint_every):
        losses = [
            coordinator.schedule(step, args=(iterator,)) for _ in range(args.checkpoint_every)
        ]
        coordinator.join()
        checkpoint.save(checkpoint_number=start + args.checkpoint_every)
        print(
            f"chief: step {start + args.checkpoint_every} loss {losses[-1].fetch():.5f}", flush=True
        )
    print(f"chief: {args.steps} steps on {workers} workers, {int(state.step)} updates", flush=True)


def evaluator(args: argparse.Namespace) -> None:
    """Evaluate each new checkpoint on held-out data, until the last one."""
    state, seen = model(), None
    x, y = data(2)
    while True:
        latest = tf.train.latest_checkpoint(args.model_dir)
        if latest is None or latest == seen:
            time.sleep(1)
            continue
        state.restore(latest).expect_partial()
        seen = latest
        number = int(latest.rsplit("-", 1)[1])
        print(
            f"evaluator: checkpoint {number} loss {float(loss_of(state.weights, x, y)):.5f}",
            flush=True,
        )
        if number >= args.steps:
            return


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--model-dir", default=os.environ.get("AICHOR_OUTPUT_PATH") or "model")
    args = parser.parse_args()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    role, index = resolver.task_type, resolver.task_id
    print(f"{role} {index} of {sorted(resolver.cluster_spec().as_dict())}", flush=True)
    if role in ("ps", "worker"):
        server = tf.distribute.Server(
            resolver.cluster_spec(), job_name=role, task_index=index, protocol="grpc", start=True
        )
        server.join()  # until the chief is done (the replica follows it)
    elif role == "evaluator":
        evaluator(args)
    else:
        chief(resolver, args)


if __name__ == "__main__":
    main()
