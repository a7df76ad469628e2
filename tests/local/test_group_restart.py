"""The group restart for real on the local cluster: PyTorch over gloo, 3 ranks that checkpoint
every 3 steps; a worker kills itself (exit 137) or its pod is deleted as a drain would, and every
rank stops and starts again from the checkpoint, or the experiment fails when the budget is
spent (`aichor:maxRestarts`, pods/regroup.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import expand
from kube import NEEDS_CLUSTER, LocalCluster, needs, pod_env
from pulumi_up import Failed, Live, up

from aichor_iac import doors
from aichor_iac.local.run import LocalRunFailed, run_experiment
from aichor_iac.settings import Settings

pytestmark = [NEEDS_CLUSTER, needs("torch")]

# Rank 2 (the second worker) kills itself at step KILL_AT of the attempts KILLS lists.
TRAIN = r"""
import json, os, signal, time
from datetime import timedelta
import torch, torch.distributed as dist
rank = int(os.environ.setdefault("RANK", os.environ.get("JOB_COMPLETION_INDEX", "")))
attempt = int(os.environ["AICHOR_RESTART_ATTEMPT"])
if "RESTART_ATTEMPT" in os.environ:  # (JobSet's label, read through the downward API)
    print(f"rank {rank} label attempt {os.environ['RESTART_ATTEMPT']}", flush=True)
path = os.path.join(os.environ["CKPT"], "ckpt.json")
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
step, w = 0, 0.0
if os.path.exists(path):
    with open(path) as f:
        saved = json.load(f)
    step, w = saved["step"], saved["w"]
