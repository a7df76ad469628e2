"""The progress receiver (aichor_iac/pods/receiver.py): Kubeflow Trainer's progress protocol as
Trainer's own clients speak it (kubeflow SDK 0.5's `update_trainjob_status`, the raw HTTP of
Trainer's user guide), over TLS with a CA made for it; refusals as Trainer's status schema
refuses, and the program as a cluster runs it (standard library only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import requests

from aichor_iac.k8s import progress
from aichor_iac.local import reports
from aichor_iac.pods import receiver

HOST = "localhost"
PATH = progress.status_path("team", "exp")
NOW = "2026-11-28T15:00:00.123456+00:00"


def status(**fields: object) -> bytes:
    return json.dumps({"trainerStatus": {"lastUpdatedTime": NOW, **fields}}).encode()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (status(progressPercentage=101), "trainerStatus.progressPercentage"),
        (status(progressPercentage=-1), "trainerStatus.progressPercentage"),
        (status(progressPercentage=True), "trainerStatus.progressPercentage"),
        (status(progressPercentage=4.5), "trainerStatus.progressPercentage"),
        (status(estimatedRemainingSeconds=2**31), "trainerStatus.estimatedRemainingSeconds"),
        (status(metrics={"loss": "1"}), "trainerStatus.metrics"),
        (status(metrics=[{"name": "loss"}]), "trainerStatus.metrics[0].value"),
        (status(metrics=[{"name": "loss", "value": 0.5}]), "trainerStatus.metrics[0].value"),
        (status(metrics=[{"name": "", "value": "1"}]), "trainerStatus.metrics[0].name"),
        (status(metrics=[{"name": "x" * 65, "value": "1"}]), "trainerStatus.metrics[0].name"),
        (
            status(metrics=[{"name": f"m{i}", "value": "1"} for i in range(257)]),
            "trainerStatus.metrics",
        ),
        (json.dumps({"trainerStatus": {"progressPercentage": 5}}).encode(), "lastUpdatedTime"),
        (status(lastUpdatedTime="yesterday"), "trainerStatus.lastUpdatedTime"),
        (b"{not json", "not JSON"),
        (b"[1, 2]", "should be an object"),
        (json.dumps({"trainerStatus": "50%"}).encode(), "trainerStatus: should be an object"),
    ],
)
def test_a_bad_field_is_refused_with_its_name(body, field):
    with pytest.raises(receiver.Refused) as refused:
        receiver.parsed(body)
    assert (refused.value.code, refused.value.status()["reason"]) == (400, "BadRequest")
    assert field in refused.value.message


def test_a_good_payload_is_kept_as_trainer_keeps_it_unknown_fields_dropped():
    metrics = [{"name": f"m{i}", "value": "0.5"} for i in range(256)]
    body = status(progressPercentage=100, estimatedRemainingSeconds=0, metrics=metrics, extra=1)
    assert receiver.parsed(body) == {
        "trainerStatus": {
            "progressPercentage": 100,
            "estimatedRemainingSeconds": 0,
            "metrics": metrics,
            "lastUpdatedTime": NOW,
        }
    }
    assert receiver.parsed(b'{"trainerStatus": null}') == {}
    assert receiver.parsed(status(lastUpdatedTime="2026-11-28T15:00:00Z"))


@pytest.fixture
def served(tmp_path):
    """A receiver of this process at localhost, its credentials, and the reports it was given."""
    found = reports.credentials(tmp_path / "tls", [HOST])
    given: list[dict] = []
    running = receiver.Receiver(("127.0.0.1", 0), PATH, found.token.read_text(), given.append)
    threading.Thread(
        target=receiver.serve, args=(running, str(found.cert), str(found.key)), daemon=True
    ).start()
    url = f"https://{HOST}:{running.server_address[1]}{PATH}"
    yield url, found, given, running
    running.shutdown()


def test_the_sdks_update_trainjob_status_reaches_the_receiver(served, monkeypatch):
    url, found, given, running = served
    monkeypatch.setenv(progress.ENV_URL, url)
    monkeypatch.setenv(progress.ENV_CA, str(found.ca))
    monkeypatch.setenv(progress.ENV_TOKEN, str(found.token))
    from kubeflow.trainer import update_trainjob_status
    from kubeflow.trainer.backends.kubernetes import utils

    monkeypatch.setattr(utils, "_last_update_time", 0.0)  # (its 5 s throttle, between tests)
    assert update_trainjob_status(progress_percent=50, metrics={"loss": 0.5}) is True
    (report,) = given
    assert report["trainerStatus"]["progressPercentage"] == 50
    assert report["trainerStatus"]["metrics"] == [{"name": "loss", "value": "0.5"}]
    assert running.latest == report


def guide_example(url: str, ca: Path, token: Path) -> subprocess.CompletedProcess:
    """Trainer's user guide's raw HTTP client (Option C), as it prints it, with the variables
    a training container finds; `raise_for_status` makes a refusal its printed failure."""
    program = """
import os
from datetime import datetime, timezone
import requests
import time

server_url = os.environ.get("KUBEFLOW_TRAINER_SERVER_URL")
ca_cert_path = os.environ.get("KUBEFLOW_TRAINER_SERVER_CA_CERT")
token_path = os.environ.get("KUBEFLOW_TRAINER_SERVER_TOKEN")

