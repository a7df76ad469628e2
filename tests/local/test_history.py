"""Every local run kept (issue 66): a finished run read back from its record by `history`,
`status`, `logs` and `events` once its pods are gone; a run again kept beside the first; a
failed run's first failure; Ctrl-C, which ends a run cleanly and keeps it as Interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kube import NEEDS_CLUSTER

from aichor_iac import cli

pytestmark = NEEDS_CLUSTER


def said(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, str]:
    """What the command printed (out, err); it succeeded."""
    capsys.readouterr()
    assert cli.main(list(argv)) == 0
    return tuple(capsys.readouterr())


def kept(capsys: pytest.CaptureFixture[str], *name: str) -> list[dict]:
    return json.loads(said(capsys, "history", *name, "--output", "json")[0])


@pytest.fixture
def history(tmp_path, monkeypatch):
    """A store of this test's own."""
    monkeypatch.setenv("AICHOR_IAC_HISTORY", str(tmp_path / "history"))
    return tmp_path / "history"


def test_a_finished_sweep_is_read_back_from_its_record(tmp_path, history, capsys):
    said(capsys, "examples", "sweep", "-o", str(tmp_path))
    sweep = str(tmp_path / "sweep.yaml")
    said(capsys, "run", "--local", sweep, "--output", "json")
    (record,) = kept(capsys)
    assert (record["name"], record["kind"], record["state"]) == (
        "lr-momentum",
        "sweep",
        "Succeeded",
    )
    assert record["started"] <= record["ended"] and record["file"] == sweep
    trials = record["trials"]
    assert len(trials) == 6 and {t["state"] for t in trials} == {"Succeeded"}
    for trial in trials:  # (the example prints loss=... each epoch: 3 epochs)
        assert set(trial["parameters"]) == {"lr", "momentum"}
        points = trial["metrics"]["loss"]
        assert [p["step"] for p in points] == [0, 1, 2]
        assert trial["objective"] == min(p["value"] for p in points)  # (minimize: min)
        assert all(p["time"].startswith(record["started"][:10]) for p in points)
    best = min(trials, key=lambda t: t["objective"])
    assert record["best"] == best["name"]

    out, err = said(capsys, "status", "--local", sweep, "--output", "json")
    assert "lr-momentum is not running here: read from its record (Succeeded" in err
    status = json.loads(out)
    rows = status["sweeps"]["lr-momentum"]["trials"]
    assert {r["trial"]: r["objective"] for r in rows} == {t["name"]: t["objective"] for t in trials}
    assert all(e["phases"] == {"Succeeded": 1} for e in status["experiments"].values())
    out, _ = said(capsys, "logs", "--local", sweep)
    assert all(f"{t['name']}-worker-0 epoch=2 loss=" in out for t in trials)
    out, _ = said(capsys, "events", "--local", sweep, "--output", "json")
    assert {"SuccessfulCreate", "Started", "Completed"} <= {e["reason"] for e in json.loads(out)}
    out, _ = said(capsys, "history", "lr-momentum")
    assert f"best trial {best['name']} (*)" in out and "Succeeded" in out


def experiment(tmp_path: Path, command: str, count: int = 1, name: str = "kept") -> str:
    path = tmp_path / f"{name}.yaml"
    worker = {"count": count, "resources": {"cpus": 1, "ramRatio": 1}}
    spec = {"operator": "batchjob", "image": "python:3.11", "command": command}
    manifest = {"kind": "AIchorManifest", "apiVersion": "0.2.2", "name": name}
    path.write_text(yaml.safe_dump({**manifest, "spec": {**spec, "types": {"worker": worker}}}))
    return str(path)


def test_a_run_again_is_kept_beside_the_first(tmp_path, history, capsys):
    path = experiment(tmp_path, "echo once")
    for _ in range(2):
        said(capsys, "run", "--local", path)
    second, first = kept(capsys, "kept")
    assert first["id"] != second["id"] and first["started"] <= second["started"]
    assert [f"kept-{p}" for p in ("worker-0",)] == [p["name"] for p in second["experiment"]["pods"]]
    out, _ = said(capsys, "history", second["id"], "--logs")
    assert out == "kept-worker-0 once\n"  # (that run's lines alone)
    assert [r["id"] for r in kept(capsys)] == [second["id"], first["id"]]  # newest first


