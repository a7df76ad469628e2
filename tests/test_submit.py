"""Submitting from Python (`aichor_iac.up`, `destroy`, `logs`) through the Automation API,
against a stand-in for the Pulumi CLI that records what it is asked (tests/fake_pulumi): the
stack per experiment, `up`/`destroy` as the CLI runs them, the outputs returned; the inline
program itself registers exactly the objects the Pulumi program does; a missing CLI is a clear
error naming what to install. No real `pulumi up` runs here (no CLI, no cluster)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

import aichor_iac
from aichor_iac import components, doors, engine, submit
from aichor_iac.problems import ManifestError
from aichor_iac.settings import Settings

FAKE = ROOT / "tests" / "fake_pulumi"


@pytest.fixture
def fake_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PATH", f"{FAKE}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PULUMI_CALLS", str(calls))
    monkeypatch.setenv("PULUMI_HOME", str(tmp_path / "home"))
    outputs = {"experiment": "exp", "logs": "kubectl logs -n default -f job/exp-master"}
    monkeypatch.setenv("FAKE_PULUMI_OUTPUTS", json.dumps(outputs))
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    yield calls
    # Each call's workspace (the inline program's project) is removed once used: the
    # Automation API's own would stay under /tmp, one per call
    assert list(temporary.iterdir()) == []


def recorded(calls: Path) -> list[list[str]]:
    return [json.loads(line) for line in calls.read_text().splitlines()]


def test_up_selects_the_stack_runs_up_and_returns_its_outputs(fake_cli: Path) -> None:
    said: list[str] = []
    outputs = aichor_iac.up(ROOT / "examples" / "pytorch.yaml", "exp-1", on_output=said.append)
    assert outputs == {"experiment": "exp", "logs": "kubectl logs -n default -f job/exp-master"}
    calls = recorded(fake_cli)
    assert calls[:2] == [["version"], ["stack", "select", "--stack", "exp-1"]]
    ups = [c for c in calls if c[:1] == ["up"]]
    assert len(ups) == 1
    assert {"--yes", "--skip-preview", "--exec-kind", "auto.inline"} <= set(ups[0])
    assert any(a.startswith("--client=127.0.0.1:") for a in ups[0])  # the inline program
    assert "up: done (fake)" in "".join(said)


def test_destroy_removes_the_stack(fake_cli: Path) -> None:
    aichor_iac.destroy("exp-1", on_output=None)
    calls = recorded(fake_cli)
    assert any(c[:1] == ["destroy"] and "--yes" in c for c in calls)
    assert any(c[:2] == ["stack", "rm"] and "exp-1" in " ".join(c) for c in calls)


def test_a_bad_experiment_fails_before_the_cli_is_asked_anything(fake_cli: Path) -> None:
    # A problem only the plan and the stack's settings show: a schedulingPolicy without a gang.
    cr = yaml.safe_load((ROOT / "tests" / "kubeflow" / "pytorch-cpu-demo-demo.yaml").read_text())
    cr["spec"]["runPolicy"] = {"schedulingPolicy": {"queue": "q"}}
    with pytest.raises(ManifestError, match="set aichor:gangScheduler"):
        aichor_iac.up(doors.validate(cr), "exp-1")
    assert not fake_cli.exists()


def test_a_missing_cli_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(submit.PulumiMissing, match="install the Pulumi CLI"):
        aichor_iac.up(ROOT / "examples" / "pytorch.yaml", "exp-1")
    assert list(tmp_path.iterdir()) == []  # nor its workspace left behind


def test_the_inline_program_registers_what_the_pulumi_program_does() -> None:
    model = doors.load(ROOT / "examples" / "pytorch.yaml")
    settings = Settings()
    inline = engine.run(lambda: components.export("exp", model, settings).outputs, "dev")
    program = engine.expand(model, settings, "dev", "exp")
    assert inline.objects == program.objects and inline.outputs == program.outputs


@pytest.mark.parametrize(
    ("follow", "asked"),
    [(False, "logs -n default job/exp-master"), (True, "logs -n default -f job/exp-master")],
)
def test_logs_runs_the_stacks_logs_command(fake_cli: Path, follow: bool, asked: str) -> None:
    assert aichor_iac.logs("exp-1", follow=follow) == f"kubectl {asked}\n"


def test_until_done_runs_up_again_each_time_the_results_allow_more_trials(fake_cli: Path) -> None:
    # What the cluster holds at each read: the experiments known, whether a trial still runs
    reads = iter(
        [
            (frozenset("ab"), True),  # → up: a and b
            (frozenset("ab"), True),  # nothing new has ended: wait
            (frozenset("abc"), True),  # a has ended, c asked → up again
            (frozenset("abc"), True),
            (frozenset("abc"), False),  # every trial has ended: done
        ]
    )
    waited: list[float] = []
    ups = submit.until_done(
        "sweep", ROOT, lambda: next(reads), poll=5, on_output=None, wait=waited.append
    )
    assert (ups, waited) == (2, [5, 5])
    calls = recorded(fake_cli)
    assert ["stack", "select", "--stack", "sweep"] in calls
    assert len([c for c in calls if c[:1] == ["up"]]) == 2


@pytest.mark.parametrize("until_done", [False, True])
def test_the_up_command_runs_the_stacks_project(
    fake_cli: Path, tmp_path: Path, until_done: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    from fake_kube import Cluster, kubeconfig, serving

    (tmp_path / "Pulumi.yaml").write_text("name: aichor\nruntime: python\n")
    (tmp_path / "stacks").mkdir()
    stack = tmp_path / "stacks" / "Pulumi.t.yaml"
    manifest = ROOT / "examples" / "pytorch.yaml"
    with serving(Cluster(namespace="default", served={"batch/v1/jobs": [], "v1/pods": []})) as url:
        config = tmp_path / "kubeconfig"
        config.write_text(yaml.safe_dump(kubeconfig(url)))
        stack.write_text(yaml.safe_dump({"config": {"aichor:manifest": str(manifest)}}))
        argv = ["up", "--stack-config", str(stack), "--kubeconfig", str(config)]
        assert aichor_iac.cli.main([*argv, *(["--until-done"] if until_done else [])]) == 0
    assert "aichor-iac: t: pulumi up ran 1 time" in capsys.readouterr().out
    assert ["stack", "select", "--stack", "t"] in recorded(fake_cli)


def test_the_up_command_needs_the_stacks_project(tmp_path: Path, capsys) -> None:
    stack = tmp_path / "Pulumi.t.yaml"
    stack.write_text("config: {}\n")
    assert aichor_iac.cli.main(["up", "--stack-config", str(stack)]) == 2
    assert "--stack-config: give the stack's file" in capsys.readouterr().err
