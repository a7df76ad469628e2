"""Elastic PyTorch (issue 69): a Kubeflow PyTorchJob with an `elasticPolicy`, run on the local
cluster as the Training Operator runs it on a cluster. A node lost mid-training has its container
restarted in place (restartPolicy OnFailure, the kubelet's back-off), torchrun's agents re-form
their c10d rendezvous with it (torch 2.13's agents through a restart of their own, after its
store's 60 s timeout: docs/frameworks/pytorch.md says why), and training goes on from its
checkpoint to its last step: a member's restart is not the experiment's failure. The files are the ones
docs/frameworks/pytorch.md prints."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from doc_snippets import fences
from kube import NEEDS_CLUSTER, needs

from aichor_iac import cli, doors, planning
from aichor_iac.local.parts import Part
from aichor_iac.settings import Settings

pytestmark = NEEDS_CLUSTER

PAGE = ROOT / "docs/frameworks/pytorch.md"


def page_files(into: Path) -> Path:
    """The page's elastic files, saved as a reader saves them; the PyTorchJob's path."""
    for fence in fences(PAGE):
        if fence.title and fence.title.startswith("elastic/"):
            (into / fence.title).parent.mkdir(parents=True, exist_ok=True)
            (into / fence.title).write_text(fence.text)
    return into / "elastic/pytorchjob.yaml"


@needs("torch")
def test_an_elastic_pytorchjob_losing_a_node_trains_on_to_its_last_step(tmp_path, capsys):
    path = page_files(tmp_path)
    started = time.monotonic()
    code = cli.main(["run", "--local", str(path), "--output", "json", "--timeout", "240"])
    took = time.monotonic() - started
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    printed = [(d["pod"], d["line"]) for d in lines if "pod" in d]
    said = "\n".join(f"{pod} {line}" for pod, line in printed)
    assert code == 0, said[-4000:]
    assert took < 240
    assert ("elastic-worker-2", "node 2: lost at step 15") in printed
    # Every node's rank reached the last step, the ones after the loss from its checkpoint
    done = {pod for pod, line in printed if re.fullmatch(r"node \d rank \d: done at step 30", line)}
    assert done == {f"elastic-worker-{i}" for i in range(3)}, said[-4000:]
    resumed = [line for _, line in printed if re.search(r"of \d: from step [1-9]", line)]
    assert resumed and all(line.endswith("from step 15") for line in resumed), resumed
    # The lost node's pod restarted in place (its container), not made again
    assert cli.main(["status", "--local", str(path), "--output", "json"]) == 0
    status = json.loads(capsys.readouterr().out)
    (group,) = status["groups"]
    restarts = {pod["pod"]: pod["restarts"] for pod in group["pods"]}
    assert group["condition"] == "Complete" and restarts["elastic-worker-2"] >= 1, restarts


@pytest.mark.parametrize(
    ("elastic", "rejoining"), [({"minReplicas": 2, "maxReplicas": 3}, ("worker",)), (None, ())]
)
def test_only_an_elastic_jobs_members_restart_in_place_in_a_local_run(tmp_path, elastic, rejoining):
    """A local run stays a smoke test (a replica's first failure decides, even one its Job
    would restart) but for an elastic job's members, whose restarts the others ride out."""
    data = yaml.safe_load(page_files(tmp_path).read_text())
    if elastic is None:
        del data["spec"]["elasticPolicy"]
    plan = planning.blueprint(doors.validate(data), Settings(), "elastic").plan
    assert Part.of("elastic", plan).rejoining == rejoining


# A node of the test below: node 0 hosts the rendezvous (its port open) and waits for the
# others; nodes 1 and 2 die of SIGKILL each time they start, as nodes lost for good
NODE = """import os, signal, socket
node = int(os.environ["JOB_COMPLETION_INDEX"])
if node == 0:
    port = int(os.environ["PET_RDZV_ENDPOINT"].rsplit(":", 1)[1])
    server = socket.create_server(("", port))
    print("node 0: waiting for 2 nodes", flush=True)
    signal.pause()  # (until the run's end stops it)
print(f"node {node}: lost", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_two_nodes_lost_for_good_fail_the_run_once_its_restarts_are_spent(tmp_path, capsys):
    """Nodes 1 and 2 lost for good (their containers die of SIGKILL each time they start),
    node 0 waiting for its rendezvous: below minReplicas the others cannot train, and with
    runPolicy.backoffLimit 2 the Worker Job fails once its containers' restarts, counted
    across all its members as Kubernetes counts an OnFailure Job's, pass 2: the run ends
    (it does not wait for ever) and says which node was lost first, and `status` why."""
    folder = page_files(tmp_path).parent
    data = yaml.safe_load((folder / "pytorchjob.yaml").read_text())
    data["spec"]["runPolicy"] = {"backoffLimit": 2}
    (container,) = data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    container["command"] = ["python3", "node.py"]
    (folder / "node.py").write_text(NODE)
    path = folder / "lost-two.yaml"
    path.write_text(yaml.safe_dump(data))
    code = cli.main(["run", "--local", str(path), "--timeout", "120"])
    out = capsys.readouterr().out
    assert code == 137, out[-3000:]
    assert re.search(r"elastic failed \(137\): elastic-worker-[12] failed first \(SIGKILL\)", out)
    assert cli.main(["status", "--local", str(path), "--output", "json"]) == 0
    status = json.loads(capsys.readouterr().out)
    (group,) = status["groups"]
    assert (group["condition"], group["reason"]) == ("Failed", "BackoffLimitExceeded")
    assert sum(pod["restarts"] for pod in group["pods"]) == 2  # (the Job's, not each pod's)
    first = status["failedFirst"]
    assert first["pod"] in ("elastic-worker-1", "elastic-worker-2") and first["signal"] == "SIGKILL"
    assert f"node {first['pod'][-1]}: lost" in first["lines"]  # (its last lines)
