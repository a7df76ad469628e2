"""`aichor-iac run --local` (and `aichor_iac.local.run_experiment`): every replica of an
experiment as local processes, each line of their output prefixed with the pod, the
experiment's result as the exit status; `--replicas` shrinks it; what the machine lacks, or
an experiment that never ends, is a clear error."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import fn_helpers
import pytest
import yaml
from conftest import restarting_jobset
from kube import NEEDS_CLUSTER, ONE_RAY_CLUSTER_AT_A_TIME, LocalCluster
from rich.console import Console

from aichor_iac import cli, experiment_from_function, local
from aichor_iac.local import host
from aichor_iac.local.parts import failed_first
from aichor_iac.local.progress import progress

real = NEEDS_CLUSTER
PODS = ("master-0", "worker-0", "worker-1")
PRINT_INDEX = (
    'python3 -c \'import os; i = int(os.environ["JOB_COMPLETION_INDEX"]); print("index", i); '
    "raise SystemExit(3 if i == {fail} else 0)'"
)


# The run's last line of a failed experiment: the pod whose failure decided it, and why
FAILED_FIRST = "failed (3): exp-worker-1 failed first"


@pytest.mark.parametrize(
    ("outcome", "said"),
    [
        ((3, "exp-worker-1"), "exp-worker-1 failed first"),  # (the program's own code)
        ((137, "exp-worker-2"), "exp-worker-2 failed first (SIGKILL)"),  # (a lost node, OOM)
        ((143, "exp-worker-0"), "exp-worker-0 failed first (SIGTERM)"),
        ((255, "exp-master-0"), "exp-master-0 failed first"),  # (no signal 127)
    ],
)
def test_the_pod_that_failed_first_is_named_with_its_signal(outcome, said):
    assert failed_first(outcome) == said


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
        (3, 1, [], 3, ["exp-worker-1 index 1", f"exp {FAILED_FIRST}"], ["followed from it"]),
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


# Pod 1 fails once pod 0 runs, then its Job makes it again (backoffLimit 1), which waits; pod
# 0 then fails after it, as a peer whose connection closed does, and fails the Job: the run is
# decided by then (their files in a folder of the machine's: each pod has its own /tmp)
PEER_FAILS_AFTER = """
if [ "$JOB_COMPLETION_INDEX" = 1 ]; then
  if [ -e "$SHARED/gone" ]; then exec sleep 600; fi
  until [ -e "$SHARED/up" ]; do sleep 0.05; done; touch "$SHARED/gone"; exit 3
