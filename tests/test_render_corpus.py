"""Every input, rendered, gives what tests/golden/renders.json records (tests/render_corpus.py):
a refactor changes no byte of any object, option, output, warning or error. A change that
means to alter a rendering records it again (`python tests/render_corpus.py --write`) and
says why in its commit."""

from __future__ import annotations

import pytest
from render_corpus import cases, digest, progress_change, recorded

RECORDED = recorded()


def test_the_record_covers_every_case():
    assert sorted(RECORDED) == sorted(cases())


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_a_case_renders_as_recorded(case):
    assert digest(*cases()[case]) == RECORDED[case], (
        f"{case} renders differently: run `python tests/render_corpus.py` to list the cases "
        "that changed, `--write` to record them if the change is meant"
    )


@pytest.mark.parametrize("case", sorted(c for c in RECORDED if not c.startswith("fuzz")))
def test_progress_adds_only_the_receiver(case):
    """`aichor:progress: false` gives each case's objects as they were before the receiver;
    on, it adds the receiver's objects, variables and files, and nothing else (issue 52)."""
    assert progress_change(case) != "more", (
        f"aichor:progress changes more than the receiver in {case}: "
        "`python tests/render_corpus.py --progress` lists what it changes in each case"
    )
