"""A sweep's results (aichor_iac/sweeps/results.py): metrics read as Katib's StdOut collector reads
them, each metric's value by its strategy, the best trial for the objective's direction."""

from __future__ import annotations

from dataclasses import replace

import pytest
from rich.console import Console

from aichor_iac.doors.katib.door import DEFAULT_FORMAT
from aichor_iac.experiment.state import State
from aichor_iac.experiment.trial import MARKER, Objective, Stopping, Trial
from aichor_iac.observe import status as states
from aichor_iac.sweeps import results as sweeps

LOSS = Objective(
    "loss",
    "minimize",
    None,
    ("accuracy",),
    (("loss", "min"), ("accuracy", "min")),
    (DEFAULT_FORMAT,),
)


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["loss=0.5"], {"loss": [0.5]}),
        (["epoch 1: loss = 0.25, accuracy=0.9 lr=0.1"], {"loss": [0.25], "accuracy": [0.9]}),
        (["loss=1e-3", "loss=-2.5E+1"], {"loss": [0.001, -25.0]}),
        (["loss=", "loss=abc", "no metric here", "val-loss=0.3"], {}),
        (["loss=0.5 loss=0.4"], {"loss": [0.5, 0.4]}),
    ],
)
def test_metrics_are_read_as_katibs_stdout_collector_reads_them(lines, expected):
    assert sweeps.metrics(lines, LOSS) == expected


def test_a_custom_filter_and_no_collector():
    custom = Objective("loss", "minimize", formats=(r"(\w+):\s+(\S+)",))
    assert sweeps.metrics(["loss: 0.5", "loss=0.1"], custom) == {"loss": [0.5]}
    assert sweeps.metrics(["loss=0.1"], Objective("loss", "minimize", formats=None)) == {}


@pytest.mark.parametrize(("strategy", "expected"), [("min", 0.2), ("max", 0.9), ("latest", 0.4)])
def test_a_metrics_value_is_its_strategys(strategy, expected):
    assert sweeps.value([0.9, 0.2, 0.4], strategy) == expected
    assert sweeps.value([], strategy) is None


def trial(index: int, objective: Objective) -> Trial:
    return Trial("s", index, 3, 1, (("lr", str(index)),), objective=objective)


@pytest.mark.parametrize(("direction", "best"), [("minimize", "s-1"), ("maximize", "s-0")])
def test_the_best_trial_is_the_objectives_direction(direction, best):
    objective = Objective("loss", direction, formats=(DEFAULT_FORMAT,))
    found = sweeps.report(
        [
            sweeps.TrialRun("s-2", trial(2, objective), "Waiting", [], None),
            sweeps.TrialRun("s-0", trial(0, objective), "Succeeded", ["loss=0.9"], None),
            sweeps.TrialRun("s-1", trial(1, objective), "Failed", ["loss=0.1"], None),
        ]
    )
    assert [r["trial"] for r in found["trials"]] == ["s-0", "s-1", "s-2"]
    assert [r["objective"] for r in found["trials"]] == [0.9, 0.1, None]
    assert found["best"] == best


@pytest.mark.parametrize(
    ("limit", "states", "failed"),
    [
        (None, ["Failed", "Failed"], False),  # (no limit: every trial runs)
        (0, ["Succeeded", "Running"], False),
        (0, ["Failed", "Not created"], True),  # (0 and 1: at the first failed trial)
        (1, ["Failed", "Not created"], True),
        (2, ["Failed", "Succeeded"], False),
        (2, ["Failed", "Failed"], True),
        # (a trial that succeeded without its objective is MetricsUnavailable: it counts)
        (2, ["Failed", "Succeeded without loss"], True),
    ],
)
def test_a_sweep_fails_once_as_many_trials_failed_as_its_limit(limit, states, failed):
    # Katib's UpdateExperimentStatusCondition: `failed != 0 && failed >= maxFailedTrialCount`,
    # where failed = TrialsFailed + TrialMetricsUnavailable
    places = [Trial("s", i, 2, 1, (("lr", str(i)),), limit, LOSS) for i in range(2)]
    found = sweeps.report(
        [
            sweeps.TrialRun(
                f"s-{i}", places[i], st.split()[0], [] if "without" in st else ["loss=0.5"], None
            )
            for i, st in enumerate(states)
        ]
    )
    assert found["failed"] is failed
    caption = str(sweeps.table(found).caption)
    assert (
        "the sweep failed: as many trials failed as its maxFailedTrialCount" in caption
    ) is failed


def test_a_sweep_without_results_names_no_best():
    found = sweeps.report([sweeps.TrialRun("s-0", trial(0, LOSS), "Running", ["starting"], None)])
    assert found["best"] is None and found["trials"][0]["metrics"] == {"accuracy": None}


FILE_TEXT = Objective("loss", "minimize", formats=(DEFAULT_FORMAT,), file="/katib/m.log")
FILE_JSON = Objective("loss", "minimize", additional=("acc",), file="/k/m.json", json=True)


