"""The first hour under load (issue 50): a new user's machine is rarely idle.

    python benchmarks/stress.py local-runs [N]   # run --local of the jobset example, N times
    python benchmarks/stress.py renders [N]      # render of a Katib sweep, N times, 4 at a time

Both run beside a CPU hog (two busy processes per core; STRESS_HOGS_PER_CORE sets it).
`local-runs`: `aichor-iac run --local examples/jobset.yaml --replicas 2` (five pods, each
shipping its TensorBoard logs from a native sidecar); a run passes when it succeeds, every
pod's sidecar said it shipped its logs, nothing says `sigprocmask` and it took at most 10 s.
`renders`: `aichor-iac render` of Katib's random example; a render passes when it succeeds
and prints nothing on stderr (no traceback after the result, from an event loop or a thread
left for the interpreter's exit). Prints a line per failure and the totals; exit 1 on any.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "aichor_iac.cli"]
PODS = 5  # the jobset example under --replicas 2: heavy-0-0, shard-0-{0,1}, shard-1-{0,1}
MAX_SECONDS = 10.0


def _hog(stop: multiprocessing.Event) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def hogged(work):
    """Run `work()` beside a busy process per core."""
    stop = multiprocessing.Event()
    count = int(os.environ.get("STRESS_HOGS_PER_CORE", "2")) * (os.cpu_count() or 1)
    hogs = [multiprocessing.Process(target=_hog, args=(stop,)) for _ in range(count)]
    for hog in hogs:
        hog.start()
    try:
        return work()
    finally:
        stop.set()
        for hog in hogs:
            hog.join()


def local_run(where: Path) -> str | None:
    """One run of the jobset example; None when it passed, else why not."""
    started = time.monotonic()
    result = subprocess.run(
        [*CLI, "run", "--local", str(where / "jobset.yaml"), "--replicas", "2", "--timeout", "120"],
        cwd=where, capture_output=True, text=True,
    )  # fmt: skip
    took = time.monotonic() - started
    out = result.stdout + result.stderr
    shipped = len(re.findall(r"/tensorboard-logs aichor: shipped \d+ bytes of logs in 1 ", out))
    if result.returncode != 0 or "shards succeeded" not in out:
        return f"failed ({result.returncode}): {out[-600:]}"
    if "sigprocmask" in out:
        return "a sidecar was killed: " + next(s for s in out.splitlines() if "sigprocmask" in s)
    if shipped != PODS:
        return f"{PODS - shipped} of {PODS} log bundles not shipped, yet the run succeeded"
    if took > MAX_SECONDS:
        return f"took {took:.1f} s"
    return None


def local_runs(count: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        for name in ("jobset.yaml", "process.py"):
            shutil.copy(ROOT / "examples" / name, where)
        found = (hogged(lambda: local_run(where)) for _ in range(count))
        return [f"run {i}: {why}" for i, why in enumerate(found) if why]


def render(path: Path) -> str | None:
    result = subprocess.run([*CLI, "render", str(path)], capture_output=True, text=True)
    if result.returncode != 0:
        return f"failed ({result.returncode}): {result.stderr[-600:]}"
    return f"printed on stderr: {result.stderr[-600:]}" if result.stderr else None


def renders(count: int) -> list[str]:
    path = ROOT / "tests" / "katib" / "random.yaml"

    def work():
        with ThreadPoolExecutor(4) as pool:
            return list(pool.map(lambda _: render(path), range(count)))

    return [f"render {i}: {why}" for i, why in enumerate(hogged(work)) if why]


def main() -> int:
    what = sys.argv[1] if len(sys.argv) > 1 else "local-runs"
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    started = time.monotonic()
    failures = {"local-runs": local_runs, "renders": renders}[what](count)
    for failure in failures:
        print(failure)
    took = time.monotonic() - started
    print(f"{what}: {count - len(failures)}/{count} passed beside a CPU hog, in {took:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
