"""The record of a run (issue 66): its typed model read back as written, refused when another
version wrote it; the store's folders (one per run, newest first, never mixed), its logs kept
whole or as their head and tail; the Kubernetes reading of a kept run."""

from __future__ import annotations

import gzip
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aichor_iac.records import store
from aichor_iac.records.model import (
    SCHEMA,
    Change,
    ExperimentRun,
    Failure,
    PodRun,
    Point,
    Record,
    State,
    UnknownSchema,
    record_of,
)
from aichor_iac.records.reader import Recorded

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
numbers = st.floats(allow_nan=False, allow_infinity=False)
points = st.builds(Point, st.integers(0, 10**6), st.none() | texts, numbers)
runs = st.builds(
    ExperimentRun,
    name=texts,
    framework=texts,
    state=st.sampled_from(State),
    parameters=st.dictionaries(texts, texts, max_size=3),
    objective=st.none() | numbers,
    metrics=st.dictionaries(texts, st.lists(points, max_size=4).map(tuple), max_size=3),
    pods=st.lists(
        st.builds(PodRun, texts, texts, texts, st.none() | st.integers(-255, 255)), max_size=3
    ).map(tuple),
    changes=st.lists(st.builds(Change, texts, texts, texts), max_size=3).map(tuple),
    failed_first=st.none()
    | st.builds(
        Failure,
        texts,
        st.none() | st.integers(-255, 255),
        st.none() | texts,
        st.lists(texts, max_size=3).map(tuple),
        st.integers(0, 9),
    ),
)
records = st.builds(
    Record,
    id=texts,
    name=texts,
    kind=st.sampled_from(["experiment", "sweep"]),
    state=st.sampled_from(State),
    started=texts,
    experiment=st.none() | runs,
    trials=st.lists(runs, max_size=3).map(tuple),
)


@given(records)
@settings(max_examples=200)
def test_a_record_reads_back_as_written(record):
    assert record_of(json.loads(json.dumps(record.as_json()))) == record


def test_a_record_kept_before_its_failure_was_typed_reads_the_pod_s_name():
    run = ExperimentRun("exp", "pytorch", State.FAILED).__dict__ | {"failed_first": "exp-worker-1"}
    document = Record("r", "n", "experiment", State.FAILED, "t").as_json() | {"experiment": run}
    document["experiment"]["state"] = "Failed"
    first = record_of(json.loads(json.dumps(document, default=list))).experiment.failed_first
    assert first == Failure("exp-worker-1") and first.said() == "failed first: exp-worker-1"


def test_a_record_of_another_version_is_refused_by_name():
    document = Record("r", "n", "experiment", State.RUNNING, "t").as_json()
    assert document["schema"] == SCHEMA
    with pytest.raises(UnknownSchema, match=f"schema 99, not {SCHEMA}"):
        record_of({**document, "schema": 99})


@pytest.mark.parametrize(
    ("state", "ended"),
    [
        (State.WAITING, False),
        (State.PENDING, False),
        (State.RUNNING, False),
        (State.SUCCEEDED, True),
        (State.FAILED, True),
        (State.EARLY_STOPPED, True),
        (State.METRICS_UNAVAILABLE, True),
        (State.INTERRUPTED, True),
    ],
)
def test_which_states_have_ended(state, ended):
    assert state.ended is ended


def test_each_run_has_a_folder_of_its_own_newest_first(tmp_path, monkeypatch):
    monkeypatch.setenv("AICHOR_IAC_HISTORY", str(tmp_path))
    now = time.time()
    first = store.new_folder("exp", now - 60)
    again = [store.new_folder("exp", now) for _ in range(3)]  # (at once: never the same)
    assert len({first, *again}) == 4
    assert store.folders()[-1] == first
    for i, folder in enumerate([first, *again]):
        store.write_records(
            folder, [Record(folder.name, "exp", "experiment", State.RUNNING, str(i))]
        )
    newest = store.latest("exp")
    assert newest is not None and newest[0] in again
    assert store.latest(first.name)[0] == first  # (by the run's id)
    assert store.latest("other") is None


