"""The keeper under a chatty pod (issue 67): a main container printing LINES_PER_SECOND lines
of 100 bytes (a `loss=` value each, as a trial prints its objective) and a progress report a
second, for SECONDS, beside the keeper (`aichor_iac/pods/keeper.py`, run as a pod runs it:
`python3 -S -c`) writing to a folder store and keeping its MLflow cursor off (no server).
Prints the keeper's share of a core, its peak memory (its limit: 192 MiB), how far behind it
was when the pod ended, and how long its last round took. Asserts nothing (machines are
shared and noisy).

    .venv/bin/python benchmarks/keeper.py [LINES_PER_SECOND] [SECONDS]
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aichor_iac import pods
from aichor_iac.pods import keeper

RATE = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 30
WHO = {"namespace": "bench", "experiment": "chatty", "pod": "chatty-0", "entry": True}


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        shared, store = Path(folder, "pod"), Path(folder, "store")
        shared.mkdir()
        env = {**os.environ, "AICHOR_KEEP_DIR": str(shared), "AICHOR_HISTORY": str(store)}
        env["AICHOR_KEEP"] = json.dumps(WHO)
        argv = [sys.executable, "-S", "-c", pods.source("keeper")]
        process = subprocess.Popen(argv, env=env)
        began, written, step = time.monotonic(), 0, 0
        with (shared / keeper.LOG).open("a") as log, (shared / keeper.REPORTS).open("a") as rep:
            while (now := time.monotonic() - began) < SECONDS:
                for _ in range(RATE // 10):
                    log.write(f"step {step:09d} loss={1 / (step + 1):.6f} {'x' * 60}\n")
                    step += 1
                log.flush()
                metrics = [{"name": "loss", "value": f"{1 / step:.6f}"}]
                when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                status = {"metrics": metrics, "lastUpdatedTime": when}
                rep.write(json.dumps({"trainerStatus": status}) + "\n")
                rep.flush()
                time.sleep(max(0.0, 0.1 - (time.monotonic() - began - now)))
        written = (shared / keeper.LOG).stat().st_size
        cursors = json.loads((shared / keeper.CURSORS).read_text())["history"]
        behind = written - cursors.get("log", 0)
        ending = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait()
        last = time.monotonic() - ending
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        kept = sum(p.stat().st_size for p in store.rglob("log/*"))
    cpu = (usage.ru_utime + usage.ru_stime) / SECONDS
    print(f"{RATE:,} lines/s of 100 B for {SECONDS:.0f} s: {written / 1e6:.0f} MB printed")
    print(f"keeper: {cpu:.0%} of a core, peak {usage.ru_maxrss / 1024:.0f} MiB")
    print(f"behind when the pod ended: {behind / 1e6:.1f} MB; its last round: {last:.2f} s")
    print(f"kept: {kept / 1e6:.0f} MB of {written / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
