"""`status`, `logs` and `events` for real: a run on the local cluster serves the read API
(aichor_iac/local/api.py) that the official Kubernetes client reads, as it reads a cluster."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import threading
import time
from contextlib import redirect_stdout
from datetime import datetime, timezone

import pytest
import yaml
from conftest import expand
from kube import NEEDS_CLUSTER, LocalCluster, pod_env
from waiting import until

from aichor_iac import doors, engine
from aichor_iac.cli import main
from aichor_iac.local.api import LocalApi, announce
from aichor_iac.local.run import run_experiment
from aichor_iac.observe import kubeapi
from aichor_iac.observe.status import report
from aichor_iac.settings import Settings

pytestmark = NEEDS_CLUSTER
ENV = pod_env()

# A PyTorchJob whose master crashes (its replicas restart in place: OnFailure) and whose
# worker asks for a GPU this machine does not have.
PYTORCHJOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: tj}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - {name: pytorch, image: img, command: [sh, -c, "echo crashing; exit 1"]}
    Worker:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: img
            command: [sh, -c, "sleep 600"]
            resources: {limits: {nvidia.com/gpu: 1}}
"""


def test_status_shows_a_crash_loop_and_an_unschedulable_pod():
    objects = engine.expand(doors.parse(PYTORCHJOB, source="tj.yaml"), Settings(), "t", "tj")
    local = LocalCluster(
        objects.objects, ENV, allocatable={"nvidia.com/gpu": 0}, kubelet_restarts=True
    )
    with local as cluster, LocalApi(cluster, "default") as api:
        for job in ("tj-master", "tj-worker"):
            cluster.start(job)
        reader = kubeapi.Reader(kubeapi.connect(url=api.url), "default", "tj")

        def crashing():
            found = report(reader.jobs(), reader.pods(), datetime.now(timezone.utc))
            rows = {row["pod"]: row for g in found["groups"] for row in g["pods"]}
            return rows if rows["tj-master-0"]["reason"] == "CrashLoopBackOff" else None

        rows = until(crashing)
        master, worker = rows["tj-master-0"], rows["tj-worker-0"]
        assert master["restarts"] == 1 and master["exit_code"] == 1
        assert master["message"].startswith("back-off 10s restarting failed container=pytorch")
        assert worker["phase"] == "Pending" and worker["reason"] == "Unschedulable"
        assert worker["message"] == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu"
        events = reader.events()
        reasons = [(e["involvedObject"]["name"], e["reason"]) for e in events]
        assert ("tj-worker-0", "FailedScheduling") in reasons
        assert ("tj-master-0", "BackOff") in reasons
        assert reasons.index(("tj-master-0", "Started")) < reasons.index(("tj-master-0", "BackOff"))


TICKS = """\
python3 -c '
import os, time
me = int(os.environ["RANK"])
start = float(os.environ["START"])
if me == 0:  # (the port the workers wait for)
    import socket
    server = socket.create_server(("", int(os.environ["MASTER_PORT"])))
for tick in range(3):
    time.sleep(max(0, start + tick * 0.6 + me * 0.2 - time.time()))
    print(f"tick {tick} from {me}", flush=True)
'
sleep 600
"""


def test_logs_interleave_the_pods_in_time_order_and_status_reads_a_local_run(tmp_path):
    r = {"cpus": 1, "ramRatio": 1}
    data = {
        "spec": {
            "operator": "pytorch",
            "image": "img",
            "command": TICKS,
            "types": {"Master": {"resources": r}, "Worker": {"count": 2, "resources": r}},
        }
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {**ENV, "START": str(time.time() + 4)}
    name = "obs"  # (announced under its name: unlike the other tests' runs)
    with (
        LocalCluster(expand(data, name=name).objects, env) as cluster,
        LocalApi(cluster, "default") as api,
    ):
        for job in ("obs-master", "obs-worker"):
            cluster.start(job)
        with announce(name, api.url, api.namespace):

            def every_tick() -> list[str] | None:
                """The ticks `logs` shows, once it shows all 9: the API serves a line once the
                kubelet's log has it, a moment after it is printed."""
                out = io.StringIO()
                with redirect_stdout(out):
                    assert main(["logs", "--local", str(path), "--name", name]) == 0
                found = [line for line in out.getvalue().splitlines() if " tick " in line]
                return found if len(found) == 9 else None

            ticks = until(every_tick, 30)
            pods = ["obs-master-0", "obs-worker-0", "obs-worker-1"]
            assert ticks == [f"{pods[m]} tick {t} from {m}" for t in range(3) for m in range(3)]
            out = io.StringIO()
            with redirect_stdout(out):
                assert (
                    main(["status", "--local", str(path), "--name", name, "--output", "json"]) == 0
                )
    found = json.loads(out.getvalue())
    assert found["phases"] == {"Running": 3} and found["gpus"] == 0
    assert [g["job"] for g in found["groups"]] == ["obs-master", "obs-worker"]


def test_without_a_local_run_status_says_so(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "spec": {
                    "operator": "pytorch",
                    "image": "i",
                    "command": "c",
                    "types": {"Master": {"resources": {"cpus": 1, "ramRatio": 1}}},
                }
            }
        )
    )
    assert main(["status", "--local", str(path), "--name", "nothing-runs"]) == 2


