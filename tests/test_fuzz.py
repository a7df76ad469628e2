"""The fuzzer in `make test` (tests/fuzz.py): 5,000 seeded mutations of the examples and of
every door's custom resource files, each
accepted or refused with one clean line per problem; never a crash, a hang, a disagreement
between `validate` and `render`, an object the API server would reject or a user's `$(...)`
where a shell runs it. `make fuzz` runs 100,000."""

from __future__ import annotations

import functools

import pytest
from fuzz import HOSTILE, KINDS, MAX_CASE_MIB, _unquoted, check, run, zero_cases


@pytest.mark.slow  # (half a minute: the quick tier keeps the zero counts and the seeds)
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


@functools.cache
def at_zero() -> list[tuple[str, str]]:
    """`fuzz.zero_cases()`, made once per test process when a test first asks for them (not
    at collection: three seconds in each process)."""
    return zero_cases()


DOORS = (*KINDS, "AIchorManifest")  # (what `fuzz.door_of` tells)


@pytest.mark.xdist_group("zero-counts")  # (one test process makes the cases)
@pytest.mark.parametrize("door", DOORS)
def test_each_count_of_each_doors_files_at_zero_is_taken_or_refused(door):
    """Every count of every custom resource file (replicas, completions, nodes, trials,
    slots…) set to 0 in turn: accepted and rendered as the API server takes it, or refused
    at its field; never a crash (a JobSet's only replicated Job at 0: issue 68)."""
    outcomes = [check(text, render_it=True) for each, text in at_zero() if each == door]
    assert outcomes
    assert [d for o, d in outcomes if o not in ("accepted", "refused")] == []


@pytest.mark.xdist_group("zero-counts")
def test_the_zero_counts_reach_every_door():
    """(An AIchor manifest's counts: `fuzz.plausible` sets a group's count to 0.)"""
    assert set(KINDS) <= {door for door, _ in at_zero()} <= set(DOORS)


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
