"""The dashboard with many (issue 55): 200 experiments and a Katib sweep of 1,000 trials, each
page and fragment served by uvicorn over HTTP, as a browser asks for it; the page's own assets;
and what the `dashboard` extra weighs beside the runtime.

    python benchmarks/dashboard.py [EXPERIMENTS] [TRIALS]

What it reads is made once (the reports `status` would read from a cluster: each experiment's
Jobs and pods, each trial's objective): a page is served from the last read, so its time does
not depend on the cluster's. Prints a table and the targets; asserts nothing.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
TARGET_SECONDS, TARGET_ASSETS = 1.0, 500_000  # (issue 55: each page; the page's own assets)
NOW = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Quiet:
    """A reader with no events and no log (what a page reads at once besides the snapshot)."""

    def events(self) -> list:
        return []

    def lines(self, pod: str, follow: bool = False):
        return iter(())


def objects(name: str, pods: int, phase: str) -> tuple[list[dict], list[dict]]:
    """An experiment's Job and its pods, as the API gives them."""
    job = f"{name}-worker"
    status = {"active": pods} if phase == "Running" else {"succeeded": pods}
    if phase == "Succeeded":
        status["conditions"] = [{"type": "Complete", "status": "True"}]
    jobs = [{"metadata": {"name": job, "creationTimestamp": NOW}, "status": status}]
    state = {"running": {"startedAt": NOW}} if phase == "Running" else {"terminated": {}}
    container = {"name": "main", "ready": phase == "Running", "restartCount": 0, "state": state}
    found = [
        {
            "metadata": {"name": f"{job}-{i}", "labels": {"batch.kubernetes.io/job-name": job}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "main"}]},
            "status": {"phase": phase, "startTime": NOW, "containerStatuses": [container]},
        }
        for i in range(pods)
    ]
    return jobs, found


def snapshot(experiments: int, trials: int):
    """The watch's read: `experiments` experiments of 4 pods (with a progress report), and a
    random sweep of `trials` trials (Katib's example), most ended with their loss."""
    from aichor_iac import doors
    from aichor_iac.dashboard.watch import Snapshot
    from aichor_iac.observe.history import Source
    from aichor_iac.observe.status import report
    from aichor_iac.sweeps import results

    reported = {
        "trainerStatus": {"progressPercentage": 40, "metrics": [{"name": "loss", "value": "0.3"}]},
        "receivedAt": NOW,
    }
    sources, found = [], {}
    for i in range(experiments):
        name = f"exp-{i:03}"
        sources.append(Source(name, Quiet(), None, f"{name}-worker", None, "pytorch"))
        now = datetime.now(timezone.utc)
        found[name] = report(*objects(name, 4, "Running"), now, None, reported)
    (data,) = [d for d in yaml.safe_load_all((ROOT / "tests/katib/random.yaml").read_text()) if d]
    data["spec"].update(maxTrialCount=trials, parallelTrialCount=10)
    data["spec"].pop("maxFailedTrialCount")
    path = Path(sys.argv[0]).parent / ".dashboard-sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        manifests = doors.load_all(str(path))
    finally:
        path.unlink()
    rows = []
    for index, manifest in enumerate(manifests):
        name, trial = manifest.name, manifest.trial
        phase = "Running" if index >= trials - 10 else "Succeeded"
        sources.append(Source(name, Quiet(), None, f"{name}-worker", trial, "batchjob"))
        found[name] = report(*objects(name, 1, phase), datetime.now(timezone.utc))
        state = results.state_of("Complete" if phase == "Succeeded" else None)
        lines = [f"loss={0.1 + index / trials:.4f}"] if phase == "Succeeded" else []
        rows.append((name, trial, state, lines, None))
    sweeps = {trial.sweep: results.report(rows)}
    return Snapshot(tuple(sources), found, sweeps, None, time.time())


def served(app) -> tuple[str, object]:
    import uvicorn

    from aichor_iac.dashboard.server import listening

    sock = listening("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server


def timed(url: str, times: int = 5) -> tuple[float, float, int]:
    """Median and worst seconds of `times` GETs of `url`, and the answer's bytes."""
    spent, size = [], 0
    for _ in range(times):
        start = time.perf_counter()
        with urllib.request.urlopen(url) as answer:
            size = len(answer.read())
        spent.append(time.perf_counter() - start)
    return statistics.median(spent), max(spent), size


def weight() -> tuple[int, list[str]]:
    """The bytes the dashboard extra adds to the runtime's install, and what it adds."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from weight import closure, name_of, size

    base, extra = set(), set()
    for text in metadata.requires("aichor-iac") or []:
        marker = Requirement(text).marker
        if marker is None:
            closure(name_of(text), base)
        elif marker.evaluate({"extra": "dashboard"}) and not marker.evaluate({"extra": ""}):
            closure(name_of(text), extra)
    added = sorted(extra - base)
    return sum(size(name) for name in added), added


def main() -> int:
    from aichor_iac.dashboard.app import HERE, application
    from aichor_iac.dashboard.watch import Watch

    experiments = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    trials = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    start = time.perf_counter()
    watch = Watch(lambda sources: (_ for _ in ()).throw(AssertionError("not read here")))
    watch.snapshot = snapshot(experiments, trials)
    made = time.perf_counter() - start
    sweep = next(iter(watch.snapshot.sweeps))
    url, server = served(application(watch, "bench", None))
    pages = [
        "/",
        "/fragments/experiments",
        f"/sweeps/{sweep}",
        f"/fragments/sweeps/{sweep}",
        f"/api/sweeps/{sweep}",
        "/experiments/exp-000",
        "/fragments/experiments/exp-000",
        "/api/experiments/exp-000",
    ]
    print(f"{experiments} experiments and a sweep of {trials} trials (made in {made:.1f} s)")
    print(f"{'page':40} {'median s':>9} {'worst s':>9} {'KB':>8}")
    worst = 0.0
    for page in pages:
        median, slowest, size = timed(url + page)
        worst = max(worst, slowest)
        print(f"{page[:40]:40} {median:9.3f} {slowest:9.3f} {size / 1024:8.0f}")
    server.should_exit = True
    files = [p for p in (HERE / "static").rglob("*") if p.suffix in (".js", ".css")]
    assets = sum(p.stat().st_size for p in files)
    added, names = weight()
    print(f"slowest page: {worst:.3f} s (target: under {TARGET_SECONDS:.0f} s)")
    print(f"the page's own scripts and styles: {assets / 1024:.0f} KB (target: under 500 KB)")
    print(f"the dashboard extra adds {added / 1e6:.1f} MB to the runtime: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
