"""The keeper (issue 67): a pod's output, progress reports and end, written from inside the
pod to a real S3-compatible server and a real MLflow tracking server on 127.0.0.1, as things
happen and at the pod's end; a store that is down costs nothing and loses nothing."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kube import needs
from stores import KEYS, mlflow_server, running, s3_client
from waiting import until

from aichor_iac import pods
from aichor_iac.pods import keeper
from aichor_iac.records import store

pytestmark = [pytest.mark.slow, needs("mlflow")]  # (real MLflow, S3 and Azure servers)
DENY = json.dumps(
    {"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": "*"}]}
)
FORMAT = r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)"  # Katib's default filter


def who(sweep: str, trial: int = 0, entry: bool = True) -> dict:
    return {
        "namespace": "team",
        "experiment": f"{sweep}-{trial}",
        "pod": f"{sweep}-{trial}-master-0-abcde",
        "entry": entry,
        "framework": "pytorch",
        "image": "python:3.11",
        "stack": "dev",
        "mlflowExperiment": f"tests-{sweep}",
        "key": f"uid-{sweep}-{trial}",
        "trial": {"sweep": sweep, "index": trial, "parameters": {"lr": f"0.{trial + 1}"}},
        "metrics": {"names": ["loss"], "formats": [FORMAT]},
    }


def report(step: int) -> str:
    metrics = [{"name": "accuracy", "value": f"0.{step}"}]
    status = {"progressPercentage": step * 10, "metrics": metrics}
    status["lastUpdatedTime"] = f"2026-12-05T10:00:{step:02d}Z"
    return json.dumps({"trainerStatus": status}) + "\n"


def append(folder: Path, name: str, text: str) -> None:
    with (folder / name).open("a") as file:
        file.write(text)


def start(folder: Path, person: dict, history: str = "", mlflow: str = "", **env: str):
    """The keeper as its sidecar runs it: the image's python3, its source given to -c."""
    environ = {
        **os.environ,
        **KEYS,
        "AICHOR_KEEP_DIR": str(folder),
        "AICHOR_KEEP": json.dumps(person),
    }
    environ |= {"AICHOR_HISTORY": history, "AICHOR_MLFLOW": mlflow, **env}
    argv = [sys.executable, "-S", "-c", pods.source("keeper")]
    return subprocess.Popen(argv, env=environ, stderr=subprocess.PIPE, text=True)


def mlflow_client(url: str):
    import mlflow

    return mlflow.MlflowClient(tracking_uri=url)


def runs(url: str, experiment: str) -> list:
    client = mlflow_client(url)
    found = client.get_experiment_by_name(experiment)
    return [] if found is None else client.search_runs([found.experiment_id])


def points(url: str, run_id: str, metric: str) -> list[tuple[int, float]]:
    history = mlflow_client(url).get_metric_history(run_id, metric)
    return sorted((m.step, m.value) for m in history)