fi
touch "$SHARED/up"; until [ -e "$SHARED/gone" ]; do sleep 0.05; done
echo Connection closed by peer; exit 1
"""


@real
def test_run_local_says_the_others_errors_followed_where_another_pod_failed_after_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's last line names the pod that failed first and, as its record counts them,
    that the errors of the pods that failed after it followed from it (the first one's pod
    made again since)."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as shared:
        command = f"SHARED={shlex.quote(shared)}\n{PEER_FAILS_AFTER}"
        container = {"name": "main", "image": "python:3.11", "command": ["sh", "-c", command]}
        data = restarting_jobset(container, "peers", "w")
        del data["spec"]["failurePolicy"]  # (no group restart: its Job's own backoffLimit)
        job = data["spec"]["replicatedJobs"][0]["template"]["spec"]
        job.update(completions=2, parallelism=2, completionMode="Indexed", backoffLimit=1)
        path = tmp_path / "peers.yaml"
        path.write_text(yaml.safe_dump(data))
        assert cli.main(["run", "--local", str(path), "--name", "exp"]) == 3
    out = capsys.readouterr().out
    said = "exp failed (3): exp-w-0-1 failed first; the errors of 1 other pod(s) after it"
    assert said in out, out
    # the record says it too, with the exit code the run saw (the pod made again shows none)
    assert cli.main(["history", "exp"]) == 0
    out = capsys.readouterr().out
    assert "failed first: exp-w-0-1, exit 3; the errors of 1 other pod(s) after it" in out, out


CARRIAGE_RETURNS = (
    'python3 -c \'import sys; [sys.stdout.write(f"\\rstep {i}/40 loss {1 / (i + 1):.3f}") '
    'for i in range(41)]; print(); print("done")\''
)


@real
def test_a_progress_bar_shows_its_latest_state_not_every_state_it_drew(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 40-step bar redrawn after carriage returns (tqdm's way) is one short line on the
    run's output: its last state (the pod's log keeps what it printed, as the kubelet's)."""
    path = batchjob(tmp_path, 1)
    data = yaml.safe_load(path.read_text())
    data["spec"]["command"] = CARRIAGE_RETURNS
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["run", "--local", str(path), "--name", "exp", "--output", "json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    printed = [line["line"] for line in lines if line.get("pod") == "exp-worker-0"]
    assert printed == ["step 40/40 loss 0.024", "done"]


class Printing:
    """A container's process as `containers.tail` reads it: each poll, its next bytes are
    printed; it has ended once all are."""

    def __init__(self, printed: Path, chunks: list[bytes]) -> None:
        self.printed, self.chunks, self.returncode = printed, chunks, None
        printed.write_bytes(b"")

    def poll(self) -> int | None:
        if self.chunks:
            with self.printed.open("ab") as out:
                out.write(self.chunks.pop(0))
        self.returncode = None if self.chunks else 0
        return self.returncode


@pytest.mark.parametrize(
    ("chunks", "lines"),
    [
        ([b"caf\xc3", b"\xa9\n"], ["café"]),  # (a character cut between two reads)
        ([b"step 1\nwarn", b"ing: slow\n", b"last"], ["step 1", "warning: slow", "last"]),
    ],
)
def test_a_containers_lines_come_whole_however_they_are_read(
    tmp_path: Path, chunks: list[bytes], lines: list[str]
) -> None:
    from aichor_iac.local import containers

    given: list[str] = []
    process = Printing(tmp_path / "main.out", chunks)
    containers.tail(process, "pod", lambda _, line: given.append(line), tmp_path / "main.log")  # type: ignore[arg-type]
    assert given == lines
    kept = (tmp_path / "main.log").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in kept] == lines  # (each after its time)


@real
def test_a_replica_without_its_module_says_where_it_looked_and_how_to_add_it(
    tmp_path: Path,
) -> None:
    path = batchjob(tmp_path, 1)
    data = yaml.safe_load(path.read_text())
    data["spec"]["command"] = "python3 -c 'import not_installed_here.sub'"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(local.LocalRunFailed) as failed:
        local.run_experiment(path, name="exp")
    assert failed.value.pod == "exp-worker-0" and failed.value.status == 1
    *_, error, hint = failed.value.lines  # the pod's last line, then the run's
    assert error == "ModuleNotFoundError: No module named 'not_installed_here'"
    assert hint == (
        f"aichor-iac: no module named 'not_installed_here' in {sys.prefix} (Python "
        f"{sys.version_info.major}.{sys.version_info.minor}): a local run's replicas take their "
        "programs and Python from this environment, not the image's; install what provides it "
        f"there, e.g. {sys.executable} -m pip install not_installed_here"
    )


@pytest.mark.parametrize(
    ("line", "lacked"),
    [
        (
            "ModuleNotFoundError: No module named 'torch.distributed'",
            ("module", "torch.distributed"),
        ),
        (
            "setpriv: failed to execute tensorboard: No such file or directory",
            ("program", "tensorboard"),
        ),
        ("/bin/sh: 1: torchrun: not found", ("program", "torchrun")),
        ("sh: ray: not found", ("program", "ray")),
        ("ImportError: cannot import name 'x' from 'y'", None),  # (there, but not as used)
        ("print('sh: 1: x: not found')", None),
    ],
)
def test_what_a_replica_lacked_is_read_from_its_last_words(line, lacked) -> None:
    assert host.lacked(line) == lacked


