"""`aichor-iac run --local` (and `aichor_iac.local.run_experiment`): every replica of an
experiment as local processes, each line of their output prefixed with the pod, the
experiment's result as the exit status; `--replicas` shrinks it; what the machine lacks, or
an experiment that never ends, is a clear error."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import fn_helpers
import pytest
import yaml
from kube import LocalCluster

from aichor_iac import cli, experiment_from_function, local

real = pytest.mark.skipif(not LocalCluster.available(), reason="needs `ip netns` (root)")
PODS = ("master-0", "worker-0", "worker-1")
PRINT_INDEX = (
    'python3 -c \'import os; i = int(os.environ["JOB_COMPLETION_INDEX"]); print("index", i); '
    "raise SystemExit(3 if i == {fail} else 0)'"
)


def batchjob(tmp_path: Path, count: int, fail: int = -1) -> Path:
    data = {
        "kind": "AIchorManifest",
        "spec": {
            "operator": "batchjob",
            "image": "python:3.11",
            "command": PRINT_INDEX.format(fail=fail),
            "types": {"Worker": {"count": count, "resources": {"cpus": 1, "ramRatio": 1}}},
        },
    }
    path = tmp_path / "batch.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@real
@pytest.mark.parametrize(
    ("count", "fail", "options", "status", "seen", "unseen"),
    [
        (3, -1, [], 0, ["exp-worker-0 index 0", "exp-worker-2 index 2", "exp succeeded"], []),
        (6, -1, ["--replicas", "2"], 0, ["exp-worker-1 index 1"], ["exp-worker-2"]),
        (3, 1, [], 3, ["exp-worker-1 index 1", "exp failed (3)"], []),
    ],
)
def test_run_local_prefixes_each_line_and_exits_with_the_result(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    count: int,
    fail: int,
    options: list[str],
    status: int,
    seen: list[str],
    unseen: list[str],
) -> None:
    path = batchjob(tmp_path, count, fail)
    argv = ["run", "--local", str(path), "--name", "exp", *options]
    assert cli.main(argv) == status
    out = capsys.readouterr().out
    for text in seen:
        assert text in out, out
    for text in unseen:
        assert text not in out, out


@real
def test_a_function_experiment_runs_locally() -> None:
    lines: list[tuple[str, str]] = []
    model = experiment_from_function(fn_helpers.report, args={"count": 1})
    status = local.run_experiment(
        model, name="fn", on_line=lambda pod, line: lines.append((pod, line))
    )
    assert status == 0
    assert any(pod == "fn-master-0" and line.startswith("RESULT ") for pod, line in lines)


@pytest.mark.parametrize(
    ("argv", "lacks", "message"),
    [
        (["--replicas", "0"], [], "--replicas: give 1 or more"),
        ([], ["root, for network namespaces and bind mounts (run it with sudo)"], "needs root"),
    ],
)
def test_what_a_local_run_cannot_do_is_a_clear_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    lacks: list[str],
    message: str,
) -> None:
    monkeypatch.setattr(local, "missing", lambda: lacks)
    assert cli.main(["run", "--local", str(batchjob(tmp_path, 1)), *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_raycluster_never_ends_so_it_is_not_run_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "missing", lambda: [])
    path = Path(__file__).parent / "kuberay" / "ray-cluster.sample.yaml"
    with pytest.raises(local.LocalUnavailable, match="RayCluster runs until destroyed"):
        local.run_experiment(local_manifest(path))


def local_manifest(path: Path) -> Any:
    from aichor_iac import manifest

    return manifest.load(path)


@real
def test_commands_run_in_the_manifests_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As AIchor runs the command in the image built from the manifest's repository.
    (tmp_path / "hello.py").write_text("import os\nprint('hello from', os.getcwd())\n")
    path = batchjob(tmp_path, 1)
    data = yaml.safe_load(path.read_text())
    data["spec"]["command"] = "python3 hello.py"
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["run", "--local", str(path), "--name", "exp"]) == 0
    assert f"exp-worker-0 hello from {tmp_path}" in capsys.readouterr().out


@real
@pytest.mark.parametrize(
    ("example", "framework", "lines"),
    [
        (  # three GPU replicas of examples/train.py, on CPUs: DDP over gloo
            "pytorch",
            "torch",
            ["pytorch-ddp-master-0 epoch 9 loss"]
            + [f"pytorch-ddp-{p} rank {r} of 3 done" for r, p in enumerate(PODS)],
        ),
        (  # examples/train_xgb.py: the tracker on the master, every replica boosting
            "xgboost",
            "xgboost",
            [f"xgboost-dist-{p} rank {r} of 3: error" for r, p in enumerate(PODS)],
        ),
        (  # examples/process.py: 1 + 2 Jobs of 2 shards each (capped from 4 Jobs of 10)
            "jobset",
            "tensorboard",  # (TensorBoard serves the shipped logs beside them)
            ["shards-heavy-0-0 processed job 0 (index 0 of its type), shard 0"]
            + [
                f"shards-shard-{j}-{s} processed job {j + 1} (index {j} of its type), shard {s}"
                for j in range(2)
                for s in range(2)
            ],
        ),
    ],
)
def test_the_examples_run_locally_as_a_smoke_test(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    example: str,
    framework: str,
    lines: list[str],
) -> None:
    # `--replicas 2`: a master and two workers, the GPUs masked off; the pods run this
    # environment's Python, which has the framework.
    pytest.importorskip(framework)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    path = Path(__file__).parent.parent / "examples" / f"{example}.yaml"
    assert cli.main(["run", "--local", str(path), "--replicas", "2"]) == 0
    out = capsys.readouterr().out
    for line in lines:
        assert line in out, out[-3000:]
    if example == "jobset":  # the cap holds: no third Job, no third shard
        assert "shards-shard-2-" not in out and "shard 2" not in out


@real
def test_a_failed_entry_point_ends_the_run_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The master fails before it listens: its workers would wait for it (as on a cluster, up
    # to aichor:peerWaitSeconds); the local run ends with the failure instead.
    data = {
        "kind": "AIchorManifest",
        "spec": {
            "operator": "pytorch",
            "image": "i",
            "command": "exit 7",
            "types": {
                "Master": {"resources": {"cpus": 1, "ramRatio": 1}},
                "Worker": {"count": 2, "resources": {"cpus": 1, "ramRatio": 1}},
            },
        },
    }
    path = tmp_path / "failing.yaml"
    path.write_text(yaml.safe_dump(data))
    started = time.monotonic()
    assert cli.main(["run", "--local", str(path), "--name", "exp"]) == 7
    assert time.monotonic() - started < 60
    assert "exp failed (7)" in capsys.readouterr().out