def objects(url: str, bucket: str) -> dict[str, bytes]:
    client = s3_client(url)
    listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def test_a_trial_reaches_the_bucket_and_mlflow_as_it_runs_and_at_its_end(
    tmp_path: Path, mlflow_store, s3_store
) -> None:
    s3_client(s3_store.url).create_bucket(Bucket="runs")
    append(tmp_path, keeper.LOG, "epoch 0 loss=1.5\n")
    append(tmp_path, keeper.REPORTS, report(0))
    person = who("kept")
    process = start(
        tmp_path, person, "s3://runs/team-a", mlflow_store.url, AWS_ENDPOINT_URL=s3_store.url
    )

    def trial() -> list:
        return [r for r in runs(mlflow_store.url, "tests-kept") if r.data.tags.get("aichor.trial")]

    until(lambda: trial() and points(mlflow_store.url, trial()[0].info.run_id, "loss"))
    for step in (1, 2):  # (while it runs: each round sends what is new)
        append(tmp_path, keeper.LOG, f"epoch {step} loss={1.5 / (step + 1)}\nnoise\n")
        append(tmp_path, keeper.REPORTS, report(step))
    until(lambda: len(points(mlflow_store.url, trial()[0].info.run_id, "accuracy")) == 3)
    append(tmp_path, keeper.EXITS, "0\n")
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0, process.stderr.read()
    run = trial()[0]
    parent = [r for r in runs(mlflow_store.url, "tests-kept") if r.data.tags.get("aichor.parent")]
    assert [p.info.run_id for p in parent] == [run.data.tags["mlflow.parentRunId"]]
    assert run.data.params == {"lr": "0.1"}
    assert run.info.status == "FINISHED" and parent[0].info.status == "FINISHED"
    assert {k: run.data.tags[k] for k in ("aichor.stack", "aichor.framework", "aichor.image")} == {
        "aichor.stack": "dev",
        "aichor.framework": "pytorch",
        "aichor.image": "python:3.11",
    }
    assert points(mlflow_store.url, run.info.run_id, "loss") == [(0, 1.5), (1, 0.75), (2, 0.5)]
    assert points(mlflow_store.url, run.info.run_id, "accuracy") == [(0, 0.0), (1, 0.1), (2, 0.2)]
    log = mlflow_client(mlflow_store.url).download_artifacts(
        run.info.run_id, f"logs/{person['pod']}.log"
    )
    assert Path(log).read_bytes() == (tmp_path / keeper.LOG).read_bytes()
    kept = objects(s3_store.url, "runs")
    place = next(k for k in kept if k.endswith("/pod.json")).rsplit("/", 1)[0]
    assert place.startswith("team-a/team/kept-0/pods/kept-0-master-0-abcde-")
    chunks = sorted(k for k in kept if "/log/" in k)
    assert b"".join(kept[k] for k in chunks) == (tmp_path / keeper.LOG).read_bytes()
    reports = b"".join(kept[k] for k in sorted(k for k in kept if "/reports/" in k))
    assert len(reports.splitlines()) == 3
    pod = json.loads(kept[f"{place}/pod.json"])
    assert pod["exits"] == [0] and pod["ended"] and pod["dropped"] == 0 and "metrics" not in pod


def test_a_tracking_server_stopped_during_a_run_and_started_again_loses_no_point(
    tmp_path: Path,
) -> None:
    server = mlflow_server(tmp_path)
    (tmp_path / "pod").mkdir()
    folder = tmp_path / "pod"
    with running(server):
        process = start(folder, who("down"), mlflow=server.url)
        append(folder, keeper.LOG, "loss=9\n")
        until(
            lambda: (
                runs(server.url, "tests-down")
                and (folder / keeper.CURSORS).exists()
                and json.loads((folder / keeper.CURSORS).read_text())["mlflow"].get("log")
            )
        )
    for step in range(1, 6):  # (the server is down: training goes on)
        append(folder, keeper.LOG, f"loss={9 - step}\n")
    line = process.stderr.readline()
    assert "mlflow not written" in line and "kept here, tried again" in line
    with running(server):

        def trial() -> list:
            return [r for r in runs(server.url, "tests-down") if r.data.tags.get("aichor.trial")]

        until(lambda: len(points(server.url, trial()[0].info.run_id, "loss")) == 6)
        assert "mlflow written again" in process.stderr.readline()
        append(folder, keeper.EXITS, "1\n")
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        run = mlflow_client(server.url).get_run(trial()[0].info.run_id)
        assert points(server.url, run.info.run_id, "loss") == [(s, 9.0 - s) for s in range(6)]
        assert run.info.status == "FAILED"  # (its last exit: 1)


def test_a_store_already_down_at_the_pods_end_holds_it_up_no_longer(tmp_path: Path) -> None:
    """Both stores down all along: the last round is tried once (the pod's end, a sweep's
    next trial, never wait on a store that is out), having said why once."""
    process = start(
        tmp_path,
        who("nowhere"),
        "s3://none",
        "http://127.0.0.1:9",
        AWS_ENDPOINT_URL="http://127.0.0.1:9",
    )
    until(lambda: (tmp_path / keeper.CURSORS).exists())
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(40) == 0
    assert time.monotonic() - began < 5
    said = process.stderr.read()
    assert said.count("history not written") == 1 and said.count("mlflow not written") == 1


def test_a_store_that_fails_only_at_the_pods_end_is_tried_again(tmp_path: Path, s3_store) -> None:
    """A blip at the end (the bucket answers again a few seconds later): the last round is
    tried again until it is written, within FINAL_SECONDS."""
    s3_client(s3_store.url).create_bucket(Bucket="blip")
    append(tmp_path, keeper.LOG, "first\n")
    process = start(
        tmp_path, who("blip", entry=False), "s3://blip/x", AWS_ENDPOINT_URL=s3_store.url
    )
    until(lambda: any(k.endswith("pod.json") for k in objects(s3_store.url, "blip")))
    s3_client(s3_store.url).put_bucket_policy(Bucket="blip", Policy=DENY)  # (it refuses)
    append(tmp_path, keeper.LOG, "last\n")
    process.send_signal(signal.SIGTERM)
    until(lambda: "history not written" in process.stderr.readline())
    s3_client(s3_store.url).delete_bucket_policy(Bucket="blip")
    assert process.wait(30) == 0
    kept = objects(s3_store.url, "blip")
    log = b"".join(kept[k] for k in sorted(k for k in kept if "/log/" in k))
    assert log == b"first\nlast\n"