LOST_LOGS = """\
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: lost
spec:
  replicatedJobs:
    - name: w
      template:
        spec:
          template:
            spec:
              restartPolicy: Never
              initContainers:  # a log shipper that cannot end well (its TERM: exit 3)
                - name: tensorboard-logs
                  image: python:3.11
                  restartPolicy: Always
                  command: ["sh", "-c", "trap 'exit 3' TERM; while :; do sleep 0.1; done"]
              containers:
                - name: main
                  image: python:3.11
                  command: ["python3", "-c", "print('trained')"]
"""


@real
def test_a_run_whose_logs_were_not_all_shipped_says_so_and_fails(tmp_path: Path) -> None:
    # Kubernetes would call the pod Succeeded (a sidecar's end does not count); the local
    # run, whose TensorBoard would miss the logs, does not report success
    (path := tmp_path / "lost.yaml").write_text(LOST_LOGS)
    lines: list[tuple[str, str]] = []
    with pytest.raises(local.LocalRunFailed) as failed:
        local.run_experiment(path, on_line=lambda *line: lines.append(line))
    assert (failed.value.status, failed.value.pod) == (1, "lost-w-0-0")
    said = ("lost-w-0-0/tensorboard-logs", "aichor-iac: TensorBoard logs not all shipped (3)")
    assert ("lost-w-0-0", "trained") in lines and said in lines


@real
def test_a_function_experiment_runs_locally() -> None:
    lines: list[tuple[str, str]] = []
    progress: list[dict[str, str]] = []
    model = experiment_from_function(fn_helpers.report, args={"count": 1})
    local.run_experiment(
        model,
        name="fn",
        on_line=lambda pod, line: lines.append((pod, line)),
        on_progress=progress.append,
    )
    assert any(pod == "fn-master-0" and line.startswith("RESULT ") for pod, line in lines)
    # each change of a pod's state, in the order the kubelet goes through them
    order = ["pending", "init", "running", "succeeded"]
    seen = [states["fn-master-0"] for states in progress]
    assert seen[-1] == "succeeded" and seen == sorted(seen, key=order.index), seen


def test_the_progress_display_counts_each_jobs_pods_by_state() -> None:
    states = {"e-master-0": "running", "e-worker-0": "init", "e-worker-1": "succeeded"}
    console = Console(width=100, record=True)
    console.print(progress({**states, "e-worker-10": "failed"}))
    assert [line.split() for line in console.export_text().splitlines()] == [
        ["job", "pending", "init", "running", "succeeded", "failed"],
        ["e-master", "·", "·", "1", "·", "·"],
        ["e-worker", "·", "1", "·", "1", "1"],
    ]


def test_the_progress_display_draws_each_experiments_last_report_as_a_bar() -> None:
    """On a terminal, below the Jobs: a bar per experiment that reported (issue 52)."""
    report = {"progressPercentage": 50, "estimatedRemainingSeconds": 75}
    report["metrics"] = [{"name": "loss", "value": "0.5"}]
    console = Console(width=100, record=True, color_system=None)
    console.print(progress({"e-worker-0": "running"}, {"e": report, "f": {"metrics": []}}))
    lines = console.export_text().splitlines()
    assert lines[2].split()[0] == "e" and lines[2].endswith("50% · 1m 15s left · loss 0.5")
    assert "━" in lines[2]  # (the bar, half drawn)
    assert lines[3].split() == ["f", "reported"]


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
    monkeypatch.setattr(host, "missing", lambda: lacks)
    assert cli.main(["run", "--local", str(batchjob(tmp_path, 1)), *argv]) == 2
    assert message in capsys.readouterr().err


def test_without_root_a_local_run_needs_user_namespaces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(host, "_user_namespaces", lambda: False)
    assert any("root or unprivileged user namespaces" in lack for lack in host.missing())
    monkeypatch.setattr(host, "_user_namespaces", lambda: True)
    assert not any("root" in lack for lack in host.missing())