def test_a_failed_run_names_the_pod_that_failed_first(tmp_path, history, capsys):
    """Its pod, exit code and last lines (the log's tail the kubelet keeps as the termination
    message, FallbackToLogsOnError: both streams in the order printed), in the record,
    `history` and `status` after the run."""
    failing = (
        'echo "step 1"; echo "slow disk" >&2; echo "step 2"; echo "OSError: disk full" >&2; exit 3'
    )
    waits = 'exec python3 -c "import signal; signal.pause()"'  # (until the run ends)
    command = f'if [ "$JOB_COMPLETION_INDEX" = 1 ]; then {failing}; fi; {waits}'
    path = experiment(tmp_path, command, count=2)
    assert cli.main(["run", "--local", path]) == 3
    (record,) = kept(capsys)
    run = record["experiment"]
    assert record["state"] == run["state"] == "Failed"
    first = run["failed_first"]
    assert (first["pod"], first["exit_code"], first["others"]) == ("kept-worker-1", 3, 0)
    # (stdout and stderr in the order printed, as the kubelet's log keeps them)
    assert first["lines"] == ["step 1", "slow disk", "step 2", "OSError: disk full"]
    (failed,) = [p for p in run["pods"] if p["name"] == "kept-worker-1"]
    assert (failed["phase"], failed["exit_code"], failed["reason"]) == ("Failed", 3, "Error")
    out, _ = said(capsys, "history", "kept")
    assert "Error (failed first)" in out
    assert "failed first: kept-worker-1, exit 3 at " in out and "OSError: disk full" in out
    out, _ = said(capsys, "history", "kept", "--logs")
    assert "kept-worker-1 step 2" in out
    changes = [(c["pod"], c["state"]) for c in run["changes"]]
    assert ("kept-worker-1", "Failed") in changes


# A worker that saves a checkpoint when told TERM, as a trainer stopped at a run's end
CHECKPOINTS = (
    "import signal, sys\n"
    "def saved(*_):\n"
    "    print('checkpoint saved', flush=True)\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, saved)\n"
    "print('training', flush=True)\n"
    "open(sys.argv[1], 'w').close()  # (its peer may fail now)\n"
    "signal.pause()\n"
)


def test_what_a_pod_prints_in_its_grace_period_is_kept(tmp_path, history, capsys):
    """The run's end stops the pods still running, TERM then their grace period: the lines
    they print meanwhile reach the record's logs too, as the kubelet's log keeps them."""
    script = tmp_path / "train.py"
    script.write_text(CHECKPOINTS)
    ready = Path("/var/tmp") / f"aichor-training-{os.getpid()}-{time.monotonic_ns()}"  # (shared)
    failing = f"while [ ! -e {ready} ]; do sleep 0.1; done; rm {ready}; exit 3"
    training = f"exec python3 {script} {ready}"
    command = f'if [ "$JOB_COMPLETION_INDEX" = 1 ]; then {failing}; fi; {training}'
    path = experiment(tmp_path, command, count=2)
    assert cli.main(["run", "--local", path]) == 3
    out, _ = said(capsys, "history", "kept", "--logs")
    assert "kept-worker-0 training" in out and "kept-worker-0 checkpoint saved" in out, out


def interruptible(command: list[str]) -> subprocess.Popen:
    """The command started as a terminal starts it, Ctrl-C's SIGINT at its default: a suite
    started in the background of a script (`cmd &`) ignores SIGINT, which its children
    inherit, and Python leaves an ignored SIGINT ignored (no KeyboardInterrupt)."""
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_ctrl_c_ends_a_run_cleanly_and_keeps_it_interrupted(tmp_path, history, capsys):
    marker = f"aichor-ctrl-c-{os.getpid()}"
    path = experiment(tmp_path, f"echo started; sleep 120 # {marker}", name="ctrlc")
    # (-X faulthandler: a run that outlasts its bound is made to say where each thread waits)
    command = [sys.executable, "-X", "faulthandler", "-m", "aichor_iac.cli", "run", "--local", path]
    run = interruptible(command)
    for line in run.stdout:
        if line.endswith("started\n"):
            break
    run.send_signal(signal.SIGINT)
    try:
        out, err = run.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        run.send_signal(signal.SIGABRT)
        out, err = run.communicate(timeout=30)
        pytest.fail(f"Ctrl-C did not end the run within 60 s; its threads:\n{err[-8000:]}")
    assert run.returncode == 130
    assert "Traceback" not in err and "aichor-iac: interrupted; kept: aichor-iac history" in err
    assert "aichor-iac: ctrlc interrupted" in out  # (what it had done)
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1
    (record,) = kept(capsys)
    assert record["state"] == record["experiment"]["state"] == "Interrupted"
    assert record["ended"] is not None


