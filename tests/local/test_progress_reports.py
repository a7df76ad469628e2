"""Progress reports on a local run (issue 52): the receiver runs as the entry pod's native
sidecar, as on a cluster, with a CA, a certificate and a token made for the run; a training
script that calls kubeflow SDK 0.5's `update_trainjob_status` reaches it with no setting of
its own, and the run's output and result carry the last report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kube import NEEDS_CLUSTER, LocalCluster

from aichor_iac import cli

pytestmark = NEEDS_CLUSTER
# Three reports, 6 s apart (the SDK sends at most one every 5 s), as Trainer's guide calls it
REPORTS = """\
import time
from kubeflow.trainer import update_trainjob_status
update_trainjob_status(progress_percent=0)
time.sleep(6)
update_trainjob_status(progress_percent=50, metrics={"loss": 0.5})
time.sleep(6)
update_trainjob_status(progress_percent=100, metrics={"loss": 0.25})
print("trained")
"""


def experiment(tmp_path: Path, progress: bool = True) -> tuple[Path, Path]:
    # (without the receiver the SDK sends nothing: its pauses between reports are not needed)
    (tmp_path / "train.py").write_text(REPORTS if progress else REPORTS.replace("(6)", "(0)"))
    worker = {"count": 1, "resources": {"cpus": 1, "ramRatio": 1}}
    spec = {"operator": "batchjob", "image": "python:3.11", "command": "python3 train.py"}
    manifest = tmp_path / "exp.yaml"
    manifest.write_text(
        yaml.safe_dump({"kind": "AIchorManifest", "spec": {**spec, "types": {"Worker": worker}}})
    )
    stack = tmp_path / "Pulumi.local.yaml"
    stack.write_text(yaml.safe_dump({"config": {"aichor:progress": progress}}))
    return manifest, stack


@pytest.mark.parametrize("output", ["json", "text"])
def test_the_sdks_reports_reach_the_run_and_its_result_carries_the_last(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    manifest, stack = experiment(tmp_path)
    argv = ["run", "--local", str(manifest), "--name", "exp", "--stack-config", str(stack)]
    assert cli.main([*argv, "--output", output]) == 0
    out = capsys.readouterr().out
    if output == "text":
        assert "exp-worker-0/progress 50% · loss 0.5" in out, out
        assert "aichor-iac: exp succeeded (100% · loss 0.25)" in out, out
        return
    lines = [json.loads(line) for line in out.splitlines()]
    reports = [line["trainerStatus"] for line in lines if "trainerStatus" in line]
    assert [r.get("progressPercentage") for r in reports] == [0, 50, 100, 100]
    result = lines[-1]
    assert (result["result"], result["trainerStatus"]["progressPercentage"]) == ("succeeded", 100)
    assert result["trainerStatus"]["metrics"] == [{"name": "loss", "value": "0.25"}]
    assert {"pod": "exp-worker-0", "line": "trained"} in lines


def test_without_progress_the_script_runs_unchanged_and_reports_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest, stack = experiment(tmp_path, progress=False)
    argv = ["run", "--local", str(manifest), "--name", "exp", "--stack-config", str(stack)]
    assert cli.main([*argv, "--output", "json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert not any("trainerStatus" in line for line in lines)
    assert lines[-1] == {"experiment": "exp", "result": "succeeded", "status": 0}


def test_status_local_shows_a_running_experiments_last_report(tmp_path: Path) -> None:
    """`status --local` reads the receiver's log through the run's read API, as it reads a
    cluster's: the last report, in Trainer's shape, while the pod runs."""
    import io
    import time
    from contextlib import redirect_stdout

    from conftest import expand
    from kube import pod_env

    from aichor_iac.local.api import LocalApi, announce
    from aichor_iac.local.prepare import progress_hosts, secret_values

    script = tmp_path / "report.py"
    script.write_text(
        "import time\nfrom kubeflow.trainer import update_trainjob_status\n"
        "while not update_trainjob_status(progress_percent=50, metrics={'loss': 0.5}):\n"
        "    time.sleep(0.5)\ntime.sleep(60)\n"
    )
    worker = {"count": 1, "resources": {"cpus": 1, "ramRatio": 1}}
    spec = {"operator": "batchjob", "image": "i", "command": "python3 report.py"}
    data = {"kind": "AIchorManifest", "spec": {**spec, "types": {"Worker": worker}}}
    manifest = tmp_path / "exp.yaml"
    manifest.write_text(yaml.safe_dump(data))
    objects = expand(data, name="watched", progress=True).objects
    keys = sorted({k for o in objects if o["kind"] == "Secret" for k in o["stringData"]})
    secrets = secret_values(keys, progress_hosts(objects))
    stack = tmp_path / "Pulumi.local.yaml"
    stack.write_text(yaml.safe_dump({"config": {"aichor:progress": True}}))
    argv = ["status", "--local", str(manifest), "--name", "watched", "--stack-config", str(stack)]
    with (
        LocalCluster(objects, pod_env(), secrets=secrets, workdir=tmp_path) as cluster,
        LocalApi(cluster, "default") as api,
        announce("watched", api.url, api.namespace),
    ):
        cluster.start("watched-worker")
        deadline, found = time.monotonic() + 60, {}
        while time.monotonic() < deadline and not found.get("trainerStatus"):
            out = io.StringIO()
            with redirect_stdout(out):
                assert cli.main([*argv, "--output", "json"]) == 0
            found = json.loads(out.getvalue())
            time.sleep(0.5)
        out = io.StringIO()
        with redirect_stdout(out):
            assert cli.main(argv) == 0
    assert found["trainerStatus"]["progressPercentage"] == 50
    assert found["trainerStatus"]["metrics"] == [{"name": "loss", "value": "0.5"}]
    assert found["progress"]["stale"] is False
    assert "progress  50% · loss 0.5 (" in out.getvalue()


# A Hugging Face Trainer on a model built here (no download), with no callback added: the
# transformers release adds its KubeflowCallback when KUBEFLOW_TRAINER_SERVER_URL is set.
HF_TRAINER = """\
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

