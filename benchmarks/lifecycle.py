"""Lifecycle benchmark: how long GPUs idle after the end, and how long a dependent waits after
its peer is up, on the local cluster (aichor_iac/local.py: one network namespace per pod, a hosts
file standing for the cluster DNS) with the default settings.

An experiment of 1 entry point (PyTorch Master) and 8 followers (Workers), repeated RUNS
times:

- graceful: the Master opens its port, waits 6 s and exits 0: time from its exit to the last
  Worker's exit;
- killed: the same Master is killed (SIGKILL to every process of its pod) instead: time from
  the kill to the last Worker's exit;
- start: time from the Master's port opening to the last Worker's command starting (the wait
  for peers runs in the Worker's main container, right before its command).

Prints the median and the worst of each; asserts nothing (machines are shared and noisy).
Needs root (`ip netns`).

    .venv/bin/python benchmarks/lifecycle.py [RUNS]

Targets (issue 14): graceful ≤ 2 s, killed ≤ 15 s, start ≤ 0.5 s, worst case.
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

FOLLOWERS = 8
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
ENV = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # default intervals
# The Master listens on MASTER_PORT, says when, holds 6 s, says when it exits; a Worker says
# when its command starts (with `date`: a python3 start would add its own ~50 ms), then works
# until it is stopped.
COMMAND = """\
if [ "$RANK" = 0 ]; then
  exec python3 -c 'import os, socket, time
s = socket.create_server(("", int(os.environ["MASTER_PORT"])))
print("open", time.time(), flush=True)
time.sleep(6)
print("exit", time.time(), flush=True)'
fi
echo "start $(date +%s.%N)"
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
            "Worker": {"count": FOLLOWERS, "resources": r},
        },
    }
    return engine.expand(doors.validate({"spec": spec}), Settings(), name="exp").objects


def stamp(text: str, word: str) -> float:
    found = re.search(rf"^{word} ([0-9.]+)$", text, re.M)
    assert found, f"no '{word}' in {text[-500:]!r}"
    return float(found.group(1))


def once(kill: bool) -> tuple[float, float]:
    """Seconds from the Master's end to the last Worker's end, and from its port opening to
    the last Worker's command starting."""
    workers = [f"exp-worker-{i}" for i in range(FOLLOWERS)]
    with LocalCluster(objects(), ENV) as cluster:
        runner = threading.Thread(target=cluster.run, kwargs={"timeout": 300}, daemon=True)
        runner.start()
        while "open" not in cluster.logs("exp-master-0", "pytorch"):
            time.sleep(0.05)
        if kill:  # once every Worker's command runs
            while not all("start" in cluster.logs(w, "pytorch") for w in workers):
                time.sleep(0.05)
            time.sleep(0.5)
            end = time.time()
            cluster._kill("exp-master-0")
        while any(cluster.state[w] not in ("succeeded", "failed") for w in workers):
            time.sleep(0.02)
        last = time.time()
        runner.join(60)
        opened = stamp(cluster.logs("exp-master-0", "pytorch"), "open")
        if not kill:
            end = stamp(cluster.results["exp-master-0"].stdout, "exit")
        starts = [stamp(cluster.results[w].stdout, "start") for w in workers]
        return last - end, max(starts) - opened


def main() -> None:
    if not LocalCluster.available():
        print("lifecycle: skipped, the local cluster needs `ip netns` (root)")
        return
    figures: dict[str, list[float]] = {"graceful": [], "killed": [], "start": []}
    for _ in range(RUNS):
        stopped, start = once(kill=False)
        figures["graceful"].append(stopped)
        figures["start"].append(start)
        figures["killed"].append(once(kill=True)[0])
    print(f"1 entry point + {FOLLOWERS} followers, {RUNS} runs, default settings")
    print(f"{'':<44}{'median':>8}{'worst':>8}")
    labels = {
        "graceful": "entry point exits -> last follower exits",
        "killed": "entry pod killed -> last follower exits",
        "start": "peer port open -> dependent command starts",
    }
    for key, values in figures.items():
        print(f"{labels[key]:<44}{statistics.median(values):>7.2f}s{max(values):>7.2f}s")


if __name__ == "__main__":
    main()
