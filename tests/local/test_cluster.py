"""Whole experiments run for real on this machine (`aichor_iac.local.LocalCluster`): the rendered
commands, init containers and env, replica hosts in a private /etc/hosts that loses a host
when its pod ends, as the cluster DNS does."""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import expand
from kube import NEEDS_CLUSTER, LocalCluster, pod_env

from aichor_iac.local.cluster import JobRunner
from aichor_iac.local.node import Node

pytestmark = NEEDS_CLUSTER

R = {"cpus": 1, "ramRatio": 1}


# What the test's own interpreter and tools need in the pods, and quick followers.
ENV = pod_env(AICHOR_FOLLOW_INTERVAL="0.2")


def objects(operator: str, command: str, spec: dict | None = None, **counts: int | dict) -> list:
    """The rendered objects of an experiment; a type is a count, or its manifest fields."""
    types = {
        name: {"resources": dict(R), **(n if isinstance(n, dict) else {"count": n})}
        for name, n in counts.items()
    }
    data = {"spec": {"operator": operator, "image": "img", "command": command, "types": types}}
    data["spec"].update(spec or {})
    return expand(data).objects


def run(operator: str, command: str, **counts: int | dict) -> dict:
    """Run every replica to its end."""
    with LocalCluster(objects(operator, command, **counts), ENV) as cluster:
        return cluster.run()


