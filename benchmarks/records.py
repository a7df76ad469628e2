"""What keeping every run costs (issue 66): a 1,000-trial sweep's record written and read back
(seconds and bytes, its trials' logs beside it), and `aichor-iac history` over 1,000 kept runs
(the console script, end to end), whose target is 1 second.

    python benchmarks/records.py [TRIALS] [RUNS]

The records are made here (a sweep's trials with their parameters, objective, 100 points of
their metric and their pod), in a store of their own. Prints a table and the targets;
asserts nothing (machines are shared: a timing is a measure, not a test).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aichor_iac.records import store  # noqa: E402
from aichor_iac.records.model import (  # noqa: E402
    Change,
    ExperimentRun,
    PodRun,
    Point,
    Record,
    State,
)

TARGET_HISTORY_SECONDS = 1.0  # (issue 66: `history` over 1,000 kept runs)
STAMP = "2026-12-05T10:00:00Z"


def trial(i: int, points: int = 100) -> ExperimentRun:
    loss = tuple(Point(s, STAMP, 1 / (s + 1) + i / 1000) for s in range(points))
    pod = PodRun(f"sweep-{i:05d}-worker-0", f"sweep-{i:05d}-worker", "Succeeded", 0, "Completed")
    changes = tuple(Change(STAMP, pod.name, s) for s in ("Pending", "Running", "Succeeded"))
    return ExperimentRun(
        name=f"sweep-{i:05d}",
        framework="batchjob",
        state=State.SUCCEEDED,
        created=STAMP,
        ended=STAMP,
        images=("python:3.12",),
        parameters={"lr": f"{0.001 * (i + 1):.4f}", "momentum": "0.9"},
        objective=loss[-1].value,
        metrics={"loss": loss},
        pods=(pod,),
        changes=changes,
    )


def sweep(trials: int, id: str, name: str = "sweep") -> Record:
    runs = tuple(trial(i) for i in range(trials))
    return Record(
        id=id,
        name=name,
        kind="sweep",
        state=State.SUCCEEDED,
        started=STAMP,
        ended=STAMP,
        file="sweep.yaml",
        trials=runs,
        objective="loss",
        direction="minimize",
        best=min(runs, key=lambda r: r.objective or 0).name,
    )


def size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def one_sweep(trials: int) -> list[tuple[str, str]]:
    folder = store.new_folder("sweep")
    log = folder / "source.log"
    log.write_text("".join(f"{STAMP} epoch={e} loss={1 / (e + 1):.4f}\n" for e in range(100)))
    start = time.perf_counter()
    record = sweep(trials, folder.name)
    store.write_records(folder, [record])
    for run in record.trials:
        store.write_log(folder, run.pods[0].name, "main", log)
    written = time.perf_counter() - start
    log.unlink()
    start = time.perf_counter()
    (back,) = store.read_records(folder)
    read = time.perf_counter() - start
    assert back == record
    records = (folder / store.RECORDS).stat().st_size
    return [
        (f"a {trials}-trial sweep's record written (and its {trials} logs)", f"{written:.2f} s"),
        ("read back", f"{read:.2f} s"),
        ("its records.json", f"{records / 1e6:.1f} MB"),
        ("its folder, logs included", f"{size(folder) / 1e6:.1f} MB"),
    ]


def many_runs(runs: int) -> list[tuple[str, str]]:
    for i in range(runs):
        folder = store.new_folder(f"exp-{i}")
        store.write_records(folder, [sweep(6, folder.name, f"exp-{i}")])
    rows = []
    for argv in (["history"], ["history", "--output", "json"], ["history", "exp-0"]):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "aichor_iac.cli", *argv],
            check=True,
            stdout=subprocess.DEVNULL,
            env={**os.environ, "COLUMNS": "200"},
        )
        took = time.perf_counter() - start
        rows.append((f"aichor-iac {' '.join(argv)} over {runs} kept runs", f"{took:.2f} s"))
    return rows


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    with tempfile.TemporaryDirectory() as folder:
        os.environ["AICHOR_IAC_HISTORY"] = str(Path(folder) / "one")
        rows = one_sweep(trials)
        os.environ["AICHOR_IAC_HISTORY"] = str(Path(folder) / "many")
        rows += many_runs(runs)
    width = max(len(what) for what, _ in rows)
    print("\nKeeping runs (benchmarks/records.py)")
    for what, value in rows:
        print(f"  {what:<{width}}  {value:>8}")
    print(f"  target: history over {runs} kept runs within {TARGET_HISTORY_SECONDS:.0f} s")


if __name__ == "__main__":
    main()
