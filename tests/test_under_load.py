"""benchmarks/stress.py, short (issue 50): the first hour's commands beside a CPU hog. A local
run of the jobset example loses no shipped log, no sidecar is killed, each run ends within 10 s;
renders four at a time print nothing after their result. Exclusive: the hog takes the machine
(`make test` runs these alone, after the rest)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from kube import LocalCluster

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("stress", ROOT / "benchmarks" / "stress.py")
stress = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stress)


@pytest.mark.exclusive
@pytest.mark.skipif(not LocalCluster.available(), reason="needs `ip netns` (root)")
def test_local_runs_under_load_lose_no_log() -> None:
    assert stress.local_runs(4) == []


@pytest.mark.exclusive
def test_renders_under_load_end_quietly() -> None:
    assert stress.renders(8) == []
