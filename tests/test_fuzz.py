"""The fuzzer in `make test` (tests/fuzz.py): 5,000 seeded mutations of the examples, each
accepted or refused with one clean line per problem, never a crash; the first accepted ones
are rendered and pass `kubernetes-validate` strict. `make fuzz` runs 100,000."""

from __future__ import annotations

from fuzz import run


def test_five_thousand_hostile_manifests_end_cleanly():
    outcomes, failures = run(5000, seed=0, renders=50)
    assert not failures, failures[0][0] + failures[0][1]
    assert outcomes["accepted"] >= 50 and outcomes["refused"] >= 1000  # both paths exercised
