"""Early stopping by Katib's median rule (aichor_iac/pods/stopping.py, issue 54), held to
Katib's own two parts, vendored below from kubeflow/katib 33c8ff4e5 (Apache-2.0):
`MedianStopService.get_median_value` (pkg/earlystopping/v1beta1/medianstop/service.py, its
database reads replaced by the trials' values) and `updateStopRules` with the loop that feeds
it (cmd/metricscollector/v1beta1/file-metricscollector/main.go, from Go)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from aichor_iac import pods
from aichor_iac.doors.katib.door import DEFAULT_FORMAT
from aichor_iac.pods.stopping import median_rule, stopped_at
from aichor_iac.sweeps import algorithms
from aichor_iac.sweeps.collect import STOP


def katib_median(trials_logs: list[list[float]], min_trials_required: int, start_step: int):
    """get_median_value: each succeeded trial's first start_step values averaged; the
    "median", once enough have succeeded, is the mean of the averages."""
    trials_avg_history = {}
    for name, logs in enumerate(trials_logs):
        first_x_logs = logs[:start_step]
        metric_sum = 0
        for value in first_x_logs:
            metric_sum += float(value)
        new_average = metric_sum / len(first_x_logs)
        trials_avg_history[name] = new_average
    if len(trials_avg_history) >= min_trials_required:
        return sum(list(trials_avg_history.values())) / len(trials_avg_history)
    return None


def katib_collector(values: list[float], rule: float, start_step: int, maximize: bool):
    """The collector's loop over the objective's reports with one stop rule (the median's:
    LESS when maximising, GREATER when minimising); the report at which no rule is left."""
    metric_start_step = {"objective": start_step}
    optimal = None
    for number, metric_value in enumerate(values, 1):
        # updateStopRules (its branches as Katib writes them)
        if optimal is None:  # noqa: SIM114
            optimal = metric_value
        elif maximize and metric_value > optimal:  # noqa: SIM114
            optimal = metric_value
        elif not maximize and metric_value < optimal:
            optimal = metric_value
        metric_value = optimal
        metric_start_step["objective"] -= 1
        if metric_start_step["objective"] != 0:
            continue
        if (maximize and metric_value < rule) or (not maximize and metric_value > rule):
            return number  # (the rule deleted: no rule is left, the trial is stopped)
    return None


values = st.floats(-100, 100, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(
    succeeded=st.lists(st.lists(values, min_size=1, max_size=8), max_size=6),
    min_trials_required=st.integers(1, 5),
    start_step=st.integers(1, 6),
)
def test_the_rules_value_is_katibs(succeeded, min_trials_required, start_step):
    ours = median_rule(succeeded, min_trials_required, start_step)
    theirs = katib_median(succeeded, min_trials_required, start_step)
    assert ours == pytest.approx(theirs) if theirs is not None else ours is None


@settings(max_examples=300, deadline=None)
@given(
    reported=st.lists(values, max_size=10),
    rule=values,
    start_step=st.integers(1, 6),
    maximize=st.booleans(),
)
def test_a_trial_is_stopped_where_katibs_collector_stops_it(reported, rule, start_step, maximize):
    ours = stopped_at(reported, rule, maximize, start_step)
    assert ours == katib_collector(reported, rule, start_step, maximize)


def test_no_rule_before_enough_trials_have_succeeded_and_none_stops():
    assert median_rule([[1.0], [2.0]], min_trials_required=3) is None
    assert median_rule([[1.0, 3.0, 9.0], [2.0]], min_trials_required=2, start_step=2) == 2.0
    assert stopped_at([5.0, 4.0, 3.0, 2.0], None, maximize=False) is None
    # minimising: the best of the first 4 (2.5) is above the rule (2.0): stopped at the 4th
    assert stopped_at([5.0, 4.0, 3.0, 2.5, 0.1], 2.0, maximize=False) == 4
    # only at start_step: a trial better there goes on, whatever it reports after
    assert stopped_at([5.0, 4.0, 3.0, 1.0, 9.0], 2.0, maximize=False) is None


def test_katibs_median_stop_examples_settings_are_taken():
    (data,) = [
        d for d in yaml.safe_load_all((ROOT / "tests/katib/median-stop.yaml").read_text()) if d
    ]
    stopping = data["spec"]["earlyStopping"]
    given = [(s["name"], s["value"]) for s in stopping["algorithmSettings"]]
    assert [algorithms.stopping_problem(n, v) for n, v in given] == [None, None]
    assert algorithms.stopping_settings(given) == (1, 2)
    assert algorithms.stopping_settings([]) == (3, 4)


@pytest.mark.parametrize(
    ("name", "value", "refused"),
    [
        ("min_trials_required", "0", "min_trials_required must be greater than zero (>0)"),
        ("start_step", "0", "start_step must be greater or equal than one (>=1)"),
        ("start_step", "two", "failed to validate start_step(two)"),
        ("patience", "3", "unknown setting patience for algorithm medianstop"),
    ],
)
def test_a_setting_katibs_medianstop_refuses_is_refused_in_its_words(name, value, refused):
    assert refused in (algorithms.stopping_problem(name, value) or "")


# -- the check in the trial's pod (`main`, run by the image's python3 under collect.STOP) ------

RULE = {"metric": "loss", "formats": [DEFAULT_FORMAT], "start_step": 2, "rule": 0.5}
EPOCHS = "import time\nfor e in (0.9, 0.8, 0.1):\n    print(f'loss={e}')\n    time.sleep(0.3)\n"


def in_pod(rule: dict, *command: str, path: str | None = None) -> subprocess.CompletedProcess:
    """The primary container's command under its rule, as its pod runs it."""
    spec = json.dumps({"maximize": False, **rule})
    source = pods.source("stopping")
    env = {**os.environ, **({"PATH": path} if path is not None else {})}
    argv = ["/bin/sh", "-c", STOP, "aichor-stop", source, spec, *command]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)