def printed(results: dict, prefix: str) -> dict[str, str]:
    """Each pod's first line starting with `prefix`, once every pod has succeeded."""
    lines = {}
    for pod, result in results.items():
        assert result.returncode == 0, (pod, result.stdout[-3000:], result.stderr[-3000:])
        lines[pod] = next(line for line in result.stdout.splitlines() if line.startswith(prefix))
    return lines


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
        words = next(line for line in result.stdout.splitlines() if "sum" in line).split()
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
        assert (
            "exp-chief-0.exp.default.svc.cluster.local (it has ended); stopping this replica"
            in (results[pod].stdout)
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
        assert f"worker {rank} connected" in out and "(it has ended); stopping this replica" in out


JAX = r"""python3 - <<'EOF'
import os
import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils
jax.config.update("jax_cpu_collectives_implementation", "gloo")  # across processes on CPU
# The explicit call: JAX's no-argument call reads JAX_COORDINATOR_ADDRESS but takes the
# process count and id only from clusters it detects (Slurm, Open MPI, Cloud TPU, or the
# Kubernetes API, which these pods are not given).
jax.distributed.initialize(
    coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
    num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
    process_id=int(os.environ["JAX_PROCESS_ID"]),
)
me = jax.process_index()
gathered = multihost_utils.process_allgather(jnp.array([me]))
total = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(jnp.array([float(me + 1)]))
print("process", me, "of", jax.process_count(), "gathered", gathered.tolist(), "psum", float(total[0]), flush=True)
EOF"""


def test_jax_processes_form_one_cluster_then_allgather_and_psum():
    pytest.importorskip("jax")
    lines = printed(run("jax", JAX, Worker=3), "process")
    assert lines == {
        f"exp-worker-{i}": f"process {i} of 3 gathered [[0], [1], [2]] psum 6.0" for i in range(3)
    }


def test_jobset_runs_every_job_and_completion_index_once_within_parallelism():
    # Two types, in manifest order: `trainer` (2 Jobs) then `evaluator` (1 Job), each Job of 3
    # pods of which at most 2 run at once. Every pod says who it is and when it ran.
    command = """python3 -c '
import os, time
start = time.time()
time.sleep(1)
print("pod", os.environ["JOB_GLOBAL_INDEX"], os.environ["JOB_COMPLETION_INDEX"],
      os.environ["JOB_INDEX"], os.environ["REPLICATED_JOB_NAME"],
      os.environ["REPLICATED_JOB_REPLICAS"], os.environ["GLOBAL_REPLICAS"], start, time.time())
'"""
    jobset = {"completions": 3, "parallelisms": 2}
    results = run(
        "jobset", command, trainer={"count": 2, **jobset}, evaluator={"count": 1, **jobset}
    )
    assert len(results) == 9
    seen, runs = [], {}
    for pod, result in sorted(results.items()):
        assert result.returncode == 0, (pod, result.stderr)
        words = result.stdout.split()
        seen.append(tuple(words[1:7]))
        runs.setdefault(words[1], []).append((float(words[7]), float(words[8])))
    assert sorted((g, c) for g, c, *_ in seen) == [
        (str(g), str(c)) for g in range(3) for c in range(3)
    ]
    assert {(g, j, name, n, total) for g, _, j, name, n, total in seen} == {
        ("0", "0", "trainer", "2", "3"),
        ("1", "1", "trainer", "2", "3"),
        ("2", "0", "evaluator", "1", "3"),
    }
    for spans in runs.values():  # at most `parallelisms` pods of one Job at any moment
        for start, _ in spans:
            assert sum(s <= start < e for s, e in spans) <= 2


def test_tensorboard_without_storage_keeps_rank_0_logs_and_serves_them_after_the_run():
    # Rank 0 writes a real TensorBoard event file to AICHOR_TENSORBOARD_PATH and ends; the
    # worker follows it. Nothing is configured: the replicas' sidecars ship the logs to
    # TensorBoard's own volume, which holds them once every Job has ended.
    pytest.importorskip("tensorboard")
    command = """python3 - <<'EOF'
import hashlib, os, socket, time
if os.environ["RANK"] != "0":
    time.sleep(600)
store = socket.create_server(("0.0.0.0", int(os.environ["MASTER_PORT"])))  # as a TCPStore
store.accept()  # the worker's wait
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
writer = EventFileWriter(os.path.join(os.environ["AICHOR_TENSORBOARD_PATH"], "run-a"))
for step in range(3):
    value = summary_pb2.Summary.Value(tag="loss", simple_value=1.0 / (step + 1))
    writer.add_event(event_pb2.Event(step=step, wall_time=time.time(),
                                     summary=summary_pb2.Summary(value=[value])))
writer.close()
(path,) = [os.path.join(d, f) for d, _, fs in os.walk(os.environ["AICHOR_TENSORBOARD_PATH"]) for f in fs]
print("wrote", os.path.relpath(path, os.environ["AICHOR_TENSORBOARD_PATH"]),
      hashlib.sha256(open(path, "rb").read()).hexdigest())
EOF"""
    tensorboard = objects(
        "pytorch", command, {"tensorboard": {"enabled": True}}, Master=1, Worker=1
    )
    with LocalCluster(tensorboard, ENV) as cluster:
        results = cluster.run()
        master = results["exp-master-0"]
        assert master.returncode == 0, master.stderr
        assert results["exp-worker-0"].returncode == 0, results["exp-worker-0"].stderr
        # (its output, both streams: TensorBoard's warnings beside the line it printed)
        (wrote,) = [line for line in master.stdout.splitlines() if line.startswith("wrote ")]
        _, relative, digest = wrote.split()
        shipped = cluster.claim("exp-tensorboard") / relative
        assert shipped.exists(), cluster.logs("exp-master-0", "tensorboard-logs")
        assert hashlib.sha256(shipped.read_bytes()).hexdigest() == digest
        assert "shipped" in cluster.logs("exp-master-0", "tensorboard-logs")
        # TensorBoard, still running after the run, serves the run it was shipped.
        ask = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:6006/data/runs').read().decode())"
        deadline = time.monotonic() + 60
        while "run-a" not in (
            answer := cluster.exec("exp-tensorboard-0", "python3", "-c", ask).stdout
        ):
            assert time.monotonic() < deadline, (
                answer,
                cluster.logs("exp-tensorboard-0", "tensorboard"),
            )
            time.sleep(1)


def test_jupyter_beside_rank_0_opens_with_its_token_only(tmp_path):
    # The master keeps running until the test has knocked on Jupyter's door; the server runs in
    # its pod (a native sidecar), reached through the Service `exp-jupyter`.
    pytest.importorskip("jupyter_server")
    stop = Path("/var/tmp") / f"aichor-stop-{os.getpid()}"  # outside the pods' private /tmp
    command = f"""python3 - <<'EOF'
import os, socket, time
if os.environ["RANK"] != "0":
    time.sleep(600)
store = socket.create_server(("0.0.0.0", int(os.environ["MASTER_PORT"])))
store.accept()
deadline = time.time() + 90
while not os.path.exists("{stop}") and time.time() < deadline:
    time.sleep(0.2)
EOF"""
    token = "t0ken-" + os.urandom(8).hex()
    ask = """import sys, urllib.error, urllib.request
request = urllib.request.Request("http://exp-jupyter.default.svc.cluster.local:8888/api/status")
if len(sys.argv) > 1:
    request.add_header("Authorization", "token " + sys.argv[1])
try:
    print(urllib.request.urlopen(request, timeout=5).status)
except urllib.error.HTTPError as error:
    print(error.code)
except OSError as error:
    print("down", error)"""
    try:
        jupyter = objects("pytorch", command, {"debug": {"jupyter": True}}, Master=1, Worker=1)
        with LocalCluster(jupyter, ENV, secrets={"jupyter-token": token}) as cluster:
            finished = {}
            runner = threading.Thread(target=lambda: finished.update(cluster.run()), daemon=True)
            runner.start()
            deadline = time.monotonic() + 90
            while (
                answer := cluster.exec("exp-worker-0", "python3", "-c", ask, token).stdout.strip()
            ) != "200":
                assert time.monotonic() < deadline, (
                    answer,
                    cluster.logs("exp-master-0", "jupyter"),
                )
                time.sleep(1)
            assert cluster.exec("exp-worker-0", "python3", "-c", ask).stdout.strip() == "403"
            assert (
                cluster.exec("exp-worker-0", "python3", "-c", ask, "wrong").stdout.strip() == "403"
            )
            stop.touch()
            runner.join(120)
            assert finished["exp-master-0"].returncode == 0, finished["exp-master-0"].stderr
            assert finished["exp-worker-0"].returncode == 0, finished["exp-worker-0"].stderr
            assert token not in cluster.logs("exp-master-0", "jupyter")
    finally:
        stop.unlink(missing_ok=True)


# Collective mode as the PaddleJob operator runs it: `paddle.distributed.launch` with no flag
# (PADDLE_MASTER, PADDLE_NNODES, PADDLE_JOB_ID from the env), one CPU process per pod, an
# all-reduce over gloo that every rank prints (the launcher keeps a process's output in
# log/workerlog.0, printed here once it has ended).
PADDLE = r"""cat > /tmp/train.py <<'EOF'
import paddle
import paddle.distributed as dist
dist.init_parallel_env()
x = paddle.to_tensor([float(dist.get_rank() + 1)])
dist.all_reduce(x)
print("rank", dist.get_rank(), "of", dist.get_world_size(), "sum", float(x.numpy()[0]), flush=True)
EOF
cd /tmp && python3 -m paddle.distributed.launch --log_dir /tmp/log /tmp/train.py
status=$?
cat /tmp/log/workerlog.0
exit $status"""


def test_paddle_workers_launch_and_all_reduce():
    pytest.importorskip("paddle")
    lines = printed(run("paddle", PADDLE, Worker=3), "rank")
    assert sorted(lines.values()) == [f"rank {i} of 3 sum 6.0" for i in range(3)]


TORCH = """\
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
print("rank", dist.get_rank(), "of", dist.get_world_size(), "sum", total.item(), flush=True)
dist.destroy_process_group()
"""


def test_pytorchjob_custom_resource_runs_gloo_all_reduce():
    """A kubeflow.org/v1 PyTorchJob, as its users write it (exec-form command), runs from
    the rendered pods: torch.distributed reads the operator's env alone."""
    pytest.importorskip("torch")
    container = {"name": "pytorch", "image": "img", "command": ["python3", "-c", TORCH]}
    template = {"spec": {"containers": [container]}}
    cr = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "exp"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never", "template": template},
                "Worker": {"replicas": 2, "restartPolicy": "Never", "template": template},
            }
        },
    }
    with LocalCluster(expand(cr).objects, ENV) as cluster:
        results = cluster.run()
    lines = printed(results, "rank")
    assert sorted(lines.values()) == [f"rank {r} of 3 sum 6.0" for r in range(3)]


