"""Group restart benchmark (`aichor:maxRestarts`, aichor_iac/pods/regroup.py) on the local
cluster with the default settings: 1 entry point (PyTorch Master) and 8 Workers, repeated RUNS
times. The last Worker's command fails (exit 137) 2 s after it starts:

The Master listens on the rendezvous port the Workers wait for before their first start.

- restart (maxRestarts 1, one failure): time from the failure to the last replica's command
  starting again (attempt 1);
- stopped (maxRestarts 1, a failure in both attempts: the budget is spent): time from the last
  failure to the last replica's pod ending (its GPUs freed).

Commands stamp their start and the failure with `time.monotonic()` (one clock for every
process of the machine; a python3 start adds its own ~30 ms). Prints the median and the worst
of each; asserts nothing (machines are shared and noisy). Needs root (`ip netns`).

    .venv/bin/python benchmarks/restart.py [RUNS]

Goals (issue 29): restart ≤ 5 s, stopped ≤ 2 s.
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from kube import LocalCluster  # noqa: E402

from aichor_iac import doors, engine  # noqa: E402
from aichor_iac.settings import Settings  # noqa: E402

WORKERS = 8
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
ENV = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
STAMP = 'python3 -c "import sys, time; print(sys.argv[1], time.monotonic(), flush=True)"'
LISTEN = (  # (rank 0's rendezvous port, which the Workers wait for)
    'python3 -c "import os, socket, time; '
    "s = socket.create_server(('', int(os.environ['MASTER_PORT']))); time.sleep(600)\""
)
COMMAND = f"""\
{STAMP} start-$AICHOR_RESTART_ATTEMPT
if [ "$RANK" = 0 ]; then {LISTEN} & fi
if [ "$RANK" = {WORKERS} ] && [ "$AICHOR_RESTART_ATTEMPT" -lt "$FAILS" ]; then
  sleep 2; {STAMP} fail; kill -9 $$
fi
exec sleep 600
"""


def objects() -> list[dict]:
    r = {"cpus": 1, "ramRatio": 1}
    spec = {
        "operator": "pytorch",
        "image": "img",
        "command": COMMAND,
        "types": {
            "Master": {"count": 1, "resources": r},
            "Worker": {"count": WORKERS, "resources": r},
        },
    }
    model = doors.validate({"spec": spec})
    return engine.expand(model, Settings(max_restarts=1), name="exp").objects


def stamps(text: str, word: str) -> list[float]:
    return [float(t) for t in re.findall(rf"^{word} ([0-9.]+)$", text, re.M)]


def once(fails: int) -> float:
    """Restart (1 failure): seconds from the failure to the last command's start in attempt 1.
    Stopped (2 failures): seconds from the second failure to the last pod's end."""
    pods = ["exp-master-0", *(f"exp-worker-{i}" for i in range(WORKERS))]
    failing = pods[-1]
    with LocalCluster(objects(), {**ENV, "FAILS": str(fails)}) as cluster:
        runner = threading.Thread(target=cluster.run, kwargs={"timeout": 120}, daemon=True)
        runner.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            logs = {pod: cluster.logs(pod, "pytorch") for pod in pods}
            if fails == 1 and all(stamps(log, "start-1") for log in logs.values()):
                return (
                    max(stamps(log, "start-1")[0] for log in logs.values())
                    - stamps(logs[failing], "fail")[0]
                )
            if fails == 2 and len(cluster.ended_at) == len(pods):
                return max(cluster.ended_at.values()) - stamps(logs[failing], "fail")[-1]
            time.sleep(0.05)
        raise AssertionError(f"no result within 120 s: {cluster.state}")


def main() -> None:
    if not LocalCluster.available():
        print("restart: skipped, the local cluster needs `ip netns` (root)")
        return
    figures: dict[str, list[float]] = {"restart": [], "stopped": []}
    for _ in range(RUNS):
        figures["restart"].append(once(fails=1))
        figures["stopped"].append(once(fails=2))
    print(f"1 entry point + {WORKERS} workers, {RUNS} runs, default settings")
    print(f"{'':<48}{'median':>8}{'worst':>8}")
    labels = {
        "restart": "failure -> every command running again",
        "stopped": "last failure (budget spent) -> every pod ended",
    }
    for key, values in figures.items():
        print(f"{labels[key]:<48}{statistics.median(values):>7.2f}s{max(values):>7.2f}s")


if __name__ == "__main__":
    main()