@pytest.mark.parametrize(
    ("objective", "lines", "expected"),
    [
        # The File collector: only the file's lines (after the marker) count
        (FILE_TEXT, ["loss=0.9", f"{MARKER}epoch 1 loss=0.3"], {"loss": [0.3]}),
        # JSON: an object per line, string values (Katib's `.(string)`), others skipped
        (
            FILE_JSON,
            [f'{MARKER}{{"loss": "0.5", "acc": "0.7"}}', f'{MARKER}{{"loss": 0.1}}', MARKER],
            {"loss": [0.5], "acc": [0.7]},
        ),
        # a line that is no JSON object spoils the file, as it fails Katib's collection
        (FILE_JSON, [f'{MARKER}{{"loss": "0.5"}}', f"{MARKER}loss=0.1"], {}),
        (FILE_JSON, [f'{MARKER}["loss"]'], {}),
    ],
)
def test_the_file_collectors_lines_are_read_as_katib_reads_the_file(objective, lines, expected):
    assert sweeps.metrics(lines, objective) == expected


def test_a_trial_reporting_its_objective_takes_it_from_its_last_report():
    """Issue 52: a metric named as the objective in a trial's last progress report is its
    value there (its lines are not needed); the table shows each trial's progress."""
    objective = Objective("loss", "minimize", formats=(DEFAULT_FORMAT,))
    status = {
        "progressPercentage": 40,
        "metrics": [{"name": "loss", "value": "0.25"}, {"name": "note", "value": "warm"}],
    }
    found = sweeps.report(
        [
            sweeps.TrialRun("s-0", trial(0, objective), "Running", ["loss=0.9"], status),
            sweeps.TrialRun("s-1", trial(1, objective), "Succeeded", ["loss=0.5"], None),
        ]
    )
    assert [(r["objective"], r["progress"]) for r in found["trials"]] == [(0.25, 40), (0.5, None)]
    assert found["best"] == "s-0"
    assert sweeps.reports_objective(status, trial(0, objective))
    assert not sweeps.reports_objective(
        {"metrics": [{"name": "loss", "value": "n/a"}]}, trial(0, objective)
    )
    console = Console(width=200, record=True)
    console.print(sweeps.table(found))
    header, first = console.export_text().splitlines()[:2]
    assert header.split()[:4] == ["trial", "lr", "state", "progress"]
    assert first.split()[:4] == ["s-0", "*", "0", "Running"] and "40%" in first


def stopped_trial(rule: float | None, index: int = 0) -> Trial:
    """A trial of a sweep with early stopping, which learns (its rule from the others')."""
    objective = Objective("loss", "minimize", formats=(DEFAULT_FORMAT,))
    names = ("s-0", "s-1", "s-2")
    return replace(trial(index, objective), stopping=Stopping(1, 2, rule), names=names)


@pytest.mark.parametrize(
    ("rule", "state", "lines", "expected"),
    [
        # best of the first two (0.5) worse than the rule: stopped at the second, whatever came
        # after it (its stop came late, or its pods failed)
        (0.4, "Succeeded", ["loss=0.9", "x", "loss=0.5", "loss=0.1"], ("EarlyStopped", 0.5, 3)),
        (0.4, "Failed", ["loss=0.9", "loss=0.5", "loss=0.1"], ("EarlyStopped", 0.5, 2)),
        (0.4, "EarlyStopped", ["loss=0.9", "loss=0.5"], ("EarlyStopped", 0.5, 2)),
        (0.6, "Succeeded", ["loss=0.9", "loss=0.5", "loss=0.1"], ("Succeeded", 0.1, 3)),
        (None, "Succeeded", ["loss=0.9", "loss=0.5", "loss=0.1"], ("Succeeded", 0.1, 3)),
        (0.4, "Running", ["loss=0.9", "loss=0.5"], ("Running", 0.5, 2)),  # (not ended yet)
        (0.4, "Succeeded", ["loss=0.9"], ("Succeeded", 0.9, 1)),  # (too few to be judged)
    ],
)
def test_a_trial_its_rule_stops_is_read_as_stopped_at_the_value_that_stopped_it(
    rule, state, lines, expected
):
    place = stopped_trial(rule)
    judged, kept, _ = sweeps.judged(place, state, lines, {"metrics": []})
    row = sweeps.report([sweeps.TrialRun("s-0", place, state, lines, None)])["trials"][0]
    assert (judged, row["state"], row["objective"], len(kept)) == (
        expected[0],
        expected[0],
        expected[1],
        expected[2],
    )
    (result,) = sweeps.ended([sweeps.TrialRun("s-0", place, state, lines, None)]).values() or [None]
    if expected[0] != "Running":
        assert (result.state, result.objective) == expected[:2]


