"""Platform limits: the largest experiment of each framework that `aichor-iac validate` (and so
`render` and `pulumi up`) accepts, found by bisection on the replica count of each example's
scaling group, and what refuses the next size. Prints the table of docs/limits.md
("Limits and guarantees"); asserts nothing.

    .venv/bin/python benchmarks/limits.py
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from aichor_iac import doors, planning
from aichor_iac.k8s import layout
from aichor_iac.k8s.context import Context
from aichor_iac.problems import ManifestError
from aichor_iac.rules import limits

ROOT = Path(__file__).resolve().parent.parent
# (example, the type whose count grows, and for Ray the pool)
CASES = [
    ("pytorch", "Worker", None),
    ("pytorch-torchrun", "Worker", None),
    ("xgboost", "Worker", None),
    ("jax", "Worker", None),
    ("paddle", "Worker", None),
    ("tf", "Worker", None),
    ("mpi-horovod", "Worker", None),
    ("ray", "Workers", 0),
    ("kuberay", "Workers", 0),
    ("jobset", "shard", None),
]


def with_count(document: dict[str, Any], role: str, pool: int | None, count: int) -> dict:
    document = copy.deepcopy(document)
    types = {k.lower(): v for k, v in document["spec"]["types"].items()}
    group = types[role.lower()]
    (group[pool] if pool is not None else group)["count"] = count
    document["spec"]["types"] = types
    return document


def refusal(document: dict[str, Any]) -> str | None:
    """Why validate refuses the document, or None."""
    try:
        model = doors.validate(document)
        layout.build(Context(planning.blueprint(model, name=document.get("name", "x"))))
    except ManifestError as error:
        return str(error).splitlines()[0]
    return None


def largest(document: dict[str, Any], role: str, pool: int | None) -> tuple[int, str]:
    low, high = 1, limits.MAX_INDEXED + 1  # low is accepted; find the first refused count
    if refusal(with_count(document, role, pool, high - 1)) is None:
        return high - 1, "an Indexed Job's 100,000 completions"
    while high - low > 1:
        middle = (low + high) // 2
        if refusal(with_count(document, role, pool, middle)) is None:
            low = middle
        else:
            high = middle
    why = refusal(with_count(document, role, pool, high)) or ""
    return low, re.sub(r"^<manifest>(:\d+)?: ", "", why)


def main() -> None:
    print("| example | group | largest count | what refuses one more |")
    print("|---|---|---|---|")
    for name, role, pool in CASES:
        document = yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text())
        count, why = largest(document, role, pool)
        print(f"| {name} | {role} | {count:,} | {why[:160]} |")


if __name__ == "__main__":
    main()