@real
def test_probes_at_once_all_see_root() -> None:
    # Each test module (and pytest-xdist worker) asks at import: a shared probe name made
    # one of two simultaneous probes fail, and a whole module skipped.
    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(lambda _: LocalCluster.available(), range(16)))


@real
@pytest.mark.exclusive  # (what /var/tmp and /run/netns hold: no other run beside it)
@pytest.mark.parametrize("fail", [-1, 1])
def test_without_root_the_run_happens_in_a_user_namespace_of_its_own(
    monkeypatch: pytest.MonkeyPatch, fail: int
) -> None:
    # What a user without root gets (`_in_user_namespace`), run here as root with this
    # process taken for another user: the pods' namespaces, mounts and processes inside a
    # user namespace (root there), a function's program mounted at /aichor/function in that
    # namespace's own root, the lines, progress and result passed back; nothing left behind
    # (the pods' network namespaces are in that root's own /run).
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    made: list[str] = []  # (what this run makes in /var/tmp: other tests' runs may be there)
    mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(
        tempfile, "mkdtemp", lambda *a, **kw: made.append(mkdtemp(*a, **kw)) or made[-1]
    )
    lines: list[tuple[str, str]] = []
    progress: list[dict[str, str]] = []
    args = {"count": 1} if fail < 0 else {"count": "not a number"}
    model = experiment_from_function(fn_helpers.report, args=args)

    def run() -> None:
        local.run_experiment(
            model, name="fn", on_line=lambda *line: lines.append(line), on_progress=progress.append
        )

    if fail < 0:
        run()
        assert any(p == "fn-master-0" and line.startswith("RESULT ") for p, line in lines)
        assert progress[-1] == {"fn-master-0": "succeeded"}
    else:
        with pytest.raises(local.LocalRunFailed) as failed:
            run()
        assert failed.value.status == 1 and failed.value.pod == "fn-master-0"
        assert progress[-1] == {"fn-master-0": "failed"}
        assert any("Traceback" in line for line in failed.value.lines), failed.value.lines
    assert not os.path.exists("/aichor")  # made in the namespace's own root only
    assert made and not [path for path in made if os.path.exists(path)]


@real
def test_run_experiment_takes_a_path_returns_the_lines_and_raises_with_the_failing_pods(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Python API as `render` takes it: a manifest's path. Its pods find the programs of
    the environment running aichor-iac without it being activated (a notebook kernel, or
    `.venv/bin/aichor-iac`); a failure raises with the failing pod's last lines."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # (no venv on it)
    path = batchjob(tmp_path, 2)
    data = yaml.safe_load(path.read_text())
    data["spec"]["command"] = "aichor-iac --version && echo index $JOB_COMPLETION_INDEX"
    path.write_text(yaml.safe_dump(data))
    lines = local.run_experiment(path, name="exp", timeout=120)
    assert ("exp-worker-0", "aichor-iac 0.1.0") in lines and ("exp-worker-1", "index 1") in lines
    with pytest.raises(local.LocalRunFailed) as failed:
        local.run_experiment(batchjob(tmp_path, 3, fail=1), name="exp", timeout=120)
    assert (failed.value.status, failed.value.pod, failed.value.lines) == (
        3,
        "exp-worker-1",
        ["index 1"],
    )
    assert str(failed.value).endswith(
        "exp failed (3): exp-worker-1 failed first; its last lines:\nexp-worker-1 index 1"
    )


def test_a_raycluster_never_ends_so_it_is_not_run_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "missing", lambda: [])
    path = Path(__file__).parents[1] / "kuberay" / "ray-cluster.sample.yaml"
    with pytest.raises(local.LocalUnavailable, match="RayCluster runs until destroyed"):
        local.run_experiment(local_manifest(path))


