"""Progress reports on a local run (issue 52): the receiver runs as the entry pod's native
sidecar, as on a cluster, with a CA, a certificate and a token made for the run; a training
script that calls kubeflow SDK 0.5's `update_trainjob_status` reaches it with no setting of
its own, and the run's output and result carry the last report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kube import LocalCluster

from aichor_iac import cli

pytestmark = pytest.mark.skipif(
    not LocalCluster.available(), reason="needs `ip netns` (root) for the local cluster"
)
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
    (tmp_path / "train.py").write_text(REPORTS)
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
