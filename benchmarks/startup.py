"""Start-up against its floor (issue 40): `aichor-iac validate` of an example, as an editor or a
pre-commit hook calls it, against importing pydantic and yaml alone; and a render of 1,000
workers against importing what a render cannot do without (pulumi, the pulumi_kubernetes
modules of the kinds it creates, pydantic, yaml). Median wall time of RUNS fresh processes
each; prints the two ratios beside their goals and asserts nothing (machines are shared and
noisy).

    .venv/bin/python benchmarks/startup.py [RUNS]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 9
VALIDATE_FLOOR = "import pydantic, yaml"
# The modules of the kinds the render creates (a Service, Jobs, a NetworkPolicy: AIchor's
# default), beside the engine and the parsing every render needs.
RENDER_FLOOR = (
    "import pulumi, pulumi_kubernetes.core.v1, pulumi_kubernetes.batch.v1, "
    "pulumi_kubernetes.networking.v1, pydantic, yaml"
)
RENDER_1000 = """
from aichor_iac import doors, engine
from aichor_iac.settings import Settings
spec = {"operator": "pytorch", "image": "pytorch/pytorch", "command": "python train.py",
        "types": {"Master": {"count": 1, "resources": {"cpus": 1, "ramRatio": 2}},
                  "Worker": {"count": 999, "resources": {"cpus": 1, "ramRatio": 2}}}}
engine.render(doors.validate({"spec": spec}), settings=Settings(), name="wide")
"""
GOALS = {"validate": 2.5, "render 1,000 workers": 1.3}


def seconds(argv: list[str]) -> float:
    """The median wall time of `argv` in fresh processes (one run first, to warm the caches)."""
    subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    python = sys.executable
    cli = str(Path(python).with_name("aichor-iac"))
    pairs = {
        "validate": (
            ("import pydantic, yaml", [python, "-c", VALIDATE_FLOOR]),
            (
                "aichor-iac validate examples/pytorch.yaml",
                [cli, "validate", "examples/pytorch.yaml"],
            ),
        ),
        "render 1,000 workers": (
            (
                "import pulumi, pulumi_kubernetes core/v1, batch/v1, networking/v1, pydantic, yaml",
                [python, "-c", RENDER_FLOOR],
            ),
            ("render of 1,000 PyTorch workers", [python, "-c", RENDER_1000]),
        ),
    }
    print(f"{seconds([python, '-c', 'pass']):7.3f} s  python start-up")
    for what, ((floor_name, floor), (command_name, command)) in pairs.items():
        low, high = seconds(floor), seconds(command)
        print(f"{low:7.3f} s  {floor_name} (the floor)")
        print(f"{high:7.3f} s  {command_name}")
        print(f"          {what}: {high / low:.2f}x its floor (goal: at most {GOALS[what]}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