def local_manifest(path: Path) -> Any:
    from aichor_iac import doors

    return doors.load(path)


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
            ]
            # each replica's sidecar heeds the TERM that follows its main container's end
            + ["shards-heavy-0-0/tensorboard-logs aichor: shipped "],
        ),
        (  # examples/train_mpi.py: mpirun over ssh, 2 ranks per worker, gradients all-reduced
            "mpi",
            "mpi4py",
            ["mpi-sgd-launcher-0 epoch 30 loss", "mpi-sgd succeeded"]
            + [
                f"mpi-sgd-launcher-0 rank {r} of 4 on mpi-sgd-worker-{r // 2}: weights match True"
                for r in range(4)
            ],
        ),
        (  # examples/train.py under torchrun: one process per node once the GPUs are gone
            "pytorch-torchrun",
            "torch",
            [f"pytorch-torchrun-worker-{r} rank {r} of 2 done" for r in range(2)],
        ),
        (  # examples/train.py writing TensorBoard's logs and the model on the shared volume
            "pytorch-tensorboard",
            "torch.utils.tensorboard",
            [
                "pytorch-tb-master-0 loss written for TensorBoard in /mnt/shared/tensorboard",
                "pytorch-tb-master-0 model saved in /mnt/shared/output",
                "pytorch-tb-worker-1 rank 2 of 3 done",
            ],
        ),
        (  # examples/train_jax.py: one global array over both processes, XLA's all-reduce
            "jax",
            "jax",
            [
                f"jax-spmd-worker-{i} process {i} of 2 on jax-spmd-worker-{i}: distance 0.00"
                for i in range(2)
            ],
        ),
        pytest.param(  # examples/batch_inference.py: Ray Data over the pool, submitted
            "kuberay",
            "ray.data",
            [  # on the pool's node (its one actor)
                "kuberay-batch-submitter-0 scored 10000 rows on kuberay-batch-cpu-workers-0",
                "kuberay-batch succeeded",
            ],
            marks=ONE_RAY_CLUSTER_AT_A_TIME,
        ),
        (  # examples/train_paddle.py: paddle.distributed.launch from the env, gloo on CPUs
            "paddle",
            "paddle",
            [f"rank {r} of 2 on paddle-collective-worker-" for r in range(2)]
            + ["paddle-collective-worker-0 epoch 30 loss", "paddle-collective succeeded"],
        ),
        (  # a Kubeflow PyTorchJob of examples/train.py: the Training Operator's env
            "pytorchjob",
            "torch",
            ["pytorchjob-ddp-master-0 rank 0 of 2 done", "pytorchjob-ddp succeeded"],
        ),
        (  # a TrainJob of examples/train.py on the torch-distributed runtime: torchrun's env
            "trainjob",
            "torch",
            ["trainjob-ddp-node-0-0 epoch 1 loss", "trainjob-ddp succeeded"],
        ),
        (  # a Katib grid sweep of examples/objective.py, plain Python: its best trial named
            "sweep",
            "json",
            [" lr-momentum-", "Succeeded", "lr-momentum: minimize loss; best trial lr-momentum-"],
        ),
        (  # examples/train_ps.py: ParameterServerStrategy, 2 PS, 2 workers, the evaluator
            "tf",
            "tensorflow",
            [
                "tf-ps-chief-0 chief: 200 steps on 2 workers, 200 updates",
                "tf-ps-evaluator-0 evaluator: checkpoint 200 loss",
                "tf-ps succeeded",
            ],
        ),
    ],
)
def test_the_examples_run_locally_as_a_smoke_test(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    example: str,
    framework: str,
    lines: list[str],
) -> None:
    # `--replicas 2`: a master and two workers, the GPUs masked off; the pods run this
    # environment's Python, which has the framework.
    importable(framework)
    if example == "mpi" and not (shutil.which("mpirun") and Path("/usr/sbin/sshd").exists()):
        pytest.skip("needs Debian's openmpi-bin and openssh-server (`make test` installs them)")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    # (a copy, so that nothing here can write into the checkout)
    shutil.copytree(Path(__file__).parents[2] / "examples", tmp_path / "examples")
    path = tmp_path / "examples" / f"{example}.yaml"
    # (the work cut where its size shows nothing more on two cores: each of Ray Data's 8
    # blocks and 2 actors starts a Python worker, 2 and 1 show the same, and one actor needs
    # one node of the pool, whose second would cost a Ray start, ~20 s of CPU; XGBoost's 100
    # rounds are 100 all-reduces of three processes, 10 are as many as the tracker needs):
    # the command's text replaced, and the replicas a group keeps at most
    cuts = {
        "kuberay": ("batch_inference.py", "batch_inference.py --blocks 2 --actors 1", "1"),
        "xgboost": ("--num-round 100", "--num-round 10", "2"),
    }
    old, new, replicas = cuts.get(example, ("", "", "2"))
    if old:
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))
    # (a bound: a run that can no longer end fails here rather than waiting out its hour)
    run = ["run", "--local", str(path), "--replicas", replicas, "--timeout", "600"]
    assert cli.main(run) == 0
    out = capsys.readouterr().out
    for line in lines:
        assert line in out, out[-3000:]
    if example == "jobset":  # the cap holds: no third Job, no third shard
        assert "shards-shard-2-" not in out and "shard 2" not in out


