"""`pulumi up` against real pods: the await model of tests/pulumi_up.py creates each object only
once its dependencies' awaits hold, and the awaited state comes from the local cluster
(aichor_iac/local.py) running the rendered pods with real processes: init containers that wait for
peers, readiness probes, followers, a gang scheduler that schedules a PodGroup's pods only
once all exist, host names that resolve only once a pod is scheduled.

Each replica that runs the user's command runs a miniature rendezvous (`RENDEZVOUS`): the entry
point listens on the framework's port until every other such replica has said hello, then
ends; the others say hello and run until the product's follower stops them. `up` must finish,
in the order docs/how-it-runs.md gives, with the run's outcome, and the orders that used to deadlock must stop
with "deadlock: X waits for Y".
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import AICHOR_EXAMPLES
from kube import NEEDS_CLUSTER, LocalCluster, pod_env
from pulumi_up import Deadlock, Failed, Live, unarranged, up
from test_pulumi_up import SCHEDULING, data, stack_settings

from aichor_iac import doors, engine, planning
from aichor_iac.planning import blueprints
from aichor_iac.settings import Settings

pytestmark = NEEDS_CLUSTER

ENV = pod_env(AICHOR_FOLLOW_INTERVAL="0.2")
SSHD = shutil.which("ssh-keygen") and Path("/usr/sbin/sshd").exists()

RENDEZVOUS = """\
import os, socket, sys, time
entry, port, others, code = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if os.environ["HOSTNAME"] == entry.split(".")[0]:
    server = socket.create_server(("", port))
    while others:
        peer, _ = server.accept()
        name = peer.recv(100).decode()
        if name:  # not an init container's probe
            print("hello from", name, flush=True)
            others -= 1
        peer.close()
    sys.exit(code)
while True:
    try:
        with socket.create_connection((entry, port), timeout=2) as peer:
            peer.sendall(os.environ["HOSTNAME"].encode())
        break
    except OSError:
        time.sleep(0.1)
print("joined", entry, flush=True)
while True:
    time.sleep(60)