torch.manual_seed(0)
config = GPT2Config(vocab_size=32, n_positions=8, n_embd=16, n_layer=1, n_head=2)
rows = [torch.randint(0, 32, (8,)) for _ in range(16)]
args = TrainingArguments(
    output_dir="out", max_steps=4, per_device_train_batch_size=4, logging_steps=1,
    save_strategy="no", use_cpu=True,
)
data = [{"input_ids": row, "labels": row} for row in rows]
Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=data).train()
"""


def test_a_hugging_face_trainer_reports_with_no_code_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest, stack = experiment(tmp_path)
    (tmp_path / "train.py").write_text(HF_TRAINER)
    argv = ["run", "--local", str(manifest), "--name", "hf", "--stack-config", str(stack)]
    assert cli.main([*argv, "--output", "json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    reports = [line["trainerStatus"] for line in lines if "trainerStatus" in line]
    assert reports[0]["progressPercentage"] == 0
    assert reports[-1]["progressPercentage"] == 100
    assert lines[-1]["result"] == "succeeded"
    assert "train_loss" in {m["name"] for m in lines[-1]["trainerStatus"]["metrics"]}


# Trainer's raw-HTTP client as its guide writes it: its objective posted as its first act,
# once, with no retry (an error ends it non-zero)
POSTED_AT_ONCE = """\
import json, os, ssl, urllib.request
from datetime import datetime, timezone
environ = os.environ
loss = (float(environ['KUBEFLOW_TRAINER_OPT_X']) - 0.3) ** 2
token = open(environ['KUBEFLOW_TRAINER_SERVER_TOKEN']).read().strip()
context = ssl.create_default_context(cafile=environ['KUBEFLOW_TRAINER_SERVER_CA_CERT'])
status = {'lastUpdatedTime': datetime.now(timezone.utc).isoformat(),
          'metrics': [{'name': 'loss', 'value': str(loss)}]}
headers = {'Authorization': f'Bearer {token}', 'Content-Type': 'application/json'}
body = json.dumps({'trainerStatus': status}).encode()
request = urllib.request.Request(environ['KUBEFLOW_TRAINER_SERVER_URL'], body, headers)
urllib.request.urlopen(request, context=context).read()
"""


def test_a_report_posted_at_a_containers_first_instant_is_received_under_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 66: the receiver listens before the entry pod's training container starts (its
    native sidecar's startup probe), so that each of 8 trials' one report, posted at once with
    no retry beside two busy processes, is received: every trial has its objective."""
    space = {"uniform": {"min": "-1", "max": "1"}}
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "OptimizationJob",
        "metadata": {"name": "at-once"},
        "spec": {
            "objectives": [{"metric": "loss"}],
            "searchAlgorithm": {"random": {"seed": 3}},
            "parameters": [{"name": "x", "searchSpace": space}],
            "numTrials": 8,
            "parallelTrials": 4,
            "trainJobTemplate": {
                "spec": {
                    "runtimeRef": {"name": "torch-distributed"},
                    "trainer": {
                        "image": "python:3.12",
                        "command": ["python3", "-c", POSTED_AT_ONCE],
                    },
                }
            },
        },
    }
    path = tmp_path / "at-once.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        status = cli.main(["run", "--local", str(path), "--output", "json", "--timeout", "300"])
    finally:
        for process in busy:
            process.kill()
            process.wait()
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (sweep,) = [line for line in lines if "sweep" in line]
    assert status == 0
    assert [t["state"] for t in sweep["trials"]] == ["Succeeded"] * 8
    assert all(t["objective"] is not None for t in sweep["trials"])
