"""`aichor-iac run --local` of several experiments (issue 41): a Katib sweep's trials run in the
order `pulumi up` creates them — at most parallelTrialCount at once, a failed trial leaving
the others to run — each with its result, and the sweep's table at the end; a file of two
experiments runs both, one's failure not stopping the other."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube import NEEDS_CLUSTER
from test_sweep_live import SWEEP

from aichor_iac import cli

pytestmark = NEEDS_CLUSTER
# Each trial: its seed, a loss that falls with it, 3 s; seed 3 fails.
COMMAND = (
    'echo "start $(date +%s.%N) seed ${trialParameters.seed}"; sleep 3; '
    'echo "loss=0.${trialParameters.seed}"; echo "end $(date +%s.%N)"; '
    '[ "${trialParameters.seed}" != 3 ]'
)
ROOT = Path(__file__).resolve().parents[2]
# The run's line of an experiment whose pod failed first, with a program's own exit code
FAILED_FIRST = "failed (1): {} failed first"
# A Job trial's pod: its index, and a loss from its seed
JOB_COMMAND = 'echo "index $JOB_COMPLETION_INDEX"; echo "loss=0.${trialParameters.seed}"'


def batch(name: str, command: str) -> dict:
    """An AIchor batchjob manifest of one pod running `command`."""
    worker = {"count": 1, "resources": {"cpus": 1, "ramRatio": 1}}
    spec = {"operator": "batchjob", "image": "i", "command": command}
    return {"kind": "AIchorManifest", "name": name, "spec": {**spec, "types": {"Worker": worker}}}


# Katib's grid of the four seeds in the order 2, 4, 3, 1 (random_state 16, one or two at once)
SEEDS_2_4 = {
    "algorithmName": "grid",
    "algorithmSettings": [{"name": "random_state", "value": "16"}],
}


def sweep_file(tmp_path: Path, command: str = COMMAND, **spec: Any) -> Path:
    """The four-trial sweep, each trial's master running `command`, its spec's fields
    changed by `spec`."""
    sweep = copy.deepcopy(SWEEP)
    sweep["spec"].update(spec)
    master = sweep["spec"]["trialTemplate"]["trialSpec"]["spec"]["pytorchReplicaSpecs"]["Master"]
    master["template"]["spec"]["containers"][0]["command"] = ["sh", "-c", command]
    path = tmp_path / "seeds.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def trial_states(out: str) -> dict[str, str]:
    """Each trial's state in the sweep's table, by its seed."""
    found = re.findall(r"^seeds-\S+(?: \*)?\s+(\d)\s+(Succeeded|Failed|Not created)", out, re.M)
    return dict(found)


def test_a_sweep_runs_locally_two_trials_at_a_time_and_ends_with_its_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    picture = tmp_path / "seeds.png"
    argv = ["run", "--local", str(sweep_file(tmp_path)), "--timeout", "300", "--plot", str(picture)]
    assert cli.main(argv) == 1
    assert picture.read_bytes()[:4] == b"\x89PNG"  # (what the table says, drawn)
    out = capsys.readouterr().out
    spans = {
        pod: (float(start), float(end))
        for pod, start in re.findall(r"^(\S+) start (\S+) seed", out, re.M)
        for other, end in re.findall(r"^(\S+) end (\S+)", out, re.M)
        if other == pod
    }
    assert len(spans) == 4, out  # the failed trial did not stop the others
    for moment in sorted(t for span in spans.values() for t in span):
        assert sum(start <= moment < end for start, end in spans.values()) <= 2, spans
    results = re.findall(r"^aichor-iac: (seeds-\S+) (succeeded|failed \(1\): .+)$", out, re.M)
    (failed,) = [(name, r) for name, r in results if r != "succeeded"]  # naming its master
    assert failed[1] == FAILED_FIRST.format(f"{failed[0]}-master-0") and len(results) == 4
    # The table: each trial's seed, state and loss; the best (seed 1: loss 0.1) marked
    rows = {m[2]: m for m in re.findall(r"^(seeds-\S+)( \*)?\s+(\d)\s+(\w+)\s+(\S+)", out, re.M)}
    assert {seed: (row[3], row[4]) for seed, row in rows.items()} == {
        "1": ("Succeeded", "0.1"),
        "2": ("Succeeded", "0.2"),
        "3": ("Failed", "0.3"),
        "4": ("Succeeded", "0.4"),
    }
    assert rows["1"][1] == " *"
    assert re.search(rf"best trial\s+{rows['1'][0]} \(\*\)", out), out  # (the caption wraps)


def test_a_file_of_two_experiments_runs_both_and_reports_each_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(
        yaml.safe_dump_all([batch("fails", "sleep 1; exit 3"), batch("works", "sleep 3")])
    )
    argv = ["run", "--local", str(path), "--output", "json", "--timeout", "120"]
    assert cli.main([*argv, "--plot", "x.png"]) == 2  # (no sweep to plot: said before it runs)
    assert "the manifest holds no sweep to plot" in capsys.readouterr().out  # (as JSON)
    assert cli.main(argv) == 3
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    results = {d["experiment"]: d["status"] for d in lines if "experiment" in d}
    assert results == {"fails": 3, "works": 0}  # the failure did not stop the other


def test_with_max_failed_trial_count_0_the_first_failure_stops_creating_trials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two trials at a time, each `seed` seconds, the first (seed 2, in the grid's order)
    # failing: as `pulumi up` fails at its Job's await, no later trial is created, not even
    # the one waiting for the second (seed 4), which runs on and succeeds.
    command = COMMAND.replace("sleep 3", "sleep ${trialParameters.seed}").replace("!= 3", "!= 2")
    path = sweep_file(
        tmp_path, command, parallelTrialCount=2, maxFailedTrialCount=0, algorithm=SEEDS_2_4
    )
    assert cli.main(["run", "--local", str(path), "--timeout", "120"]) == 1
    out = capsys.readouterr().out
    assert sorted(re.findall(r"^\S+ start \S+ seed (\d)$", out, re.M)) == ["2", "4"], out
    results = re.findall(r"^aichor-iac: seeds-\S+ (.*)$", out, re.M)
    assert sorted(r.split(": seeds-")[0] for r in results) == [
        "failed (1)",
        *["failed (125): not created, pulumi up failed first"] * 2,
        "succeeded",
    ]
    states = trial_states(out)
    assert states == {"2": "Failed", "4": "Succeeded", "1": "Not created", "3": "Not created"}


def test_a_sweep_that_fails_at_2_failed_trials_creates_no_trial_after_its_second_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One trial at a time; the first two (seeds 2 and 4) fail: the third is not created, as
    # `pulumi up` fails at its gate (Katib fails the experiment at 2 failed trials).
    command = COMMAND.replace("!= 3 ]", '!= 2 ] && [ "${trialParameters.seed}" != 4 ]')
    path = sweep_file(
        tmp_path, command, parallelTrialCount=1, maxFailedTrialCount=2, algorithm=SEEDS_2_4
    )
    assert cli.main(["run", "--local", str(path), "--timeout", "120"]) == 1
    out = capsys.readouterr().out
    assert re.findall(r"^\S+ start \S+ seed (\d)$", out, re.M) == ["2", "4"], out
    states = trial_states(out)
    assert states == {"2": "Failed", "4": "Failed", "1": "Not created", "3": "Not created"}


def test_a_sweep_of_batch_v1_job_trials_runs_locally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Katib's hp-tuning shape: each trial a Job of two pods (one at a time) printing its loss
    sweep = copy.deepcopy(SWEEP)
    sweep["spec"].update(maxTrialCount=2, parallelTrialCount=2)
    pod = {
        "containers": [
            {"name": "training-container", "image": "img", "command": ["sh", "-c", JOB_COMMAND]}
        ],
        "restartPolicy": "Never",
    }
    sweep["spec"]["trialTemplate"].update(
        primaryContainerName="training-container",
        trialSpec={
            "apiVersion": "batch/v1",
            "kind": "Job",
            "spec": {"completions": 2, "parallelism": 1, "template": {"spec": pod}},
        },
    )
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump(sweep))
    assert cli.main(["run", "--local", str(path), "--output", "json", "--timeout", "120"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    printed = [d["line"] for d in lines if "pod" in d]
    assert sorted(p for p in printed if p.startswith("index")) == [
        "index 0",
        "index 0",
        "index 1",
        "index 1",
    ]  # (two pods of each trial's Job)
    (found,) = [d for d in lines if "sweep" in d]
    assert sorted(t["state"] for t in found["trials"]) == ["Succeeded", "Succeeded"]
    assert found["best"] is not None


def test_a_file_collectors_metrics_are_read_from_the_file_the_trial_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Katib's File collector, JSON: each trial writes its loss into the metrics file's
    # directory (an emptyDir, as Katib mounts) and prints a decoy on its output
    sweep = copy.deepcopy(SWEEP)
    sweep["spec"].update(maxTrialCount=2, parallelTrialCount=2)
    sweep["spec"]["metricsCollectorSpec"] = {
        "source": {"fileSystemPath": {"path": "/katib/m.json", "kind": "File", "format": "JSON"}},
        "collector": {"kind": "File"},
    }
    write = 'echo "loss=9"; echo \'{"loss": "0.${trialParameters.seed}"}\' > /katib/m.json; exit 0'
    master = sweep["spec"]["trialTemplate"]["trialSpec"]["spec"]["pytorchReplicaSpecs"]["Master"]
    master["template"]["spec"]["containers"][0]["command"] = ["sh", "-c", write]
    path = tmp_path / "json.yaml"
    path.write_text(yaml.safe_dump(sweep))
    assert cli.main(["run", "--local", str(path), "--output", "json", "--timeout", "120"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (found,) = [d for d in lines if "sweep" in d]
    losses = sorted(t["objective"] for t in found["trials"])
    assert len(losses) == 2 and all(0 < loss < 1 for loss in losses), found  # (not the decoy)


@pytest.mark.exclusive  # (what /var/tmp and /run/netns hold: no other run beside it)
def test_without_root_several_experiments_run_in_one_user_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a user without root gets (`_in_user_namespace`), run as root with this process
    # taken for another user: each experiment's outcome passed back from the namespace.
    from aichor_iac import doors
    from aichor_iac.local import run_experiments

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    path = tmp_path / "two.yaml"
    path.write_text(
        yaml.safe_dump_all([batch("fails", "echo hi; exit 3"), batch("works", "echo ok")])
    )
    lines: list[tuple[str, str]] = []
    outcomes = run_experiments(doors.load_all(path), on_line=lambda *line: lines.append(line))
    assert outcomes == {"fails": (3, "fails-worker-0"), "works": (0, None)}
    assert {("fails-worker-0", "hi"), ("works-worker-0", "ok")} <= set(lines)  # (passed back)