def importable(module: str) -> None:
    """Skip unless the pods' Python can import `module` (asked in a process of its own:
    frameworks' native libraries do not all load into one process, Paddle's beside Torch's)."""
    if subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode:
        pytest.skip(f"needs {module} (the test extra)")


@real
@ONE_RAY_CLUSTER_AT_A_TIME
def test_the_ray_example_runs_locally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # examples/ray.yaml with `--replicas 1` (the head, a node of each pool, the job; no GPU,
    # so the head offers none), its Tune search cut from 200 trials to 6: each trial costs
    # about 2 s of Tune's own work on these two cores.
    importable("ray.tune")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    examples = Path(__file__).parents[2] / "examples"
    shutil.copy(examples / "tune.py", tmp_path)
    text = (examples / "ray.yaml").read_text()
    (tmp_path / "ray.yaml").write_text(text.replace("--num-samples 200", "--num-samples 6"))
    assert cli.main(["run", "--local", str(tmp_path / "ray.yaml"), "--replicas", "1"]) == 0
    out = capsys.readouterr().out
    for line in (
        "ray-tune-job-0 trials 6 errors 0 on ray-tune-big-cpu-workers-0\n",
        "ray-tune-job-0 best loss ",
        "ray-tune succeeded",
    ):
        assert line in out, out[-3000:]


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        # A Ray head (a gate), and the nodes the submitter's or job's node wait counts: a pool
        # whose pods fail leaves that wait holding (a run once hung on such nodes)
        ("kuberay", ["cpu-workers", "head"]),
        ("ray", ["big-cpu-workers", "head", "small-cpu-workers"]),
        ("mpi", ["worker"]),  # the launcher connects to every worker
        ("pytorch", []),  # every replica must succeed anyway
    ],
)
def test_a_local_run_ends_at_the_failure_of_a_group_others_wait_for(
    example: str, expected: list[str]
) -> None:
    from aichor_iac import doors, planning
    from aichor_iac.local.parts import awaited

    manifest = doors.load(Path(__file__).parents[2] / "examples" / f"{example}.yaml")
    assert awaited(planning.blueprint(manifest).plan) == expected


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


def commandless_pytorchjob(tmp_path: Path) -> Path:
    """A PyTorchJob whose containers run their image's entrypoint (examples/train.py, with
    args), as kubeflow/trainer's mnist examples do: a master and two workers."""
    shutil.copy(Path(__file__).parents[2] / "examples" / "train.py", tmp_path)

    def replica(count: int) -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "registry.example/ddp:1",
            "args": ["--epochs", "3"],
        }
        return {
            "replicas": count,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [container]}},
        }

    data = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ddp"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(2)}},
    }
    path = tmp_path / "ddp.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@real
