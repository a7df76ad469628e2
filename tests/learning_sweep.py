"""A Katib sweep that learns, of a cheap objective of two parameters that each trial prints
(issue 54): run locally by tests/local/test_learning_run.py, asked by the door alone by
tests/doors/test_katib_learning.py."""

from __future__ import annotations

from pathlib import Path

import yaml

from aichor_iac.experiment.trial import FAILED, SUCCEEDED, Result

# A cheap objective of two parameters, printed by each trial: least at (0.3, -0.2)
PROGRAM = "x, y = ${trialParameters.x}, ${trialParameters.y}; print(f'loss={(x - 0.3) ** 2 + (y + 0.2) ** 2}')"


def loss(values: dict[str, str]) -> float:
    x, y = float(values["x"]), float(values["y"])
    return (x - 0.3) ** 2 + (y + 0.2) ** 2


def sweep_file(tmp_path: Path, algorithm: str, seed: int, trials: int) -> Path:
    """The sweep of `trials` trials, two at a time, by `algorithm` with `random_state` seed."""
    settings = [{"name": "random_state", "value": str(seed)}]
    if algorithm == "tpe":
        settings.append({"name": "n_startup_trials", "value": "4"})
    parameter = {"parameterType": "double", "feasibleSpace": {"min": "-1", "max": "1"}}
    container = {"name": "main", "image": "python:3.11", "command": ["python3", "-c", PROGRAM]}
    sweep = {
        "apiVersion": "kubeflow.org/v1beta1",
        "kind": "Experiment",
        "metadata": {"name": f"{algorithm}-{seed}"},
        "spec": {
            "objective": {"type": "minimize", "objectiveMetricName": "loss"},
            "algorithm": {"algorithmName": algorithm, "algorithmSettings": settings},
            "parallelTrialCount": 2,
            "maxTrialCount": trials,
            "parameters": [{"name": n, **parameter} for n in ("x", "y")],
            "trialTemplate": {
                "primaryContainerName": "main",
                "trialParameters": [{"name": n, "reference": n} for n in ("x", "y")],
                "trialSpec": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "spec": {
                        "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}
                    },
                },
            },
        },
    }
    path = tmp_path / f"{algorithm}-{seed}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def ended(objectives: dict[str, float | None]) -> dict[str, Result]:
    """Trials that have ended, by name, as a sweep reads them back: each succeeded with its
    objective (its one value), or failed (None)."""
    return {
        name: Result(FAILED) if value is None else Result(SUCCEEDED, value, (value,))
        for name, value in objectives.items()
    }


# Each trial reports a loss per epoch, four epochs of half a second: x + 1, x + 1/2, ...
EPOCHS = (
    "import time\n"
    "for epoch in range(1, 5):\n"
    "    print(f'epoch {epoch} loss={${trialParameters.x} + 1 / epoch}', flush=True)\n"
    "    time.sleep(0.5)"
)


def median_stop_file(tmp_path: Path) -> Path:
    """A sweep of 6 trials of one parameter, one at a time, each printing EPOCHS' losses,
    under Katib's medianstop (min_trials_required 1, start_step 2)."""
    path = sweep_file(tmp_path, "random", 3, 6)
    sweep = yaml.safe_load(path.read_text())
    spec = sweep["spec"]
    spec["parallelTrialCount"] = 1
    spec["parameters"] = spec["parameters"][:1]
    spec["trialTemplate"]["trialParameters"] = spec["trialTemplate"]["trialParameters"][:1]
    container = spec["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]
    container["command"] = ["python3", "-c", EPOCHS]
    settings = [{"name": "min_trials_required", "value": "1"}, {"name": "start_step", "value": "2"}]
    spec["earlyStopping"] = {"algorithmName": "medianstop", "algorithmSettings": settings}
    path.write_text(yaml.safe_dump(sweep))
    return path
