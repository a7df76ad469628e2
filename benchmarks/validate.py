"""What a command costs beside its floor (issue 26): `aichor-iac validate` of an example, as an
editor or pre-commit hook calls it, against the floor of importing pydantic and yaml alone; and
`render` of 1,000 workers against its own floor (importing what rendering needs). Median of
RUNS fresh processes each; asserts nothing.

    .venv/bin/python benchmarks/validate.py [RUNS]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
RENDER_1000 = """
from aichor_iac import doors, engine
from aichor_iac.settings import Settings
spec = {"operator": "pytorch", "image": "pytorch/pytorch", "command": "python train.py",
        "types": {"Master": {"count": 1, "resources": {"cpus": 1, "ramRatio": 2}},
                  "Worker": {"count": 999, "resources": {"cpus": 1, "ramRatio": 2}}}}
engine.render(doors.validate({"spec": spec}), settings=Settings(), name="wide")
"""
RENDER_FLOOR = "import aichor_iac.engine, aichor_iac.components, aichor_iac.doors"


def seconds(argv: list[str]) -> float:
    """The median wall time of `argv` in fresh processes."""
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    python = sys.executable
    cli = str(Path(python).with_name("aichor-iac"))
    rows = [
        ("python startup", seconds([python, "-c", "pass"])),
        (
            "import pydantic, yaml (validate's floor)",
            seconds([python, "-c", "import pydantic, yaml"]),
        ),
        (
            "aichor-iac validate examples/pytorch.yaml",
            seconds([cli, "validate", "examples/pytorch.yaml"]),
        ),
        ("import what render needs (its floor)", seconds([python, "-c", RENDER_FLOOR])),
        ("render 1,000 workers", seconds([python, "-c", RENDER_1000])),
    ]
    for what, value in rows:
        print(f"{value:7.3f} s  {what}")
    print(f"\nvalidate / its floor: {rows[2][1] / rows[1][1]:.1f}x (target: under 0.3 s)")
    print(f"render 1,000 / its floor: {rows[4][1] / rows[3][1]:.2f}x (target: 1.3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