def test_a_log_far_behind_a_store_is_cut_and_the_record_says_so(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(keeper, "PENDING", 100)
    folder = tmp_path / "pod"
    folder.mkdir()
    append(folder, keeper.LOG, "x" * 250)
    shared = keeper.Shared(str(folder))
    stores = keeper.keepers(
        shared, who("far", entry=False), {"AICHOR_HISTORY": str(tmp_path / "store")}
    )
    keeper.send_new(shared, stores, {}, final=True)
    pod = json.loads(next((tmp_path / "store").rglob("pod.json")).read_text())
    assert pod["dropped"] == 150 and pod["logBytes"] == 250
    assert [p.name for p in (tmp_path / "store").rglob("log/*")] == ["000000000150.txt"]


@pytest.mark.parametrize(
    "exits, status",
    [("", "KILLED"), ("0\n", "FINISHED"), ("1\n0\n", "FINISHED"), ("0\n137\n", "FAILED")],
)
def test_a_runs_end_is_its_main_containers_last_exit(
    tmp_path: Path, mlflow_store, exits, status
) -> None:
    append(tmp_path, keeper.EXITS, exits)
    person = {**who(f"end{len(exits)}{status}"), "trial": None}
    shared = keeper.Shared(str(tmp_path))
    keeper.send_new(
        shared, keeper.keepers(shared, person, {"AICHOR_MLFLOW": mlflow_store.url}), {}, final=True
    )
    (run,) = runs(mlflow_store.url, person["mlflowExperiment"])
    assert run.info.status == status and "mlflow.parentRunId" not in run.data.tags


def test_trials_that_start_at_once_share_one_parent_run(tmp_path: Path, mlflow_store) -> None:
    processes = []
    for trial in range(4):
        (tmp_path / str(trial)).mkdir()
        processes.append(start(tmp_path / str(trial), who("race", trial), mlflow=mlflow_store.url))
    until(
        lambda: (
            len(
                [r for r in runs(mlflow_store.url, "tests-race") if r.data.tags.get("aichor.trial")]
            )
            == 4
        )
    )
    for process in processes:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    found = runs(mlflow_store.url, "tests-race")
    parents = {r.info.run_id for r in found if r.data.tags.get("aichor.parent")}
    assert len(parents) == 1
    assert {
        r.data.tags["mlflow.parentRunId"] for r in found if r.data.tags.get("aichor.trial")
    } == parents


def test_a_run_stamped_first_but_made_last_is_the_one_every_keeper_keeps(
    mlflow_store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keeper stamps its run (start_time) before it makes it: under load another keeper can
    make its own, and a third adopt that one, before the first-stamped run is made. Each
    looks again once the first it saw is SETTLE old: all keep the first stamped, and the
    run made meanwhile is deleted (it held the four trials of a sweep under two parents once,
    in a fresh-clone CI)."""
    monkeypatch.setattr(keeper, "SETTLE", 5.0)  # (the late run's making, however slow here)
    mlflow = keeper.MLflow(mlflow_store.url, {})
    experiment = mlflow.experiment("tests-stamped-first")
    key = {"aichor.sweep": "s", "aichor.parent": "true"}
    kept: dict[str, str] = {}

    def keeps(who: str) -> None:
        kept[who] = mlflow.run(experiment, "s", {}, key)["run_id"]

    maker = threading.Thread(target=keeps, args=("maker",))
    maker.start()
    until(lambda: mlflow.search(experiment, key))
    made_first = mlflow.search(experiment, key)[0]["info"]
    adopter = threading.Thread(target=keeps, args=("adopter",))
    adopter.start()
    # a keeper that stamped its run a second before the maker's, and makes it only now
    tags = [{"key": k, "value": v} for k, v in key.items()]
    stamped = int(made_first["start_time"]) - 1000
    late = {"experiment_id": experiment, "run_name": "s", "start_time": stamped, "tags": tags}
    first = mlflow.call("POST", "runs/create", late)["run"]["info"]["run_id"]
    maker.join(30)
    adopter.join(30)
    assert kept == {"maker": first, "adopter": first}
    assert [r["info"]["run_id"] for r in mlflow.search(experiment, key)] == [first]


@settings(max_examples=60, deadline=None)
@given(
    key=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40),
    body=st.binary(max_size=64),
    token=st.one_of(st.none(), st.text("abcXYZ019+/=", min_size=1, max_size=20)),
    region=st.sampled_from(["us-east-1", "eu-west-3"]),
)
def test_the_signature_is_the_aws_sdks(key: str, body: bytes, token, region: str) -> None:
    """Held to botocore's S3 SigV4 signer, for any object key (moto does not check them)."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    environ = {**KEYS, "AWS_REGION": region, "AWS_ENDPOINT_URL": "http://minio.example:9000"}
    if token:
        environ["AWS_SESSION_TOKEN"] = token
    bucket = keeper.Bucket("data", "runs/x", environ)
    captured = {}
    original = keeper.request
    try:
        keeper.request = lambda method, url, body, headers, *a: captured.update(
            url=url, headers={k: v for k, v in headers.items() if k != "Content-Type"}
        )  # (the body's type is not signed, as the SDKs sign a PUT)
        bucket.put(key, body)
    finally:
        keeper.request = original
    headers = dict(captured["headers"])
    mine = headers.pop("Authorization")
    request = AWSRequest("PUT", captured["url"], data=body, headers=headers)
    request.context["timestamp"] = headers["x-amz-date"]
    auth = S3SigV4Auth(
        Credentials(KEYS["AWS_ACCESS_KEY_ID"], KEYS["AWS_SECRET_ACCESS_KEY"], token), "s3", region
    )
    signature = auth.signature(
        auth.string_to_sign(request, auth.canonical_request(request)), request
    )
    assert mine.endswith(f"Signature={signature}")
    assert f"Credential=testing/{headers['x-amz-date'][:8]}/{region}/s3/aws4_request" in mine
    assert datetime.datetime.strptime(headers["x-amz-date"], "%Y%m%dT%H%M%SZ")


def test_a_pods_part_reaches_an_azure_container_signed_with_its_key(
    tmp_path: Path, azurite_store, monkeypatch
) -> None:
    """Azure Blob Storage (Azurite, which checks Shared Key): the pod's part written as
    block blobs, and read back by `history` (azure-storage-blob); a wrong key is refused and
    said, and training goes on."""
    from stores import AZURITE_ACCOUNT, AZURITE_KEY, blob_client

    from aichor_iac.observe import stored
    from aichor_iac.settings import Settings

    blob_client(azurite_store.url).create_container("runs")
    azure = {
        "AZURE_STORAGE_ACCOUNT": AZURITE_ACCOUNT,
        "AZURE_STORAGE_BLOB_ENDPOINT": azurite_store.url,
    }
    folder = tmp_path / "pod"
    folder.mkdir()
    append(folder, keeper.LOG, "epoch 0 loss=0.5\nepoch 1 loss=0.25\n")
    append(folder, keeper.REPORTS, report(0))
    append(folder, keeper.EXITS, "0\n")
    person = who("blue")
    process = start(folder, person, "az://runs/team", AZURE_STORAGE_KEY=AZURITE_KEY, **azure)
    until(lambda: (folder / keeper.CURSORS).exists())
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    assert "not written" not in process.stderr.read()
    for key, value in {**azure, "AZURE_STORAGE_KEY": AZURITE_KEY}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AICHOR_IAC_HISTORY", str(tmp_path / "here"))
    settings = Settings(
        namespace="team", history="az://runs/team", history_endpoint=azurite_store.url
    )
    (kept,) = stored.fetch(settings)
    (record,) = store.read_records(kept)
    assert (record.kind, record.state, record.trials[0].name) == ("sweep", "Succeeded", "blue-0")
    assert [p.value for p in record.trials[0].metrics["accuracy"]] == [0.0]
    (pod,) = record.trials[0].pods
    assert store.read_log(kept, pod.name, "")[-1].endswith(" epoch 1 loss=0.25")
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    append(wrong, keeper.LOG, "x\n")
    bad = "A" * 86 + "=="
    process = start(wrong, who("red"), "az://runs/team", AZURE_STORAGE_KEY=bad, **azure)
    line = process.stderr.readline()
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    assert "history not written" in line and "403" in line
