"""A Katib sweep of 1,000 trials, rendered (issue 53): seconds and peak memory of
`aichor-iac render` at parallelism 1 and 10, each with and without a failure limit
(maxFailedTrialCount 3), the progress receiver on (the default) and off.

    python benchmarks/sweeps.py [TRIALS]

Each render is its own process (its peak memory is its own). Prints a table and the targets;
asserts nothing (machines are shared: a timing is a measure, not a test).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS, TARGET_MB = 10.0, 400  # (issue 53: a 1,000-trial sweep, any parallelism)


def sweep(trials: int, parallel: int, limit: int | None) -> dict:
    """Katib's random example (tests/katib/random.yaml) with `trials` trials."""
    (data,) = [d for d in yaml.safe_load_all((ROOT / "tests/katib/random.yaml").read_text()) if d]
    spec = data["spec"]
    spec.update(maxTrialCount=trials, parallelTrialCount=parallel)
    spec.pop("maxFailedTrialCount", None)
    if limit is not None:
        spec["maxFailedTrialCount"] = limit
    return data


# One render as the console script runs it (`command`: a process that ends with it), then its
# own peak memory (KB) on stderr's last line
RENDER = (
    "import resource, sys\n"
    "from aichor_iac.cli import command\n"
    "code = command()\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def measured(path: Path, progress: bool, folder: Path) -> tuple[float, float]:
    """Seconds and peak MB of one render, in a process of its own."""
    stack = folder / f"Pulumi.{progress}.yaml"
    stack.write_text(yaml.safe_dump({"config": {"aichor:progress": progress}}))
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", RENDER, "render", str(path), "--stack-config", str(stack)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seconds = time.perf_counter() - start
    return seconds, int(done.stderr.split()[-1]) / 1024


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    print(f"render of a {trials}-trial Katib sweep (random search)")
    print(f"{'parallel':>8} {'limit':>5} {'receiver':>8} {'seconds':>8} {'peak MB':>8}")
    with tempfile.TemporaryDirectory() as folder:
        for parallel in (1, 10):
            for limit in (None, 3):
                path = Path(folder) / f"sweep-{parallel}-{limit}.yaml"
                path.write_text(yaml.safe_dump(sweep(trials, parallel, limit)))
                for progress in (True, False):
                    seconds, peak = measured(path, progress, Path(folder))
                    shown = "-" if limit is None else limit
                    on = "on" if progress else "off"
                    print(f"{parallel:>8} {shown:>5} {on:>8} {seconds:>8.1f} {peak:>8.0f}")
    print(f"target: each under {TARGET_SECONDS:.0f} s and {TARGET_MB} MB")


if __name__ == "__main__":
    main()
