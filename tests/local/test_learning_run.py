"""`aichor-iac run --local` of a Katib sweep that learns (issue 54): the run starts with the
trials known without results and grows as trials end, each later trial asked from the
objectives its trials printed (`local.growth`). What the run asks is what the door's pure
function asks from the same objectives: the comparisons of algorithms on many seeds
(tests/doors/test_katib_learning.py) hold for local runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from kube import NEEDS_CLUSTER
from learning_sweep import (
    ended,
    loss,
    median_stop_file,
    median_verdicts,
    reported_median_stop,
    sweep_file,
)

from aichor_iac import cli, doors

pytestmark = NEEDS_CLUSTER


def ran(path: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    """The sweep's table of a local run, as `--output json` gives it."""
    assert cli.main(["run", "--local", str(path), "--output", "json", "--timeout", "300"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (found,) = [d for d in lines if "sweep" in d]
    return found


def asked(path: Path, found: dict) -> list[tuple[str, tuple]]:
    """The trials the door asks from the objectives the run's trials printed."""
    objectives = {row["trial"]: row["objective"] for row in found["trials"]}
    return [(t.name, t.trial.values) for t in doors.load_all(path, ended(objectives))]


def test_a_sweep_that_learns_runs_whole_each_trial_asked_from_the_ones_before(tmp_path, capsys):
    path = sweep_file(tmp_path, "tpe", 1, 10)
    found = ran(path, capsys)
    rows = found["trials"]
    assert len(rows) == 10 and {r["state"] for r in rows} == {"Succeeded"}
    for row in rows:  # (each trial's objective, from the line it printed)
        assert row["objective"] == pytest.approx(loss(row["parameters"]))
    assert [(r["trial"], tuple(r["parameters"].items())) for r in rows] == asked(path, found)
    best = min(rows, key=lambda r: r["objective"])
    assert found["best"] == best["trial"]


def test_tpe_finds_a_better_best_trial_than_random_with_the_same_seed(tmp_path, capsys):
    found = {a: ran(sweep_file(tmp_path, a, 4, 16), capsys) for a in ("tpe", "random")}
    best = {a: min(r["objective"] for r in f["trials"]) for a, f in found.items()}
    assert best["tpe"] < best["random"], best


@pytest.mark.exclusive  # (what /var/tmp and /run/netns hold: no other run beside it)
def test_without_root_a_sweep_that_learns_grows_in_its_user_namespace(
    tmp_path, capsys, monkeypatch
):
    # What a user without root gets: the child tells each outcome, the parent asks the next
    # trials and sends their objects on
    path = sweep_file(tmp_path, "tpe", 2, 6)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    found = ran(path, capsys)
    assert len(found["trials"]) == 6 and {r["state"] for r in found["trials"]} == {"Succeeded"}
    assert [(r["trial"], tuple(r["parameters"].items())) for r in found["trials"]] == asked(
        path, found
    )


def test_median_stop_ends_a_trial_worse_than_the_rule_at_its_start_step(tmp_path, capsys):
    """Katib's medianstop (min_trials_required 1, start_step 2), one trial at a time: each
    trial's rule is the mean of the succeeded trials' first two losses; a trial whose best of
    its first two is worse is stopped there, its pods ended before its last epochs."""
    path = median_stop_file(tmp_path)
    assert cli.main(["run", "--local", str(path), "--output", "json", "--timeout", "300"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (found,) = [d for d in lines if "sweep" in d]
    printed = {}  # each trial's losses, as its pod printed them
    for line in (d for d in lines if "pod" in d and "loss=" in d["line"]):
        printed.setdefault(line["pod"].rsplit("-worker", 1)[0], []).append(line["line"])
    for row, stopped in median_verdicts(found["trials"]):
        if stopped:
            assert row["objective"] == pytest.approx(float(row["parameters"]["x"]) + 1 / 2)
            assert len(printed[row["trial"]]) < 4, printed[row["trial"]]  # (stopped early)


# A trial of an OptimizationJob: its values from KUBEFLOW_TRAINER_OPT_*, its loss reported
REPORTED = (
    "import os\n"
    "from kubeflow.trainer import update_trainjob_status\n"
    "x, y = (float(os.environ[f'KUBEFLOW_TRAINER_OPT_{n}']) for n in 'XY')\n"
    "update_trainjob_status(progress_percent=100, metrics={'loss': (x - 0.3) ** 2 + (y + 0.2) ** 2})"
)


def test_an_optimizationjob_that_learns_runs_whole_from_its_reported_losses(tmp_path, capsys):
    """Trainer's OptimizationJob with tpe under aichor-iac's annotation: each trial gets its
    values as KUBEFLOW_TRAINER_OPT_*, reports its loss (Trainer's progress protocol), and
    each later trial is what the door asks from those reports; the best is `status.result`."""
    data = yaml.safe_load((ROOT / "tests/trainer_optimization/tpe.yaml").read_text())
    spec = data["spec"]
    spec["numTrials"], spec["parameters"] = 6, spec["parameters"][:2]
    spec["trainJobTemplate"]["spec"]["trainer"]["command"] = ["python3", "-c", REPORTED]
    path = tmp_path / "tpe.yaml"
    path.write_text(yaml.safe_dump(data))
    found = ran(path, capsys)
    rows = found["trials"]
    assert len(rows) == 6 and {r["state"] for r in rows} == {"Succeeded"}
    for row in rows:  # (each trial's objective: its report, of the values its variables held)
        assert row["objective"] == pytest.approx(loss(row["parameters"]))
    assert [(r["trial"], tuple(r["parameters"].items())) for r in rows] == asked(path, found)
    best = min(rows, key=lambda r: r["objective"])
    expected = [{"name": n, "value": v} for n, v in best["parameters"].items()]
    assert found["status"] == {"result": {"trainJobName": best["trial"], "parameters": expected}}


def test_an_optimizationjobs_early_stopping_reads_its_reports_and_ends_a_trial(tmp_path, capsys):
    """medianstop under aichor-iac's annotation: each trial reports its losses (Trainer's
    protocol); the check in its pod reads them from the receiver, prints each, and ends a
    trial its rule stops at its second, before its last epochs; the table says EarlyStopped."""
    path = tmp_path / "reported.yaml"
    path.write_text(yaml.safe_dump(reported_median_stop()))
    assert cli.main(["run", "--local", str(path), "--output", "json", "--timeout", "300"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (found,) = [d for d in lines if "sweep" in d]
    printed: dict[str, list[str]] = {}  # each trial's trainer's lines
    for line in (d for d in lines if "pod" in d and "-node-0" in d["pod"]):
        printed.setdefault(line["pod"].rsplit("-node", 1)[0], []).append(line["line"])
    for row, stopped in median_verdicts(found["trials"]):
        said = printed[row["trial"]]
        x = float(row["parameters"]["x"])
        assert f"aichor-report: loss={x + 1}" in said  # (its first report, as a line)
        if stopped:
            assert any(s.startswith("aichor: early stopped at value 2 of loss") for s in said)
            assert "epoch 4" not in said, said