# Only attempt reporting when running inside a Kubeflow TrainJob
if server_url and ca_cert_path and token_path:
    # Read the token. In production, re-read this file periodically as the JWT token rotates
    with open(token_path, "r") as f:
        token = f.read().strip()

    headers = {"Authorization": f"Bearer {token}"}
    payload = {
        "trainerStatus": {
            "progressPercentage": 45,  # replace with actual value (0–100)
            "estimatedRemainingSeconds": 120,  # replace with actual seconds remaining
            "metrics": [
                {"name": "loss", "value": "0.15"},
                {"name": "accuracy", "value": "0.92"},
            ],
            "lastUpdatedTime": datetime.now(timezone.utc).isoformat(),
        }
    }

    try:
        response = requests.post(
            server_url,
            headers=headers,
            json=payload,
            verify=ca_cert_path,
            timeout=5,
        )
        response.raise_for_status()
    except Exception as e:
        # Log but never raise reporting must not interrupt training
        print(f"Failed to update TrainJob progress: {e}")
"""
    env = {
        **os.environ,
        progress.ENV_URL: url,
        progress.ENV_CA: str(ca),
        progress.ENV_TOKEN: str(token),
    }
    return subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True
    )


def test_the_guides_raw_http_example_gets_200_and_with_a_wrong_token_401(served, tmp_path):
    url, found, given, _ = served
    assert guide_example(url, found.ca, found.token).stdout == ""
    assert given[-1]["trainerStatus"]["metrics"][1] == {"name": "accuracy", "value": "0.92"}
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-token")
    printed = guide_example(url, found.ca, wrong).stdout
    assert printed.startswith("Failed to update TrainJob progress: 401 Client Error")
    assert len(given) == 1


def test_refusals_are_statuses_and_keep_nothing(served):
    url, found, given, _ = served
    token = found.token.read_text()
    session = requests.Session()

    def post(body: bytes, where: str = url, auth: str | None = f"Bearer {token}"):
        headers = {"Content-Type": "application/json"} | ({"Authorization": auth} if auth else {})
        answer = session.post(where, data=body, headers=headers, verify=str(found.ca), timeout=5)
        return answer.status_code, answer.json()

    assert post(status())[0] == 200
    code, answer = post(status(), auth=None)
    assert (code, answer["kind"], answer["reason"], answer["code"]) == (
        401,
        "Status",
        "Unauthorized",
        401,
    )
    assert post(b" " * (receiver.MAX_BODY + 1))[0] == 413
    assert post(status(progressPercentage=200)) == (
        400,
        receiver.Refused(400, "BadRequest", "").status()
        | {"message": "trainerStatus.progressPercentage: should be between 0 and 100, not 200"},
    )
    assert post(status(), where=url.replace("/exp/", "/other/"))[0] == 404
    assert len(given) == 1  # (the first, good one)
    with pytest.raises(requests.exceptions.SSLError):  # (a CA that did not sign it)
        requests.post(url, data=status(), timeout=5)


def test_the_program_serves_from_the_environment_and_writes_each_report_whole(tmp_path):
    """As a cluster runs it: `python3 receiver.py`, its settings in the environment; each
    report a line on its output, and the state file."""
    found = reports.credentials(tmp_path / "tls", [HOST])
    state = tmp_path / "latest.json"
    env = {
        **os.environ,
        "AICHOR_PROGRESS_PORT": "0",
        "AICHOR_PROGRESS_CERT": str(found.cert),
        "AICHOR_PROGRESS_KEY": str(found.key),
        "AICHOR_PROGRESS_TOKEN": str(found.token),
        "AICHOR_PROGRESS_PATH": PATH,
        "AICHOR_PROGRESS_STATE": str(state),
    }
    process = subprocess.Popen(
        [sys.executable, "-u", receiver.__file__],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = process.stdout.readline()
        port = int(first.rsplit(" ", 1)[1])
        with pytest.raises(requests.exceptions.SSLError):  # (a client without the CA)
            requests.get(f"https://{HOST}:{port}{PATH}", timeout=5)
        when = datetime.now(timezone.utc).isoformat()
        payload = {"trainerStatus": {"progressPercentage": 7, "lastUpdatedTime": when}}
        answer = requests.post(
            f"https://{HOST}:{port}{PATH}",
            json=payload,
            headers={"Authorization": f"Bearer {found.token.read_text()}"},
            verify=str(found.ca),
            timeout=5,
        )
        assert (answer.status_code, answer.json()) == (200, payload)
        assert (
            process.stdout.readline() == receiver.LINE + json.dumps(payload, sort_keys=True) + "\n"
        )
        deadline = time.monotonic() + 5
        while not state.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert json.loads(state.read_text()) == payload
    finally:
        process.terminate()
        process.wait(10)
    # the refused handshake: one line, no traceback
    errors = process.stderr.read()
    assert "Traceback" not in errors and errors.startswith("aichor: progress receiver: 127.0.0.1:")


def test_a_get_with_the_token_answers_the_first_reports_since_one(served):
    url, found, _, _ = served
    session, token = requests.Session(), found.token.read_text()
    auth = {"Authorization": f"Bearer {token}"}

    def get(query: str = "", headers: dict | None = None) -> tuple[int, dict]:
        answer = session.get(url + query, headers=headers, verify=str(found.ca), timeout=5)
        return answer.status_code, answer.json()

    assert get(headers=auth) == (200, {"items": []})
    for loss in ("0.9", "0.5"):
        body = status(metrics=[{"name": "loss", "value": loss}])
        assert session.post(url, data=body, headers=auth, verify=str(found.ca)).status_code == 200
    code, answer = get(headers=auth)
    losses = [item["trainerStatus"]["metrics"][0]["value"] for item in answer["items"]]
    assert (code, losses) == (200, ["0.9", "0.5"])
    assert [
        i["trainerStatus"]["metrics"][0]["value"] for i in get("?since=1", auth)[1]["items"]
    ] == ["0.5"]
    assert get("?since=2", auth) == (200, {"items": []})
    assert get()[0] == 401  # (the reports are the experiment's)
    for query in ("?since=-1", "?since=x", "?from=1", "?since=²"):
        assert get(query, auth)[0] == 400, query