print(f"rank {rank} attempt {attempt} from step {step}", flush=True)
kill_at, kills = int(os.environ["KILL_AT"]), os.environ["KILLS"].split(",")
while step < 9:
    grad = torch.tensor([float(rank + 1)])
    dist.all_reduce(grad)
    w, step = w - 0.01 * grad.item(), step + 1
    print(f"rank {rank} step {step} loss {(w - 1) ** 2:.6f}", flush=True)
    if rank == 0 and step % 3 == 0:
        with open(path + ".new", "w") as f:
            json.dump({"step": step, "w": w}, f)
        os.replace(path + ".new", path)
    if rank == 2 and step == kill_at and str(attempt) in kills:
        if os.environ.get("KILL_CODE"):  # exits with that code instead
            os._exit(int(os.environ["KILL_CODE"]))
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.2)
dist.barrier()
print(f"rank {rank} done", flush=True)
"""


DATA = {
    "spec": {
        "operator": "pytorch",
        "image": "img",
        "command": "python train.py",
        "types": {
            "Master": {"count": 1, "resources": {"cpus": 1, "ramRatio": 1}},
            "Worker": {"count": 2, "resources": {"cpus": 1, "ramRatio": 1}},
        },
    }
}


CHECKPOINTS: list[Path] = []  # (removed after each test)


@pytest.fixture(autouse=True)
def _checkpoints_removed():
    yield
    while CHECKPOINTS:
        shutil.rmtree(CHECKPOINTS.pop(), ignore_errors=True)


def pods_env(tmp_path: Path, kills: str) -> dict[str, str]:
    """The script beside the run, and what its pods need: this interpreter, a checkpoint
    directory they share (outside their private /tmp), when rank 2 dies."""
    (tmp_path / "train.py").write_text(TRAIN)
    ckpt = Path("/var/tmp") / f"aichor-ckpt-{os.getpid()}-{time.monotonic_ns()}"
    ckpt.mkdir()
    CHECKPOINTS.append(ckpt)
    return pod_env(
        CKPT=str(ckpt),
        KILL_AT="5",
        KILLS=kills,
        AICHOR_STOP_GRACE="5",
    )


def run(tmp_path: Path, kills: str, max_restarts: int = 2, evict: str | None = None):
    """A local run of the 3 ranks: its results, lines (when, pod, line) and cluster."""
    env = pods_env(tmp_path, kills)
    objects = expand(DATA, max_restarts=max_restarts).objects
    lines: list[tuple[float, str, str]] = []
    seen = threading.Event()

    def on_line(pod: str, line: str) -> None:
        lines.append((time.monotonic(), pod, line))
        if evict and pod == evict and "step 5 " in line and not seen.is_set():
            seen.set()
            cluster.evict(pod)

    with LocalCluster(objects, env, on_line=on_line, workdir=tmp_path) as cluster:
        results = cluster.run(timeout=240)
        cluster.messages = {pod: cluster.termination_message(pod, "pytorch") for pod in results}
        return results, lines, cluster


def steps(lines, pod: str) -> list[tuple[int, str]]:
    """(step, loss) as the pod printed them, over every attempt."""
    found = [re.match(r"rank \d step (\d+) loss (\S+)", line) for _, p, line in lines if p == pod]
    return [(int(m[1]), m[2]) for m in found if m]


def test_a_killed_worker_restarts_the_group_which_resumes_from_the_checkpoint(tmp_path):
    results, lines, _ = run(tmp_path, kills="0")
    assert all(r.returncode == 0 for r in results.values()), lines[-60:]
    said = [line for _, pod, line in lines if pod == "exp-master-0"]
    assert "rank 0 attempt 1 from step 3" in said
    curve = steps(lines, "exp-master-0")
    # Attempt 0: steps 1-5; attempt 1 goes on from the checkpoint at 3, the same curve.
    assert [s for s, _ in curve] == [1, 2, 3, 4, 5, 4, 5, 6, 7, 8, 9]
    assert curve[3] == curve[5] and curve[4] == curve[6]
    for pod in ("exp-master-0", "exp-worker-0", "exp-worker-1"):
        rank = {"exp-master-0": 0, "exp-worker-0": 1, "exp-worker-1": 2}[pod]
        assert (pod, f"rank {rank} done") in [(p, line) for _, p, line in lines]


def test_killed_once_per_attempt_the_experiment_fails_and_every_replica_stops(tmp_path):
    results, lines, cluster = run(tmp_path, kills="0,1,2")
    assert {pod: r.returncode for pod, r in results.items()} == dict.fromkeys(results, 211)
    for why in cluster.messages.values():  # each pod's termination message
        assert why.startswith("exp-worker-1 exited with 137 at attempt 2; 2 restart(s) spent")
        assert why.endswith("first failure: exp-worker-1 exited with 137 at attempt 0")
    killed = max(when for when, pod, line in lines if pod == "exp-worker-1" and "step 5 " in line)
    assert max(cluster.ended_at.values()) - killed < 2.0 + 0.2  # (+ the last sleep)


def test_a_disruption_restarts_without_counting(tmp_path):
    # One restart allowed: the eviction takes none, the kill in attempt 1 the one.
    results, lines, _ = run(tmp_path, kills="1", max_restarts=1, evict="exp-worker-1")
    assert all(r.returncode == 0 for r in results.values()), lines[-60:]
    said = [line for _, pod, line in lines if pod == "exp-master-0"]
    assert "rank 0 attempt 1 from step 3" in said  # after the eviction
    assert "rank 0 attempt 2 from step 3" in said  # after the kill
    # The evicted pod was made again: its new replica ran attempts 1 and 2.
    assert ("exp-worker-1", "rank 2 attempt 2 from step 3") in [(p, x) for _, p, x in lines]


@pytest.mark.parametrize(("kills", "ends"), [("0", "done"), ("0,1,2", "failed")])
def test_pulumi_up_under_wait_complete_follows_the_restarts(tmp_path, kills, ends):
    """The master's Job is awaited until it completes: it stays active through the restarts
    (in place), completes after them, or fails once the budget is spent, and `up` with it."""
    rendering = expand(DATA, max_restarts=2, wait="complete")
    env = pods_env(tmp_path, kills)
    with LocalCluster(rendering.objects, env, workdir=tmp_path) as cluster:
        if ends == "done":
            order = up(rendering, Live(cluster))
            assert order[-1] == "Job/exp-master"  # created last, awaited to its end
            assert cluster.job_status("exp-master")["conditions"][0]["type"] == "Complete"
        else:
            with pytest.raises(Failed):
                up(rendering, Live(cluster))
            status = cluster.job_status("exp-master")
            # (failed by its pod failure policy at the replica's exit 211, not retried)
            assert status["conditions"][0]["type"] == "Failed" and status["failed"] == 1


def jobset(kills: str) -> dict:
    """The same 3 ranks as a JobSet: one Job of 3 pods, restarted as its failurePolicy says
    (exit 42 is permanent by its Job's pod failure policy and a FailJobSet rule)."""
    env = [
        {"name": "MASTER_ADDR", "value": "js-node-0-0.js"},
        {"name": "MASTER_PORT", "value": "23456"},
        {"name": "WORLD_SIZE", "value": "3"},
        {"name": "RESTART_ATTEMPT", "valueFrom": {"fieldRef": {"fieldPath": ATTEMPT_LABEL}}},
    ]
    container = {"name": "train", "image": "img", "command": ["python", "train.py"], "env": env}
    permanent = {"containerName": "train", "operator": "In", "values": [42]}
    job = {
        "parallelism": 3,
        "completions": 3,
        "backoffLimit": 0,
        "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": permanent}]},
        "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
    }
    rule = {
        "name": "permanent",
        "action": "FailJobSet",
        "onJobFailureReasons": ["PodFailurePolicy"],
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {
            "failurePolicy": {"maxRestarts": 2, "rules": [rule]},
            "replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": job}}],
        },
    }