def test_settling_waits_for_the_lines_of_ended_containers_not_for_servers():
    # A run ends once its Jobs have: the lines of their containers are all handed on, while
    # a Deployment's server (TensorBoard) runs on until the cluster is left, unwaited for.
    class Container:
        def __init__(self, ended: bool) -> None:
            self.ended = ended

        def poll(self) -> int | None:
            return 0 if self.ended else None

    joined = []

    class Tail:
        def __init__(self, name: str) -> None:
            self.name = name

        def join(self, timeout: float) -> None:
            joined.append(self.name)

    runner = JobRunner.__new__(JobRunner)
    runner.started = {}
    tails = [(Container(True), Tail("job")), (Container(False), Tail("server"))]
    node = SimpleNamespace(tails=tails, lock=threading.Lock())
    node.flush = functools.partial(Node.flush, node)  # (the node's own)
    runner.node = node
    runner.settle(timeout=1)
    assert joined == ["job"]


def test_a_network_that_fails_half_way_leaves_nothing_behind(monkeypatch):
    # The second pod's namespace cannot be made: what was made before is undone (the bridge's
    # and the first pod's namespaces, the run's directory, its mount points' registration),
    # and the failure is the one raised.
    from aichor_iac.local.network import Network

    plugged = []
    plug = Network._plug

    def failing(network: Network, pod: str, outside: str) -> None:
        if plugged:
            raise OSError("no room for another namespace")
        plugged.append(pod)
        plug(network, pod, outside)

    monkeypatch.setattr(Network, "_plug", failing)
    cluster = LocalCluster(objects("pytorch", "true", Master=1, Worker=1), ENV)
    with pytest.raises(OSError, match="no room"), cluster:
        pass
    assert plugged and not cluster.root.exists()
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"aichor-{cluster.network.id}-" not in namespaces
    assert not Path(cluster.node.mount_points.live.name).exists()


