"""Start-up against its floor (issues 40 and 51): `aichor-iac validate` of a file of each door,
as an editor or a pre-commit hook calls it, against importing pydantic and yaml alone; and a
render of 1,000 workers against importing what a render cannot do without (pulumi, the
pulumi_kubernetes modules of the kinds it creates, pydantic, yaml). Paired runs (the floor, then
the command, RUNS times, in fresh processes with the bytecode compiled), medians compared;
prints each ratio beside its goal and asserts nothing (machines are shared and noisy).

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
VALIDATE_FLOOR = "from pydantic import BaseModel; import yaml"
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
# A file of each door (Trainer's is kubeflow/trainer's examples/yaml/01-multi-node)
DOORS = {
    "AIchor manifest": "examples/pytorch.yaml",
    "Kubeflow PyTorchJob": "examples/pytorchjob.yaml",
    "MPIJob": "tests/kubeflow/mpi-pi.yaml",
    "KubeRay RayJob": "tests/kuberay/ray-job.batch-inference.yaml",
    "JobSet": "tests/jobset/depends-on.depends-on.yaml",
    "Trainer TrainJob": "tests/trainer/yaml.01-multi-node.yaml",
    "Katib Experiment": "examples/sweep.yaml",
}


def seconds(argv: list[str]) -> float:
    """The median wall time of `argv` in fresh processes (one run first, to warm the caches)."""
    return paired(argv, argv)[0]


def paired(floor: list[str], command: list[str]) -> tuple[float, float]:
    """The median wall times of the floor and the command, run in turn RUNS times (one run of
    each first, to warm the caches), so that both meet the machine's same moments."""
    times: tuple[list[float], list[float]] = ([], [])
    for turn in range(RUNS + 1):
        for argv, found in zip((floor, command), times, strict=True):
            start = time.perf_counter()
            subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)
            if turn:
                found.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def main() -> int:
    python = sys.executable
    cli = str(Path(python).with_name("aichor-iac"))
    subprocess.run([python, "-m", "compileall", "-q", "aichor_iac"], cwd=ROOT, check=True)
    pairs = {
        f"validate, {door}": (
            ("from pydantic import BaseModel; import yaml", [python, "-c", VALIDATE_FLOOR]),
            (f"aichor-iac validate {path}", [cli, "validate", path]),
        )
        for door, path in DOORS.items()
    }
    pairs |= {
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
        low, high = paired(floor, command)
        goal = GOALS[what.split(", ")[0]]
        print(f"{low:7.3f} s  {floor_name} (the floor)")
        print(f"{high:7.3f} s  {command_name}")
        print(f"          {what}: {high / low:.2f}x its floor (goal: at most {goal}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