ATTEMPT_LABEL = "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"


@pytest.mark.parametrize(
    ("kills", "code", "succeeds"), [("0", "", True), ("0,1,2", "", False), ("0", "42", False)]
)
def test_a_jobset_restarts_as_its_failure_policy_says(tmp_path, kills, code, succeeds):
    env = {**pods_env(tmp_path, kills), "KILL_CODE": code}
    objects = expand(jobset(kills), name="js").objects
    lines: list[tuple[str, str]] = []
    with LocalCluster(objects, env, on_line=lambda *x: lines.append(x), workdir=tmp_path) as c:
        results = c.run(timeout=240)
        why = c.termination_message("js-node-0-0", "train")
    codes = {r.returncode for r in results.values()}
    if succeeds:
        assert codes == {0}, lines[-60:]
        assert ("js-node-0-0", "rank 0 attempt 1 from step 3") in lines
        assert ("js-node-0-2", "rank 2 label attempt 1") in lines  # as JobSet's label says
        assert ("js-node-0-2", "rank 2 done") in lines
    elif code:  # the Job fails with reason PodFailurePolicy: the FailJobSet rule
        assert codes == {211}, lines[-60:]
        assert (
            why == "js-node-0-2 exited with 42 at attempt 0: permanent fails the experiment at once"
        )
    else:
        assert codes == {211}, lines[-60:]
        assert why.startswith("js-node-0-2 exited with 137 at attempt 2; 2 restart(s) spent")