def test_in_its_pod_a_trial_its_rule_stops_ends_its_command_there_and_completes():
    done = in_pod(RULE, sys.executable, "-c", EPOCHS + "print('trained')")
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        "loss=0.9",
        "loss=0.8",
        "aichor: early stopped at value 2 of loss: its best 0.8 is worse than the median rule 0.5",
    ]


@pytest.mark.parametrize(("rule", "code"), [(0.85, 0), (None, 0), (0.85, 3)])
def test_in_its_pod_a_trial_its_rule_does_not_stop_runs_to_its_end_with_its_status(rule, code):
    done = in_pod({**RULE, "rule": rule}, sys.executable, "-c", EPOCHS + f"exit({code})")
    assert done.returncode == code
    assert done.stdout.splitlines() == ["loss=0.9", "loss=0.8", "loss=0.1"]


def test_in_its_pod_the_check_stops_every_process_the_command_started():
    started = (
        f"{sys.executable} -c \"import time; print('loss=2', flush=True); time.sleep(60)\" & wait"
    )
    before = time.monotonic()
    done = in_pod({**RULE, "start_step": 1}, "/bin/sh", "-c", started)
    assert done.returncode == 0 and time.monotonic() - before < 30
    assert "aichor: early stopped at value 1 of loss" in done.stdout


def test_in_its_pod_the_command_is_arguments_never_shell_text(tmp_path):
    hostile = f"$(touch {tmp_path}/escaped); `touch {tmp_path}/escaped`"
    done = in_pod(RULE, "/bin/echo", hostile)
    assert done.stdout.splitlines() == [hostile] and not (tmp_path / "escaped").exists()
    without = in_pod(RULE, "/bin/echo", hostile, path=str(tmp_path))  # (no python3 there)
    assert without.stdout.splitlines() == [hostile] and not (tmp_path / "escaped").exists()
    assert "no python3 in the image: its early stopping rule ends no process" in without.stderr