def test_a_file_never_run_is_refused_naming_it_and_its_sweep(tmp_path, history, capsys):
    said(capsys, "examples", "sweep", "-o", str(tmp_path))
    sweep = str(tmp_path / "sweep.yaml")
    capsys.readouterr()
    assert cli.main(["status", "--local", sweep]) == 2
    err = capsys.readouterr().err
    assert (
        f"no local run of sweep lr-momentum ({sweep}) is running here, and none is recorded" in err
    )
    assert "lr-momentum-" not in err.replace("lr-momentum (", "")  # (no trial's name)
    history.mkdir(parents=True, exist_ok=True)
    assert cli.main(["history", "lr-momentum"]) == 2
    assert "no run of lr-momentum is kept" in capsys.readouterr().err
    out, _ = said(capsys, "history")
    assert "no run is kept" in out


def test_a_running_run_is_kept_as_it_goes(tmp_path, history, capsys):
    """The record says Running while the run goes (written every few seconds), before the
    run's end writes it whole."""
    path = experiment(tmp_path, "echo started; sleep 20", name="going")
    run = interruptible([sys.executable, "-m", "aichor_iac.cli", "run", "--local", path])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = kept(capsys)
            if found and found[0]["state"] == "Running":
                break
            time.sleep(0.5)
        assert found[0]["state"] == "Running" and found[0]["ended"] is None
        assert found[0]["experiment"]["pods"][0]["phase"] == "Running"
    finally:
        run.send_signal(signal.SIGINT)
        run.communicate(timeout=60)


REGROUP = """\
echo "attempt $AICHOR_RESTART_ATTEMPT"
if [ "$HOSTNAME" = regroup-worker-0 ]; then
  python3 -c "import os, socket, time; v = os.environ['JAX_COORDINATOR_ADDRESS']; \\
s = socket.create_server(('', int(v.rsplit(':', 1)[-1]))); time.sleep(600)" &
  sleep 3; echo trained; exit 0
fi
if [ "$HOSTNAME" = regroup-worker-1 ] && [ "$AICHOR_RESTART_ATTEMPT" = 0 ]; then exit 3; fi
exec sleep 600
"""


def test_a_group_restart_is_kept_with_its_reason(tmp_path, history, capsys):
    """Each restart of a group is in the record: when, which attempt, and the failure its
    lead judged."""
    worker = {"count": 2, "resources": {"cpus": 1, "ramRatio": 1}}
    spec = {"operator": "jax", "image": "python:3.12", "command": REGROUP}
    manifest = {"kind": "AIchorManifest", "apiVersion": "0.2.2", "name": "regroup"}
    path = tmp_path / "regroup.yaml"
    path.write_text(yaml.safe_dump({**manifest, "spec": {**spec, "types": {"Worker": worker}}}))
    stack = tmp_path / "Pulumi.local.yaml"
    stack.write_text(yaml.safe_dump({"config": {"aichor:maxRestarts": 1}}))
    said(capsys, "run", "--local", str(path), "--stack-config", str(stack))
    (record,) = kept(capsys, "regroup")
    run = record["experiment"]
    assert record["state"] == "Succeeded" and run["restart_attempt"] == 1
    (restart,) = run["restarts"]
    assert restart["attempt"] == 1 and restart["time"] >= record["started"]
    assert restart["reason"] == "regroup-worker-1 exited with 3 at attempt 0"
    out, _ = said(capsys, "history", "regroup")
    assert "restart 1: regroup-worker-1 exited with 3 at attempt 0" in out