def test_a_commandless_pytorchjob_runs_its_images_entrypoint_over_gloo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image's entrypoint stands in as `--entrypoint IMAGE=COMMAND` (no image is pulled
    here); each worker is a Job of its own whose RANK is literal, and the three ranks meet
    over gloo from the operator's env alone."""
    importable("torch")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    path = commandless_pytorchjob(tmp_path)
    entrypoint = "registry.example/ddp:1=python3 -u train.py"
    assert cli.main(["run", "--local", str(path), "--entrypoint", entrypoint]) == 0
    out = capsys.readouterr().out
    for rank, pod in enumerate(("ddp-master-0", "ddp-worker-0", "ddp-worker-1")):
        assert f"{pod} rank {rank} of 3 done" in out, out[-3000:]
    assert "ddp succeeded" in out


@real
def test_an_unknown_entrypoint_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = commandless_pytorchjob(tmp_path)
    assert cli.main(["run", "--local", str(path)]) == 2
    err = capsys.readouterr().err
    assert (
        "container pytorch of Job ddp-worker-1 runs the entrypoint of registry.example/ddp:1" in err
    )
    assert "--entrypoint IMAGE=COMMAND" in err
    assert cli.main(["run", "--local", str(path), "--entrypoint", "registry.example/ddp:1="]) == 2
    assert "--entrypoint: registry.example/ddp:1=: give IMAGE=COMMAND" in capsys.readouterr().err


@real
def test_a_secret_beside_the_resource_reaches_its_pods_locally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """render redacts a user's Secret; the local cluster still gives its pods its values."""
    show = "import os; print('token', os.environ['TOKEN'], 'key', os.environ['KEY'])"
    env = [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": "creds", "key": key}}}
        for name, key in (("TOKEN", "token"), ("KEY", "key"))
    ]
    container = {"name": "pytorch", "image": "i", "command": ["python3", "-c", show], "env": env}
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "sec"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {"replicas": 1, "template": {"spec": {"containers": [container]}}}
            }
        },
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds"},
        "stringData": {"token": "plain-value"},
        "data": {"key": "ZW5jb2RlZC12YWx1ZQ=="},  # encoded-value
    }
    path = tmp_path / "sec.yaml"
    path.write_text(yaml.safe_dump_all([job, secret]))
    assert cli.main(["run", "--local", str(path)]) == 0
    assert "sec-worker-0 token plain-value key encoded-value" in capsys.readouterr().out
    assert cli.main(["render", str(path)]) == 0
    assert "plain-value" not in capsys.readouterr().out


@real
def test_a_replica_running_its_images_entrypoint_restarts_as_a_group_told_by_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--entrypoint` says what the image runs, and with it the group restart runs it again:
    the first attempt fails (a file not there yet), the second finds it."""
    flag = tmp_path / "flag"
    check = (
        f"import os, sys; os.path.exists({str(flag)!r}) or (open({str(flag)!r}, 'w'), sys.exit(3))"
    )
    container = {"name": "main", "image": "registry.example/py:1", "args": ["-c", check]}
    path = tmp_path / "js.yaml"
    path.write_text(yaml.safe_dump(restarting_jobset(container)))
    assert cli.main(["run", "--local", str(path)]) == 2  # (refused: what runs is not known)
    assert "say what registry.example/py:1 runs in aichor:entrypoints" in capsys.readouterr().err
    told = f"registry.example/py:1={shutil.which('python3')}"
    assert cli.main(["run", "--local", str(path), "--entrypoint", told]) == 0
    out = capsys.readouterr().out
    assert "restart attempt 1 (1 of 1 counted): js-node-0-0 exited with 3 at attempt 0" in out
    assert "js succeeded" in out
