"""A stack's runs read back from its store (issue 67): the pods' parts, as their keepers write
them, grouped into runs as they ran, and made into records (`observe.stored`)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from aichor_iac.experiment.state import State
from aichor_iac.observe import stored
from aichor_iac.pods import keeper

CLOCK = itertools.count(0, 2)


def pod(
    store: Path, experiment: str, key: str, exits: str, ended: bool = True, trial=None, lines=""
) -> None:
    """A pod's part, written by the keeper as it does at the pod's end (its start: now)."""
    folder = store.parent / f"pod-{next(CLOCK)}"
    folder.mkdir()
    (folder / keeper.LOG).write_text(lines)
    (folder / keeper.EXITS).write_text(exits)
    shared = keeper.Shared(str(folder))
    who = {
        "namespace": "team",
        "experiment": experiment,
        "pod": f"{experiment}-0-{key}",
        "entry": True,
        "key": key,
        "job": f"{experiment}-master",
        "container": "main",
        "trial": trial,
    }
    if trial is not None:
        who["objective"] = {"metric": "loss", "direction": "minimize", "formats": [r"(loss)=(\S+)"]}
    history = keeper.History(keeper.Folder(str(store)), shared, who)
    history.send(shared.cursors.setdefault("history", {}), final=ended)
    # (its times: each pod after the one before, a second long)
    path = store / f"{history.place}/pod.json"
    about = json.loads(path.read_text())
    second = next(CLOCK)
    about["started"] = f"2026-12-05T10:{second // 60:02d}:{second % 60:02d}Z"
    if ended:
        about["ended"] = f"2026-12-05T10:{(second + 1) // 60:02d}:{(second + 1) % 60:02d}Z"
    path.write_text(json.dumps(about))


def trial(index: int) -> dict:
    return {"sweep": "s", "index": index, "parameters": {"lr": str(index)}}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


def grouped(store: Path) -> list[list[str]]:
    return [
        [p.about["pod"] for p in run]
        for run in stored.runs(stored.parts(stored.Folder(str(store)), "team"))
    ]


def test_a_pod_its_job_makes_again_is_of_the_same_run(store: Path) -> None:
    pod(store, "exp", "job-a", "1\n")
    pod(store, "exp", "job-a", "0\n")  # (after the first ended: its Job's second pod)
    pod(store, "exp", "job-b", "0\n")  # (a run again: another Job)
    assert grouped(store) == [["exp-0-job-a", "exp-0-job-a"], ["exp-0-job-b"]]


def test_a_sweep_that_resumes_goes_on_and_one_run_again_starts_anew(store: Path) -> None:
    for index in (0, 1):
        pod(store, f"s-{index}", f"k{index}", "0\n", trial=trial(index))
    pod(store, "s-2", "k2", "0\n", trial=trial(2))  # (its later trials, after a destroy)
    pod(store, "s-0", "k3", "0\n", trial=trial(0))  # (the sweep run again)
    assert grouped(store) == [["s-0-0-k0", "s-1-0-k1", "s-2-0-k2"], ["s-0-0-k3"]]


@pytest.mark.parametrize(
    "exits, ended, state",
    [
        ("0\n", True, State.SUCCEEDED),
        ("2\n", True, State.FAILED),
        ("", True, State.INTERRUPTED),
        ("", False, State.RUNNING),
        ("1\n0\n", True, State.SUCCEEDED),
    ],
)
def test_an_experiments_state_is_its_entry_pods_last_exit(store: Path, exits, ended, state) -> None:
    pod(store, "exp", "job", exits, ended)
    ((part,),) = stored.runs(stored.parts(stored.Folder(str(store)), "team"))
    run = stored.experiment_run([part], {}, [])
    assert run.state == state and run.pods[0].restarts == max(0, exits.count("\n") - 1)


def test_a_sweeps_record_has_its_trials_objectives_and_best(store: Path) -> None:
    for index, losses in enumerate([(3, 2), (1, 0.5), (4,)]):
        lines = "".join(f"loss={v}\n" for v in losses)
        pod(store, f"s-{index}", f"k{index}", "0\n", trial=trial(index), lines=lines)
    read = stored.Folder(str(store))
    (run,) = stored.runs(stored.parts(read, "team"))
    said = stored.contents(run, read)
    record = stored.record_of(run, said, "", "dev")
    assert (record.kind, record.state, record.best, record.objective) == (
        "sweep",
        State.SUCCEEDED,
        "s-1",
        "loss",
    )
    assert [t.objective for t in record.trials] == [2.0, 0.5, 4.0]
    assert [p.value for p in record.trials[1].metrics["loss"]] == [1.0, 0.5]
    assert stored.logs_of(run, said)["s-1-0-k1", "main"] == ["loss=1", "loss=0.5"]
    assert json.loads(json.dumps(record.as_json()))["trials"][0]["parameters"] == {"lr": "0"}


def test_a_store_that_cannot_be_read_is_named(tmp_path: Path, monkeypatch) -> None:
    from aichor_iac.problems import ManifestError
    from aichor_iac.settings import Settings

    monkeypatch.setenv("AICHOR_IAC_HISTORY", str(tmp_path / "here"))
    settings = Settings(history="s3://bucket/x", history_endpoint="http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    with pytest.raises(ManifestError) as refused:
        stored.fetch(settings)
    assert "aichor:history" in str(refused.value) and "could not be read" in str(refused.value)
