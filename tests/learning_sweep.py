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


def median_verdicts(rows: list[dict]) -> list[tuple[dict, bool]]:
    """Each trial of a median-stop sweep of EPOCHS' losses (x + 1, x + 1/2, ...; start_step
    2, min_trials_required 1), one at a time, and whether its rule stops it: its best of two
    is worse than the mean of each succeeded trial's first two. Each is asserted to read back
    so (EarlyStopped, or Succeeded with its last loss), and both to occur among the 6."""
    import pytest

    succeeded: list[float] = []  # each succeeded trial's mean of its first two losses
    found = []
    for row in rows:
        x = float(row["parameters"]["x"])
        rule = sum(succeeded) / len(succeeded) if succeeded else None
        stopped = rule is not None and x + 1 / 2 > rule
        if stopped:
            assert row["state"] == "EarlyStopped", (row, rule)
        else:
            assert row["state"] == "Succeeded", (row, rule)
            assert row["objective"] == pytest.approx(x + 1 / 4)
            succeeded.append(x + (1 + 1 / 2) / 2)
        found.append((row, stopped))
    states = {row["state"] for row in rows}
    assert len(rows) == 6 and {"EarlyStopped", "Succeeded"} <= states, states
    return found


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


# A trial of an OptimizationJob reporting a loss per epoch to Trainer's URL (raw HTTP, as
# Trainer's guide does: the SDK sends one report per 5 s at most), four epochs of 0.7 s
REPORTING = """\
import json, os, ssl, time, urllib.request
from datetime import datetime, timezone
x = float(os.environ['KUBEFLOW_TRAINER_OPT_X'])
environ = os.environ
token = open(environ['KUBEFLOW_TRAINER_SERVER_TOKEN']).read().strip()
context = ssl.create_default_context(cafile=environ['KUBEFLOW_TRAINER_SERVER_CA_CERT'])
for epoch in range(1, 5):
    loss = {'name': 'loss', 'value': str(x + 1 / epoch)}
    now = datetime.now(timezone.utc).isoformat()
    body = json.dumps({'trainerStatus': {'lastUpdatedTime': now, 'metrics': [loss]}})
    headers = {'Authorization': f'Bearer {token}', 'Content-Type': 'application/json'}
    request = urllib.request.Request(environ['KUBEFLOW_TRAINER_SERVER_URL'], body.encode(), headers)
    for attempt in range(50):  # (the receiver beside it may still be starting)
        try:
            urllib.request.urlopen(request, context=context).read()
            break
        except OSError:
            time.sleep(0.2)
    print(f'epoch {epoch}', flush=True)
    time.sleep(0.7)
"""


def reported_median_stop() -> dict:
    """An OptimizationJob of 6 trials of one parameter, one at a time, each reporting
    REPORTING's losses, under medianstop (min_trials_required 1, start_step 2) by the
    annotation aichor.ai/early-stopping."""
    settings = '{"medianstop": {"min_trials_required": "1", "start_step": "2"}}'
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "OptimizationJob",
        "metadata": {"name": "reported", "annotations": {"aichor.ai/early-stopping": settings}},
        "spec": {
            "objectives": [{"metric": "loss"}],
            "searchAlgorithm": {"random": {"seed": 3}},
            "parameters": [{"name": "x", "searchSpace": {"uniform": {"min": "-1", "max": "1"}}}],
            "numTrials": 6,
            "parallelTrials": 1,
            "trainJobTemplate": {
                "spec": {
                    "runtimeRef": {"name": "torch-distributed"},
                    "trainer": {"image": "python:3.12", "command": ["python3", "-c", REPORTING]},
                }
            },
        },
    }