# A trainer that checkpoints on TERM, as transformers' JIT checkpointing does; its checkpoint
# takes 2 s (the work the grace period is measured against), its training until it is told
CHECKPOINTS_ON_TERM = """exec python3 -c '
import signal, sys, time
def checkpoint(*_):
    time.sleep(2)
    print("checkpointed", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, checkpoint)
print("training", flush=True)
signal.pause()
'"""


# A trainer that waits to be told, with no handler for TERM
WAITS_WITHOUT_A_HANDLER = (
    """exec python3 -c 'import signal; print("training", flush=True); signal.pause()'"""
)


def stopped_while_training(jobs: list[dict], stop) -> tuple[list[str], float]:
    """The Job's one pod run until it prints "training", then `stop(cluster, job)` (None:
    the run's end, the cluster left); its lines, and how long the stop took."""
    lines: list[str] = []
    seen = threading.Event()

    def on_line(pod: str, line: str) -> None:
        lines.append(line)
        if line == "training":
            seen.set()

    with LocalCluster(jobs, ENV, on_line=on_line) as cluster:
        (name,) = [j["metadata"]["name"] for j in cluster.jobs]
        cluster.start(name)
        assert seen.wait(60)
        stopped = time.monotonic()
        if stop is not None:
            stop(cluster, name)
    return lines, time.monotonic() - stopped


