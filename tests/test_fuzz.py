"""The fuzzer in `make test` (tests/fuzz.py): 5,000 seeded mutations of the examples and of
every door's custom resource files, each
accepted or refused with one clean line per problem; never a crash, a hang, a disagreement
between `validate` and `render`, an object the API server would reject or a user's `$(...)`
where a shell runs it. `make fuzz` runs 100,000."""

from __future__ import annotations

import pytest
from fuzz import HOSTILE, MAX_CASE_MIB, _unquoted, run


def test_five_thousand_hostile_manifests_end_cleanly():
    report = run(5000, seed=0, renders=100)
    assert not report.failures, "\n".join(report.failures[0])
    assert report.outcomes["accepted"] >= 500 and report.outcomes["refused"] >= 1000
    assert report.rendered >= 100  # both paths exercised, and many renders
    assert report.peak_growth <= MAX_CASE_MIB
    doors = {door for door, _ in report.doors}
    assert {"AIchorManifest", "PyTorchJob", "MPIJob", "RayJob", "RayCluster"} <= doors
    assert {
        "JobSet",
        "TrainJob",
        "TFJob",
        "XGBoostJob",
        "JAXJob",
        "PaddleJob",
        "Experiment",
        "OptimizationJob",
    } <= doors


@pytest.mark.parametrize(
    ("script", "runs"),
    [
        (f"echo {HOSTILE}", True),
        (f'echo "{HOSTILE}"', True),
        (f"echo '{HOSTILE}'", False),
        (f"echo 'a'\"'\"'{HOSTILE}'", False),
        (f'echo "it\'s" {HOSTILE}', True),
        (f"echo \\{HOSTILE}", False),
        (f"f() {{ :; }}; f '{HOSTILE}' \"$1\"", False),
    ],
)
def test_the_injection_check_knows_where_sh_expands(script, runs):
    assert _unquoted(script, HOSTILE) is runs