def test_a_jobset_running_its_images_entrypoint_restarts_as_a_group(tmp_path):
    """Its container gives no command, only args: the stack says what its image runs
    (`aichor:entrypoints`; `--entrypoint` locally), which the group restart runs again."""
    data = jobset("0")
    train = data["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    container = train["containers"][0]
    del container["command"]
    container.update(image="registry.example/train:1", args=["train.py"])
    told = ["registry.example/train:1=python -u"]
    objects = expand(data, name="js", entrypoints=told).objects
    lines: list[tuple[str, str]] = []
    env = pods_env(tmp_path, "0")
    with LocalCluster(objects, env, on_line=lambda *x: lines.append(x), workdir=tmp_path) as c:
        results = c.run(timeout=240)
    assert {r.returncode for r in results.values()} == {0}, lines[-60:]
    assert ("js-node-0-0", "rank 0 attempt 1 from step 3") in lines
    assert ("js-node-0-2", "rank 2 done") in lines


def pytorchjob(policy: str) -> dict:
    """The same 3 ranks as a Kubeflow PyTorchJob: `runPolicy.backoffLimit` is the budget of
    the whole group's restart; under ExitCode, 1-127 fail at once."""
    container = {"name": "pytorch", "image": "img", "command": ["python", "train.py"]}
    template = {"spec": {"containers": [container]}}
    replica = {"restartPolicy": policy, "template": template}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "exp"},
        "spec": {
            "runPolicy": {"backoffLimit": 2},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, **replica},
                "Worker": {"replicas": 2, **replica},
            },
        },
    }


@pytest.mark.parametrize(
    ("policy", "code", "succeeds"),
    [("OnFailure", "", True), ("ExitCode", "", True), ("ExitCode", "42", False)],
)
def test_a_pytorchjob_restarts_as_a_group_within_its_backoff_limit(
    tmp_path, policy, code, succeeds
):
    env = {**pods_env(tmp_path, "0"), "KILL_CODE": code}
    objects = expand(pytorchjob(policy)).objects
    lines: list[tuple[str, str]] = []
    with LocalCluster(objects, env, on_line=lambda *x: lines.append(x), workdir=tmp_path) as c:
        results = c.run(timeout=240)
        why = c.termination_message("exp-master-0", "pytorch")
    codes = {r.returncode for r in results.values()}
    if succeeds:  # killed (137): a signal's code, retried under either policy
        assert codes == {0}, lines[-60:]
        assert ("exp-master-0", "rank 0 attempt 1 from step 3") in lines
        assert ("exp-worker-1", "rank 2 done") in lines
    else:
        assert codes == {211}, lines[-60:]
        rule = "spec.pytorchReplicaSpecs.Worker.restartPolicy: ExitCode"
        assert (
            why == f"exp-worker-1 exited with 42 at attempt 0: {rule} fails the experiment at once"
        )


# A replica's command for the frameworks below: the entry point works for 3 s (rank 0 listens on
# the coordinator's port, which the others wait for before their first start), the others until
# stopped; `FAILING` exits 3 one second into attempt 0.
SHAPES = {
    "tf": ({"Chief": 1, "PS": 1, "Worker": 2}, "exp-chief-0", "exp-worker-1", None),
    "jax": ({"Worker": 3}, "exp-worker-0", "exp-worker-2", "JAX_COORDINATOR_ADDRESS"),
    "xgboost": ({"Master": 1, "Worker": 2}, "exp-master-0", "exp-worker-1", "MASTER_PORT"),
}
COMMAND = """\
echo "attempt $AICHOR_RESTART_ATTEMPT"
if [ "$HOSTNAME" = "$ENTRY" ]; then
  if [ -n "$PORT_VAR" ]; then
    python3 -c "import os, socket, time; v = os.environ[os.environ['PORT_VAR']]; \
s = socket.create_server(('', int(v.rsplit(':', 1)[-1]))); time.sleep(600)" &
  fi
  sleep 3; echo trained; exit 0
fi
if [ "$HOSTNAME" = "$FAILING" ] && [ "$AICHOR_RESTART_ATTEMPT" = 0 ]; then sleep 1; exit 3; fi
exec sleep 600
"""