def fail_past_deadline(cluster: LocalCluster, job: str) -> None:
    cluster.fail_job(job, "DeadlineExceeded")
    cluster.settle(60)


@pytest.mark.parametrize(("grace", "checkpointed"), [(6, True), (1, False)])
def test_a_pod_stopped_has_its_grace_period_to_checkpoint(grace, checkpointed):
    """A pod stopped (its Job failed past its deadline; evicted alike) is told TERM, and
    KILLed only after its terminationGracePeriodSeconds, as the kubelet does: a checkpoint of
    2 s completes within 6, not within 1."""
    jobs = objects("batchjob", CHECKPOINTS_ON_TERM, Worker=1)
    for job in (o for o in jobs if o["kind"] == "Job"):
        job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = grace
    lines, took = stopped_while_training(jobs, fail_past_deadline)
    assert ("checkpointed" in lines) == checkpointed, lines
    assert took < grace + 5


@pytest.mark.parametrize(
    ("command", "checkpointed", "within"),
    [(CHECKPOINTS_ON_TERM, True, (2, 10)), (WAITS_WITHOUT_A_HANDLER, False, (0, 5))],
    ids=["handles TERM", "does not"],
)
def test_the_run_s_end_gives_each_pod_its_grace_period(command, checkpointed, within):
    """A run's end (its outcome decided, or Ctrl-C) stops every pod still running as a deleted
    pod is: TERM, then KILL after its grace period (30 s here), so a trainer's checkpoint on
    TERM completes; one whose first process does not handle TERM (the kernel drops it for
    the first process of a PID namespace) is killed at once, the grace period of no use."""
    lines, took = stopped_while_training(objects("batchjob", command, Worker=1), None)
    assert ("checkpointed" in lines) == checkpointed, lines
    assert within[0] <= took < within[1], took


# A main container that never opens the port its liveness probe checks, the first time: a
# marker on its emptyDir says whether it ran before (an emptyDir outlives a container's restart)
STALLS_ONCE = (
    "if [ -e /state/ran ]; then echo again; exit 0; fi; "
    'touch /state/ran; echo stalled; exec python3 -c "import signal; signal.pause()"'
)


@pytest.mark.parametrize("restarts", [False, True], ids=["smoke test", "kubelet restarts"])
def test_a_failing_liveness_probe_kills_the_main_container(restarts):
    """The kubelet's liveness probe on the local node: failureThreshold failures in a row
    (every periodSeconds, after the startup probe passed) kill the container, with an
    Unhealthy event; its restartPolicy (OnFailure) then starts it again where the kubelet
    restarts containers, and a local run's smoke test fails at the kill otherwise."""
    jobs = objects("batchjob", STALLS_ONCE, Worker=1)
    (job,) = [o for o in jobs if o["kind"] == "Job"]
    spec = job["spec"]["template"]["spec"]
    spec["restartPolicy"], job["spec"]["backoffLimit"] = "OnFailure", 1
    spec["volumes"] = [*spec.get("volumes", []), {"name": "state", "emptyDir": {}}]
    main = spec["containers"][0]
    main["volumeMounts"] = [*main.get("volumeMounts", []), {"name": "state", "mountPath": "/state"}]
    main["startupProbe"] = {"exec": {"command": ["test", "-e", "/state/ran"]}, "periodSeconds": 1}
    main["livenessProbe"] = {"tcpSocket": {"port": 8089}, "periodSeconds": 1, "failureThreshold": 2}
    with LocalCluster(jobs, ENV, kubelet_restarts=restarts) as cluster:
        results = cluster.run(timeout=60)
        events = [(e.name, e.reason, e.message) for e in cluster.records.events]
    (pod,) = results
    assert (pod, "Unhealthy", f"Liveness probe failed: {main['name']}") in events
    assert results[pod].returncode == (0 if restarts else 137)
    assert cluster.records.pod(pod).restarts == (1 if restarts else 0)