"""


def rendezvous(spec: dict, name: str, settings: Settings, code: int = 0) -> str:
    """The command that makes the experiment's replicas rendezvous at its entry point, on the
    port its peers wait for (or any free one)."""
    blueprint = planning.blueprint(doors.validate(spec), settings, name)
    plan, names = blueprint.plan, blueprint.names
    if plan.independent:  # jobset, batchjob: each pod does its work and ends
        # (for a second, with TensorBoard too: a TERM that reaches its log shipper's sidecar
        # before the shipper's handler is sent again each second, k8s/tensorboard.py; the
        # jobset example's 41 pods end within 12 s beside two busy loops)
        return f"sleep 1; echo done; exit {code}"
    entry = (
        f"{names.job(plan.entry_point)}-0.{names.experiment}.{names.namespace}.svc.cluster.local"
    )
    ports = [e.port for g in plan.groups for e in g.waits_for if e.host == entry and e.port]
    others = sum(g.count for g in plan.groups if not g.program) - 1
    return f"python3 -c {shlex.quote(RENDEZVOUS)} {entry} {(ports or [29500])[0]} {others} {code}"


def run_up(spec: dict, settings: Settings, name: str = "exp", stall: float = 45) -> list[str]:
    """`pulumi up` of the experiment on the local cluster; every pod must end, and well. A
    Kueue queue admits exactly the pods the experiment runs at once."""
    model = doors.validate(spec)
    rendering = engine.expand(model, settings, name=name)
    plan = planning.blueprint(model, settings, name).plan
    secret, quota = plan.secret, plan.at_once if settings.kueue_queue else None
    secrets = {}
    if secret == "ssh":
        secrets = ssh_keys()
    elif secret == "password":
        secrets = {"password": "s3cret-token-for-tests-0123456789"}
    with LocalCluster(rendering.objects, ENV, secrets, kueue_quota=quota) as local:
        order = up(rendering, Live(local, stall))
        # What `up` did not wait for ends too, soon: alone the 41 pods of the jobset example
        # end within 10 s; beside the suite's other real runs on 2 cores, 60 s once was short.
        deadline = time.monotonic() + 180
        for thread in (t for threads in local.started.values() for t in threads):
            thread.join(max(0.0, deadline - time.monotonic()))
        failed = {p: r for p, r in local.results.items() if r.returncode != 0}
        assert not failed, {p: r.stdout[-500:] + r.stderr[-1500:] for p, r in failed.items()}
        assert len(local.results) == len(local.pods)
    return order


def ssh_keys() -> dict[str, str]:
    key = Path(os.environ.get("TMPDIR", "/var/tmp")) / f"aichor-key-{os.getpid()}"
    key.unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    keys = {"ssh-privatekey": key.read_text(), "ssh-publickey": key.with_suffix(".pub").read_text()}
    key.unlink()
    key.with_suffix(".pub").unlink()
    return keys


# Shapes no example has: AIchor 0.2.3's single worker type, batchjob, and Jobs that run fewer
# pods at once than they complete.
SHAPES = ["pytorch 0.2.3", "batchjob", "jobset parallelisms"]
WAITS = ["none", "ready", "complete"]


def covering(cases: list) -> list[tuple]:
    """(case, wait, scheduling) runs in which each case meets every `aichor:wait` and every
    scheduling, and each pair of a wait and a scheduling meets some case: 4 runs a case rather
    than 12. The model's table (tests/test_pulumi_up.py) runs every combination; these real
    runs check the model on real pods, and a combination's own ordering is the model's."""
    schedulings = sorted(SCHEDULING)
    return [
        (case, WAITS[(i + j) % len(WAITS)], scheduling)
        for i, case in enumerate(cases)
        for j, scheduling in enumerate(schedulings)
    ]


def needs_sshd(name: str) -> None:
    if name.startswith("mpi") and not SSHD:
        pytest.skip("MPI workers run sshd: needs openssh-server (installed by `make test` as root)")


@pytest.mark.parametrize("cases", [SHAPES, AICHOR_EXAMPLES])
def test_the_real_runs_meet_every_wait_scheduling_and_pair(cases):
    runs = covering(cases)
    for case in cases:
        assert {w for c, w, _ in runs if c == case} == set(WAITS)
        assert {s for c, _, s in runs if c == case} == set(SCHEDULING)
    assert {(w, s) for _, w, s in runs} == {(w, s) for w in WAITS for s in SCHEDULING}


@pytest.mark.parametrize(("case", "wait", "scheduling"), covering(SHAPES))
def test_pulumi_up_finishes_on_real_pods(case, wait, scheduling):
    spec = data(case)
    settings = Settings(wait=wait, **SCHEDULING[scheduling])
    spec["spec"]["command"] = rendezvous(spec, "exp", settings)
    order = run_up(spec, settings)
    plan = planning.blueprint(doors.validate(spec), settings, "exp").plan
    jobs = [o.removeprefix("Job/exp-") for o in order if o.startswith("Job/")]
    assert sorted(jobs) == sorted(g.role for g in plan.groups)
    for group in plan.groups:  # each after the groups docs/how-it-runs.md says it comes after
        assert all(jobs.index(role) < jobs.index(group.role) for role in group.after)


@pytest.mark.parametrize(
    ("path", "wait", "scheduling"),
    covering([p for p in AICHOR_EXAMPLES if p.stem not in ("ray", "kuberay")]),
    ids=lambda value: value.stem if isinstance(value, Path) else value,
)
def test_every_example_finishes_on_real_pods(path, wait, scheduling):
    """Every example with its stack file, under every `aichor:wait`, alone, in either gang
    and queued by Kueue (`covering`). The Ray examples are in the model's table (tests/test_pulumi_up.py)
    and run for real in tests/local/test_run.py: their nodes run Ray itself, whose start
    (~30 s a case here) the table's 24 cases would add to the suite, and their command is a
    Ray job, which the rendezvous stand-in is not."""
    needs_sshd(path.stem)
    settings = stack_settings(path, wait, scheduling)
    spec = yaml.safe_load(path.read_text())
    name = settings.experiment_name or doors.validate(spec).name or path.stem
    spec["spec"]["command"] = rendezvous(spec, name, settings)
    run_up(spec, settings, name)


def test_a_failing_entry_point_fails_pulumi_up_under_complete():
    spec = data("pytorch")
    settings = Settings(wait="complete")
    spec["spec"]["command"] = rendezvous(spec, "exp", settings, code=3)
    with pytest.raises(Failed, match=r"Job/exp-master failed \(exp-master-0 failed"):
        run_up(spec, settings)


@pytest.mark.parametrize(
    ("case", "settings", "expected"),
    [
        (
            "pytorch",
            {"wait": "complete"},
            "deadlock: Job/exp-worker waits for Job/exp-master (awaited until completion; "
            "pods: exp-master-0 running",  # (then its last lines)
        ),
        (
            "mpi",
            {"gang_scheduler": "volcano"},
            "deadlock: Job/exp-launcher waits for Job/exp-worker (awaited until "
            "jsonpath={$[?@.ready==2 || @.succeeded==2]}; pods: exp-worker-0 pending "
            "(unschedulable: PodGroup exp has 2 of 3 pods), exp-worker-1 pending "
            "(unschedulable: PodGroup exp has 2 of 3 pods))",
        ),
    ],
)
def test_the_old_order_deadlocks_on_real_pods(case, settings, expected, monkeypatch):
    needs_sshd(case)
    monkeypatch.setattr(blueprints, "arrange", unarranged)  # the order before
    spec = data(case)
    chosen = Settings(**settings)
    spec["spec"]["command"] = rendezvous(spec, "exp", chosen)
    model = doors.validate(spec)
    rendering = engine.expand(model, chosen, name="exp")
    secrets = ssh_keys() if case == "mpi" else {}
    with LocalCluster(rendering.objects, ENV, secrets) as local, pytest.raises(Deadlock) as caught:
        up(rendering, Live(local, stall=10))
    assert any(line.startswith(expected) for line in str(caught.value).splitlines())
