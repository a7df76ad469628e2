"""Render benchmark: wall time (start-up included) and resource counts for PyTorch, MPI and Ray
manifests with 1, 100 and 1,000 workers. Prints figures; asserts nothing (machines are shared
and noisy).

    make bench        # or: .venv/bin/python benchmarks/render.py
Target (issue 2): the object count is the same for every size, and the 1,000-worker render
takes at most 1.5 s on a 2-core machine.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from aichor_iac import doors, engine

SIZES = (1, 100, 1000)
RUNS = 5
TARGET_SECONDS = 1.5


def pytorch(workers: int) -> dict:
    resources = {"cpus": 4, "ramRatio": 3, "accelerators": {"gpu": {"count": 1}}}
    return {
        "kind": "AIchorManifest",
        "apiVersion": "0.2.2",
        "name": f"bench-{workers}",
        "spec": {
            "operator": "pytorch",
            "image": "pytorch/pytorch:2.3.1",
            "command": "python train.py",
            "types": {
                "Master": {"count": 1, "resources": resources},
                "Worker": {"count": workers, "resources": resources},
            },
        },
    }


def mpi(workers: int) -> dict:
    data = pytorch(workers)
    types = data["spec"]["types"]
    data["spec"].update(operator="mpi", command="mpirun python train.py")
    data["spec"]["types"] = {"Launcher": types["Master"], "Worker": types["Worker"]}
    return data


def ray(workers: int) -> dict:
    data = pytorch(workers)
    types = data["spec"]["types"]
    data["spec"].update(operator="ray")
    data["spec"]["types"] = {
        "Head": types["Master"],
        "Workers": [{"name": "gpu-workers", **types["Worker"]}],
        "Job": types["Master"],
    }
    return data


MANIFESTS = {"pytorch": pytorch, "mpi": mpi, "ray": ray}


def main() -> None:
    cli = [sys.executable, "-m", "aichor_iac.cli", "render"]
    print(
        f"{'framework':>9} {'workers':>8} {'pulumi resources':>17} {'k8s objects':>12} "
        f"{'render s (median of 5)':>23} {'max s':>7}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for (framework, build), workers in (
            (item, size) for item in MANIFESTS.items() for size in SIZES
        ):
            path = Path(tmp) / f"{framework}-{workers}.yaml"
            path.write_text(yaml.safe_dump(build(workers)))
            rendering = engine.expand(doors.load(path))
            times = []
            for _ in range(RUNS):
                start = time.perf_counter()
                subprocess.run([*cli, str(path)], check=True, stdout=subprocess.DEVNULL)
                times.append(time.perf_counter() - start)
            print(
                f"{framework:>9} {workers:>8} {len(rendering.resources):>17} "
                f"{len(rendering.objects):>12} "
                f"{statistics.median(times):>23.3f} {max(times):>7.3f}"
            )
    print(f"target: same object count for every size; 1000 workers <= {TARGET_SECONDS} s")


if __name__ == "__main__":
    main()