@pytest.mark.parametrize("operator", sorted(SHAPES))
def test_every_framework_restarts_as_a_group(operator):
    counts, entry, failing, port = SHAPES[operator]
    types = {t: {"count": n, "resources": {"cpus": 1, "ramRatio": 1}} for t, n in counts.items()}
    data = {"spec": {"operator": operator, "image": "i", "command": COMMAND, "types": types}}
    env = pod_env(
        ENTRY=entry,
        FAILING=failing,
        PORT_VAR=port or "",
    )
    with LocalCluster(expand(data, max_restarts=1).objects, env) as cluster:
        results = cluster.run(timeout=120)
    assert {pod: r.returncode for pod, r in results.items()} == dict.fromkeys(results, 0)
    assert "restart attempt 1 (1 of 1 counted)" in results[entry].stdout
    assert results[entry].stdout.count("trained") == 1
    for pod, result in results.items():  # every replica ran both attempts
        assert "attempt 0" in result.stdout and "attempt 1" in result.stdout, (pod, result.stdout)


# MPI: the launcher's mpirun leads; rank 1 (on the second worker) exits 3 in the attempts
# FAILS lists, which ends mpirun with an error: every replica restarts, the workers' sshd too.
RANKS = """\
import os
import shutil
from mpi4py import MPI
comm = MPI.COMM_WORLD
rank, attempt = comm.Get_rank(), os.environ["AICHOR_RESTART_ATTEMPT"]
total = comm.allreduce(rank + 1)
print(f"rank {rank} of {comm.Get_size()} attempt {attempt} sum {total}", flush=True)
if rank == 1 and attempt in os.environ["FAILS"].split(","):
    os._exit(3)
comm.Barrier()
print(f"rank {rank} done", flush=True)
"""


@pytest.mark.parametrize(("fails", "succeeds"), [("0", True), ("0,1", False)])
def test_an_mpi_job_restarts_as_a_group(tmp_path, monkeypatch, fails, succeeds):
    """As `run --local` runs it (its generated SSH key pair)."""
    if not (shutil.which("mpirun") and Path("/usr/sbin/sshd").exists()):
        pytest.skip("needs Debian's openmpi-bin and openssh-server (`make test` installs them)")
    pytest.importorskip("mpi4py")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    (tmp_path / "ranks.py").write_text(RANKS)
    command = (
        "mpirun -np 2 --bind-to none --map-by slot -x PATH -x FAILS -x AICHOR_RESTART_ATTEMPT "
        "python3 ranks.py"
    )
    resources = {"cpus": 1, "ramRatio": 1}
    spec = {
        "operator": "mpi",
        "image": "img",
        "command": command,
        "slotsPerWorker": 1,
        "env": [{"name": "FAILS", "value": fails}],
        "types": {
            "Launcher": {"resources": resources},
            "Worker": {"count": 2, "resources": resources},
        },
    }
    manifest = tmp_path / "mpi.yaml"
    manifest.write_text(json.dumps({"kind": "AIchorManifest", "apiVersion": "0.2.2", "spec": spec}))
    lines: list[tuple[str, str]] = []
    try:
        run_experiment(
            doors.load(manifest),
            Settings(max_restarts=1),
            name="exp",
            timeout=240,
            on_line=lambda *x: lines.append(x),
        )
        code = 0
    except LocalRunFailed as failed:
        code = failed.status
    said = [line for pod, line in lines if pod == "exp-launcher-0"]
    if succeeds:
        assert code == 0, lines[-60:]
        assert "rank 1 of 2 attempt 0 sum 3" in said and "rank 1 of 2 attempt 1 sum 3" in said
        assert "rank 0 done" in said and "rank 1 done" in said
    else:
        assert code == 211, lines[-60:]
        # (mpirun ends with the failed rank's code, 3, or its own 1 when it aborts first)
        why = re.compile(
            r"aichor: the experiment has failed: exp-launcher-0 exited with [13] at attempt 1; "
            r"1 restart\(s\) spent; first failure: exp-launcher-0 exited with [13] at attempt 0"
        )
        told = [(p, line) for p, line in lines if line.startswith("aichor:")]
        for pod in ("exp-launcher-0", "exp-worker-0", "exp-worker-1"):
            assert any(p == pod and why.fullmatch(line) for p, line in lines), told