@pytest.mark.parametrize(
    ("groups", "phases", "state"),
    [
        ([("Complete", "w")], {"Succeeded": 1}, "Succeeded"),
        ([("Failed", "w")], {"Failed": 1}, "Failed"),
        ([(None, "w")], {"Running": 1}, "Running"),
        ([(None, "w")], {"Succeeded": 1, "Pending": 1}, "Running"),  # (one has run)
        ([(None, "w")], {"Pending": 2}, "Pending"),  # (created, nothing started)
        ([(None, "w")], {}, "Pending"),
        ([("Complete", "other")], {"Succeeded": 1}, "Running"),  # (not its entry Job)
        ([], {}, "Waiting"),  # (not created yet: waits for the trials before it)
    ],
)
def test_an_experiments_state_is_one_name_for_every_view(groups, phases, state):
    """`status`, the dashboard and the record read an experiment's state by one function,
    in one set of names (status said Running, the page Pending, for one trial)."""
    found = {"groups": [{"job": job, "condition": c} for c, job in groups], "phases": phases}
    assert states.state(found, "w") == state and isinstance(states.state(found, "w"), State)


def test_an_optimizationjobs_best_trial_is_its_status_result_in_the_crds_shape():
    reported = Objective("val_loss", "minimize", strategies=(("val_loss", "latest"),))
    places = [
        replace(trial(i, reported), values=(("lr", f"0.{i + 1}"), ("batch", "32")), kind=kind)
        for i, kind in enumerate(["OptimizationJob"] * 3)
    ]
    report = {"metrics": [{"name": "val_loss", "value": "0.5"}]}
    rows = [
        sweeps.TrialRun("s-0", places[0], "Succeeded", [], report),
        sweeps.TrialRun(
            "s-1", places[1], "Succeeded", [], {"metrics": [{"name": "val_loss", "value": "0.25"}]}
        ),
        sweeps.TrialRun("s-2", places[2], "Running", [], None),
    ]
    found = sweeps.report(rows)
    result = {"trainJobName": "s-1", "parameters": [{"name": "lr", "value": "0.2"}]}
    result["parameters"].append({"name": "batch", "value": "32"})
    assert found["status"] == {"result": result}
    console = Console(width=120, record=True)
    console.print(sweeps.view(found))
    shown = console.export_text()
    assert "status:\n  result:\n    trainJobName: s-1\n    parameters:\n    - name: lr\n" in shown
    assert "status" not in sweeps.report(rows[2:])  # (no best yet)
    katib = [sweeps.TrialRun(n, replace(p, kind="Experiment"), s, li, r) for n, p, s, li, r in rows]
    assert "status" not in sweeps.report(katib)  # (Katib's: the table alone)


@pytest.mark.parametrize(
    ("lines", "state", "printed", "said"),
    [
        (["loss=0.5"], "Succeeded", None, None),
        (
            ["epoch=1 lost=0.5", "accuracy=0.9"],
            "MetricsUnavailable",
            ["accuracy", "epoch", "lost"],
            "s-0 ended without its objective loss: it printed accuracy, epoch, lost; did you "
            "mean lost?",
        ),
        (
            ["nothing here"],
            "MetricsUnavailable",
            [],
            "s-0 ended without its objective loss: it printed no metric its collector reads",
        ),
    ],
)
def test_a_trial_that_ends_without_its_objective_is_metrics_unavailable(
    lines, state, printed, said
):
    """As Katib's trial controller marks it; it counts as failed against maxFailedTrialCount
    (Katib: TrialsFailed + TrialMetricsUnavailable), and says what it printed instead."""
    place = replace(trial(0, LOSS), max_failed=1)
    found = sweeps.report([sweeps.TrialRun("s-0", place, "Succeeded", lines, None)])
    (row,) = found["trials"]
    assert row["state"] == state and row.get("printed") == printed
    assert found["failed"] is (state == "MetricsUnavailable")
    if said:
        assert sweeps.unavailable(row, "loss") == said
        console = Console(width=1000, record=True)
        console.print(sweeps.table(found))
        assert said in console.export_text()


def test_a_trial_not_collected_is_never_metrics_unavailable():
    """A sweep whose metrics are not in the trials' output (formats None) says nothing of
    them: a trial that succeeded succeeded."""
    place = trial(0, replace(LOSS, formats=None))
    found = sweeps.report([sweeps.TrialRun("s-0", place, "Succeeded", ["x"], None)])
    assert found["trials"][0]["state"] == "Succeeded" and not found["failed"]


def test_a_sweep_is_asked_again_with_its_ended_trials_only_if_it_learns():
    # (a sweep fixed beforehand knows all its trials: the Pulumi program, `up --until-done`
    # and `run --local` ask again only those that learn, from `ended`)
    fixed = trial(0, LOSS)
    learning = replace(trial(1, LOSS), names=("s-0", "s-1", "s-2"))
    found = sweeps.ended(
        [
            sweeps.TrialRun("f-0", fixed, "Succeeded", ["loss=0.5"], None),
            sweeps.TrialRun("s-1", learning, "Succeeded", ["loss=0.4"], None),
            sweeps.TrialRun("s-2", learning, "Running", ["loss=0.3"], None),
        ]
    )
    assert {name: (r.state, r.objective) for name, r in found.items()} == {
        "s-1": ("Succeeded", 0.4)
    }