def test_the_data_directory_is_the_users(monkeypatch, tmp_path):
    monkeypatch.delenv("AICHOR_IAC_HISTORY")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert store.root() == tmp_path / "aichor-iac" / "runs"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert store.root() == tmp_path / ".local" / "share" / "aichor-iac" / "runs"


def test_a_folder_without_records_or_of_another_version_has_none(tmp_path):
    assert store.read_records(tmp_path) == []
    (tmp_path / store.RECORDS).write_text(json.dumps([{"schema": 0}]))
    assert store.read_records(tmp_path) == []
    (tmp_path / store.RECORDS).write_text("[{")  # (a file cut short)
    assert store.read_records(tmp_path) == []


lines = st.lists(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=200))


@given(lines, st.integers(64, 4096))
@settings(max_examples=100, deadline=None)
def test_a_log_is_kept_whole_or_as_its_head_and_tail(tmp_path_factory, given_lines, part):
    folder = tmp_path_factory.mktemp("run")
    text = "".join(f"2026-01-01T00:00:{i % 60:02d}Z {line}\n" for i, line in enumerate(given_lines))
    source = folder / "c.log"
    source.write_text(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store, "LOG_PART", part)
        store.write_log(folder, "pod", "c", source)
    kept = store.read_log(folder, "pod", "c")
    if len(text.encode()) <= 2 * part:
        assert kept == text.splitlines()
        return
    whole = text.splitlines()
    cut = [i for i, line in enumerate(kept) if "bytes cut here" in line]
    assert len(cut) == 1  # one line says where and how much
    head, tail = kept[: cut[0]], kept[cut[0] + 1 :]
    assert head == whole[: len(head)] and tail == whole[len(whole) - len(tail) :]
    assert len("\n".join(head).encode()) <= part and len("\n".join(tail).encode()) <= part
    said = int(kept[cut[0]].split("aichor-iac: ")[1].split(" ")[0])
    assert said == len(text.encode()) - sum(len(line.encode()) + 1 for line in head + tail)


def test_a_kept_run_is_read_as_a_cluster_is(tmp_path):
    mine = {"app.kubernetes.io/instance": "exp"}
    pod = {
        "metadata": {"name": "exp-worker-0", "labels": {**mine, "job-name": "exp-worker"}},
        "spec": {"containers": [{"name": "main"}], "initContainers": [{"name": "progress"}]},
    }
    other = {"metadata": {"name": "b-0", "labels": {"app.kubernetes.io/instance": "b"}}}
    job = {"metadata": {"name": "exp-worker", "labels": mine}}
    events = [
        {"involvedObject": {"name": n}, "lastTimestamp": t, "reason": r}
        for n, t, r in [
            ("exp-worker", "2", "Completed"),
            ("exp-worker-0", "1", "Started"),
            ("b-0", "0", "x"),
        ]
    ]
    store.write_cluster(tmp_path, {"jobs": [job], "pods": [pod, other], "events": events})
    for container, text in (("main", "a\nb\nc\n"), ("progress", "p\n")):
        source = tmp_path / f"{container}.log"
        source.write_text(
            "".join(f"2026-01-01T00:00:0{i}Z {t}\n" for i, t in enumerate(text.split()))
        )
        store.write_log(tmp_path, "exp-worker-0", container, source)
    store.add_states(tmp_path, [("t1", "exp-worker-0", "Running"), ("t0", "b-0", "Pending")])
    reader = Recorded(tmp_path, "exp")
    assert [p["metadata"]["name"] for p in reader.pods()] == ["exp-worker-0"]
    assert reader.jobs() == [job]
    assert [e["reason"] for e in reader.events()] == ["Started", "Completed"]
    assert [t for _, t in reader.lines("exp-worker-0")] == ["a", "b", "c"]
    assert list(reader.lines("exp-worker-0", tail=1)) == [("2026-01-01T00:00:02Z", "c")]
    assert [t for _, t in reader.lines("exp-worker-0", container="progress")] == ["p"]
    assert list(reader.lines("b-0")) == []  # (another experiment's)
    assert reader.changes() == (Change("t1", "exp-worker-0", "Running"),)
    assert gzip.decompress((tmp_path / store.CLUSTER).read_bytes())  # (kept compressed)