@pytest.mark.exclusive  # (what /var/tmp and /run/netns hold: no other run beside it)
def test_status_reads_a_run_without_root(tmp_path, monkeypatch):
    """A run in a user namespace of its own (its own network) serves the API on a Unix socket,
    which the run's parent forwards from this side's 127.0.0.1 and announces."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # (what a user without root gets)
    r = {"cpus": 1, "ramRatio": 1}
    # The pod runs until the test has read it: its `sleep` (a length no other process has) is
    # then ended from here, which, root in truth, sees the processes of the pods' namespaces.
    sleep = f"sleep 600.{os.getpid()}"
    command = f'echo "up on $HOSTNAME"; {sleep} || :'
    data = {"spec": {"operator": "pytorch", "image": "i", "command": command, "types": {}}}
    data["spec"]["types"] = {"Master": {"resources": r}}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    lines: list[tuple[str, str]] = []
    ended: list[str] = []

    def in_thread() -> None:
        asyncio.set_event_loop(asyncio.new_event_loop())  # (Pulumi's engine renders it)
        run_experiment(doors.load(path), name="nr", timeout=120, on_line=lambda *x: lines.append(x))
        ended.append("succeeded")

    run = threading.Thread(target=in_thread, daemon=True)
    run.start()
    until(lambda: ("nr-master-0", "up on nr-master-0") in lines, 60)

    def status() -> dict:
        out = io.StringIO()
        with redirect_stdout(out):
            assert main(["status", "--local", str(path), "--name", "nr", "--output", "json"]) == 0
        return json.loads(out.getvalue())

    found = status()
    assert found["phases"] == {"Running": 1}, found
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["logs", "--local", str(path), "--name", "nr"]) == 0
    assert "nr-master-0 up on nr-master-0" in out.getvalue()
    kubeapi.local_url("nr")  # announced while it runs; gone once it has ended
    subprocess.run(["pkill", "-TERM", "-x", "-f", sleep], check=True)
    run.join(120)
    assert ended == ["succeeded"]
    with pytest.raises(kubeapi.Unreachable):
        kubeapi.local_url("nr")


def test_status_logs_and_events_of_a_file_of_two_experiments(tmp_path):
    # Two experiments of one file, each run announced under its name (as two `run --local`
    # would): `status` reports each under its name, `logs` shows the pods of both.
    r = {"cpus": 1, "ramRatio": 1}
    spec = {"operator": "pytorch", "image": "img", "types": {"Master": {"resources": r}}}
    documents = [
        {"name": name, "spec": {**spec, "command": f'echo "{name} up"; sleep 600'}}
        for name in ("seed-1", "seed-2")
    ]
    path = tmp_path / "seeds.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    objects = engine.expand(doors.load_all(path), Settings(), "t").objects
    with (
        LocalCluster(objects, ENV) as cluster,
        LocalApi(cluster, "default") as api,
        announce("seed-1", api.url, api.namespace),
        announce("seed-2", api.url, api.namespace),
    ):
        for job in ("seed-1-master", "seed-2-master"):
            cluster.start(job)

        def both_up() -> str | None:
            out = io.StringIO()
            with redirect_stdout(out):
                assert main(["logs", "--local", str(path)]) == 0
            text = out.getvalue()
            return text if "seed-1 up" in text and "seed-2 up" in text else None

        lines = until(both_up, 30).splitlines()
        assert sorted(lines) == ["seed-1-master-0 seed-1 up", "seed-2-master-0 seed-2 up"]
        out = io.StringIO()
        with redirect_stdout(out):
            assert main(["status", "--local", str(path), "--output", "json"]) == 0
        found = json.loads(out.getvalue())["experiments"]
        assert list(found) == ["seed-1", "seed-2"]
        assert [[g["job"] for g in f["groups"]] for f in found.values()] == [
            ["seed-1-master"],
            ["seed-2-master"],
        ]
        out = io.StringIO()
        with redirect_stdout(out):
            assert main(["status", "--local", str(path)]) == 0
        text = out.getvalue()
        assert text.index("seed-1\n") < text.index("seed-1-master") < text.index("seed-2\n")
