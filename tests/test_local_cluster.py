"""Whole experiments run for real on this machine (tests/kube.py `LocalCluster`): the rendered
commands, init containers and env, replica hosts in a private /etc/hosts that loses a host
when its pod ends, as the cluster DNS does."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from conftest import expand
from kube import LocalCluster

pytestmark = pytest.mark.skipif(
    not LocalCluster.available(),
    reason="needs `ip netns` (root) for a private network and /etc/hosts",
)

R = {"cpus": 1, "ramRatio": 1}


def run(operator: str, command: str, **counts: int) -> dict:
    types = {name: {"count": n, "resources": dict(R)} for name, n in counts.items()}
    data = {"spec": {"operator": operator, "image": "img", "command": command, "types": types}}
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "AICHOR_FOLLOW_INTERVAL": "0.2",
    }
    with LocalCluster(expand(data).objects, env) as cluster:
        return cluster.run()


XGBOOST = r"""python3 - <<'EOF'
import os
import numpy as np
from xgboost import collective
from xgboost.tracker import RabitTracker

if os.environ["RANK"] == "0":
    tracker = RabitTracker(host_ip="0.0.0.0", n_workers=int(os.environ["WORLD_SIZE"]),
                           port=int(os.environ["MASTER_PORT"]), sortby="task")
    tracker.start()
args = {"dmlc_tracker_uri": os.environ["DMLC_TRACKER_URI"],
        "dmlc_tracker_port": int(os.environ["DMLC_TRACKER_PORT"]),
        "dmlc_task_id": os.environ["DMLC_TASK_ID"]}
with collective.CommunicatorContext(**args):
    total = collective.allreduce(np.array([float(os.environ["RANK"])]), collective.Op.SUM)
    print("rank", collective.get_rank(), "of", collective.get_world_size(), "sum", total[0])
if os.environ["RANK"] == "0":
    tracker.wait_for(60)
EOF"""


def test_xgboost_master_and_two_workers_allreduce():
    pytest.importorskip("xgboost")
    results = run("xgboost", XGBOOST, Master=1, Worker=2)
    assert sorted(results) == ["exp-master-0", "exp-worker-0", "exp-worker-1"]
    ranks = {}
    for pod, result in results.items():
        assert result.returncode == 0, (pod, result.stderr[-2000:])
        words = result.stdout.split()
        ranks[pod] = (words[words.index("rank") + 1], words[-1])
    assert ranks == {
        "exp-master-0": ("0", "3.0"),
        "exp-worker-0": ("1", "3.0"),
        "exp-worker-1": ("2", "3.0"),
    }


def test_tf_parameter_servers_end_with_the_chief():
    # Parameter servers never exit on their own (server.join()); the chief trains, then exits
    # (after the others have started, even on a loaded machine).
    command = (
        'case "$TF_CONFIG" in *\'"type":"chief"\'*) sleep 5; echo trained;; *) sleep 600;; esac'
    )
    results = run("tf", command, Chief=1, PS=2, Worker=1)
    assert results["exp-chief-0"].stdout.strip() == "trained"
    for pod in ("exp-ps-0", "exp-ps-1", "exp-worker-0"):
        assert results[pod].returncode == 0, results[pod].stderr
        assert "exp-chief-0.exp.default.svc.cluster.local has ended; stopping this replica" in (
            results[pod].stdout
        )


def test_pytorch_workers_wait_for_the_master_then_end_with_it():
    # Like a TCPStore, the master listens after a while, serves until every worker has said
    # hello (the init containers' probes connect and close), then finishes training and exits.
    command = """python3 - <<'EOF'
import os, socket, time
world = int(os.environ["WORLD_SIZE"])
if os.environ["RANK"] == "0":
    time.sleep(2)
    server = socket.create_server(("0.0.0.0", int(os.environ["MASTER_PORT"])))
    hellos = 0
    while hellos < world - 1:
        connection, _ = server.accept()
        hellos += connection.recv(5) == b"hello"
    print("master done")
else:
    socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])), 5).sendall(b"hello")
    print("worker", os.environ["RANK"], "connected")
    time.sleep(600)
EOF"""
    results = run("pytorch", command, Master=1, Worker=2)
    assert results["exp-master-0"].stdout.strip() == "master done"
    for rank, pod in ((1, "exp-worker-0"), (2, "exp-worker-1")):
        out = results[pod].stdout
        assert results[pod].returncode == 0, results[pod].stderr
        assert f"worker {rank} connected" in out and "has ended; stopping this replica" in out
