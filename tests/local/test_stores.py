"""Runs kept from inside the pods (issue 67), end to end: the README's sweep run locally with
`aichor:history` on a real S3-compatible server and `aichor:mlflow` on a real MLflow tracking
server, both on this machine's 127.0.0.1, which the pods reach though each has a network of
its own; as root and in a user namespace; and the render of a cluster experiment, which holds
no credential."""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from pathlib import Path

import pytest
import yaml
from kube import NEEDS_CLUSTER, needs
from stores import KEYS, s3_client

from aichor_iac import cli

pytestmark = needs("mlflow")
real = NEEDS_CLUSTER


def stack(folder: Path, **config: str) -> str:
    path = folder / "Pulumi.dev.yaml"
    keys = {k if ":" in k else f"aichor:{k}": v for k, v in config.items()}
    path.write_text(yaml.safe_dump({"config": keys}))
    return str(path)


def ran(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert cli.main(list(argv)) == 0, capsys.readouterr()
    return capsys.readouterr().out


def a_sweep_kept(tmp_path, capsys, monkeypatch, mlflow_store, s3_store) -> tuple[str, str]:
    """The README's sweep run with both stores; its MLflow experiment and its bucket."""
    experiment, bucket = f"sweep-{uuid.uuid4().hex[:6]}", f"runs-{uuid.uuid4().hex[:6]}"
    s3_client(s3_store.url).create_bucket(Bucket=bucket)
    for key, value in KEYS.items():  # (a local run: the Secret's keys from the shell's env)
        monkeypatch.setenv(key, value)
    ran(capsys, "examples", "sweep", "-o", str(tmp_path))
    config = stack(
        tmp_path,
        history=f"s3://{bucket}/kept",
        historySecret="store-keys",
        historyEndpoint=s3_store.url,
        mlflow=mlflow_store.url,
        mlflowExperiment=experiment,
    )
    ran(capsys, "run", "--local", str(tmp_path / "sweep.yaml"), "--stack-config", config)
    return experiment, bucket


def mlflow_runs(url: str, experiment: str) -> list:
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=url)
    return client, client.search_runs([client.get_experiment_by_name(experiment).experiment_id])


def assert_kept(mlflow_url: str, s3_url: str, experiment: str, bucket: str) -> None:
    """A parent run with its six trials nested, their parameters and every printed value of
    the objective by step, their logs; the bucket holds each trial's pod, log and end."""
    client, runs = mlflow_runs(mlflow_url, experiment)
    (parent,) = [r for r in runs if r.data.tags.get("aichor.parent")]
    trials = [r for r in runs if r.data.tags.get("aichor.trial")]
    assert len(trials) == 6 and parent.data.tags["aichor.sweep"] == "lr-momentum"
    assert {r.data.tags["mlflow.parentRunId"] for r in trials} == {parent.info.run_id}
    assert {r.info.status for r in [parent, *trials]} == {"FINISHED"}
    assert {r.data.tags["aichor.stack"] for r in [parent, *trials]} == {"dev"}
    values = set()
    for run in trials:
        assert set(run.data.params) == {"lr", "momentum"}
        values.add((run.data.params["lr"], run.data.params["momentum"]))
        loss = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss"))
        assert [step for step, _ in loss] == [0, 1, 2]  # (three epochs, each printed)
        assert loss[0][1] == pytest.approx(loss[1][1] * 2, rel=1e-3)  # (the example's curve)
        (log,) = client.list_artifacts(run.info.run_id, "logs")
        text = Path(client.download_artifacts(run.info.run_id, log.path)).read_text()
        assert "epoch=2 loss=" in text
    assert len(values) == 6  # (each trial its own)
    s3 = s3_client(s3_url)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    pods = [k for k in keys if k.endswith("/pod.json")]
    assert len(pods) == 6 and all(k.startswith("kept/default/lr-momentum-") for k in pods)
    for key in pods:
        pod = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        assert pod["exits"] == [0] and pod["ended"] and pod["trial"]["sweep"] == "lr-momentum"
        chunks = sorted(k for k in keys if k.startswith(key.rsplit("/", 1)[0] + "/log/"))
        log = b"".join(s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in chunks)
        assert b"epoch=2 loss=" in log


@real
def test_a_local_sweep_is_kept_in_mlflow_and_the_bucket_from_inside_its_pods(
    tmp_path, capsys, monkeypatch, mlflow_store, s3_store
) -> None:
    experiment, bucket = a_sweep_kept(tmp_path, capsys, monkeypatch, mlflow_store, s3_store)
    assert_kept(mlflow_store.url, s3_store.url, experiment, bucket)


@real
@pytest.mark.exclusive  # (what /var/tmp and /run/netns hold: no other run beside it)
def test_without_root_the_pods_reach_the_stores_too(
    tmp_path, capsys, monkeypatch, mlflow_store, s3_store
) -> None:
    """In a user namespace (a network of its own): the stores reached through its parent."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    made: list[str] = []
    mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(
        tempfile, "mkdtemp", lambda *a, **kw: made.append(mkdtemp(*a, **kw)) or made[-1]
    )
    experiment, bucket = a_sweep_kept(tmp_path, capsys, monkeypatch, mlflow_store, s3_store)
    assert_kept(mlflow_store.url, s3_store.url, experiment, bucket)
    ours = [path for path in made if "/aichor-" in path]  # (MLflow's client makes its own)
    assert ours and not [path for path in ours if os.path.exists(path)]


def test_the_render_of_a_cluster_experiment_holds_no_credential(
    tmp_path, capsys, monkeypatch
) -> None:
    """Keys in the shell's environment (a local run would use them) never reach a render:
    the keeper reads them from the Secrets the stack names, by reference."""
    for key, value in {**KEYS, "MLFLOW_TRACKING_PASSWORD": "mlflow-pass-123"}.items():
        monkeypatch.setenv(key, value)
    config = stack(
        tmp_path,
        history="gs://bucket/runs",
        historySecret="gcs-hmac",
        mlflow="https://mlflow.example.com",
        mlflowSecret="mlflow-login",
        networkPolicy="false",
    )
    out = ran(capsys, "render", "examples/pytorch.yaml", "--stack-config", config)
    for value in ("testing-secret", "mlflow-pass-123"):
        assert value not in out
    pods = [
        d["spec"]["template"]["spec"]
        for d in yaml.safe_load_all(out)
        if d and d.get("kind") == "Job"
    ]
    assert pods
    for pod in pods:
        (keeper,) = [c for c in pod["initContainers"] if c["name"] == "aichor-keeper"]
        assert pod["initContainers"][0] is keeper  # (first started: last stopped)
        refs = {
            e["name"]: e["valueFrom"]["secretKeyRef"]
            for e in keeper["env"]
            if "secretKeyRef" in e.get("valueFrom", {})
        }
        assert refs["AWS_SECRET_ACCESS_KEY"] == {
            "name": "gcs-hmac",
            "key": "AWS_SECRET_ACCESS_KEY",
            "optional": True,
        }
        assert refs["MLFLOW_TRACKING_PASSWORD"]["name"] == "mlflow-login"
        literal = {e["name"]: e.get("value") for e in keeper["env"] if "value" in e}
        assert literal["AICHOR_HISTORY"] == "s3://bucket/runs"  # (GCS's XML API)
        assert literal["AWS_ENDPOINT_URL"] == "https://storage.googleapis.com"
        (main,) = pod["containers"]
        assert main["command"][:2] == ["/bin/sh", "-c"] and main["command"][3] == "aichor-keep"


@pytest.mark.parametrize(
    "key, value, says",
    [
        ("mlflow", "https://user:pw@mlflow.example.com", "URL with credentials"),
        ("historyEndpoint", "http://key:secret@minio:9000", "URL with credentials"),
        ("history", "ftp://host/runs", "az://container"),
        ("history", "az://", "container's) name"),
        ("history", "runs/here", "absolute path"),
        ("history", "s3://", "bucket's (container's) name"),
        ("history", "file://host/x", "file:///absolute/path"),
        ("mlflow", "mlflow.example.com", "http:// or https://"),
        ("historySecret", "Not_A_Name", "not a Kubernetes name"),
    ],
)
def test_a_store_setting_is_refused_at_its_key(tmp_path, capsys, key, value, says) -> None:
    config = stack(tmp_path, **{key: value})
    capsys.readouterr()
    assert cli.main(["validate", "examples/pytorch.yaml", "--stack-config", config]) != 0
    err = capsys.readouterr().err
    assert f"aichor:{key}" in err and says in err
    assert "pw@" not in err and "secret@" not in err  # (never said back)


def test_a_store_behind_the_network_policy_is_refused_with_the_fix(tmp_path, capsys) -> None:
    config = stack(tmp_path, mlflow="http://10.0.0.5:5000")
    capsys.readouterr()
    assert cli.main(["validate", "examples/pytorch.yaml", "--stack-config", config]) != 0
    assert "aichor:mlflow" in capsys.readouterr().err and "aichor:egressCIDRs"
    with_egress = stack(tmp_path, mlflow="http://10.0.0.5:5000", egressCIDRs="10.0.0.0/8")
    assert cli.main(["validate", "examples/pytorch.yaml", "--stack-config", with_egress]) == 0


def test_a_folder_store_must_be_on_a_volume_the_pods_mount(tmp_path, capsys) -> None:
    config = stack(tmp_path, history="/nowhere/runs")
    capsys.readouterr()
    assert cli.main(["render", "examples/pytorch.yaml", "--stack-config", config]) != 0
    err = capsys.readouterr().err
    assert "aichor:history" in err and "/nowhere/runs is on no volume the pods mount" in err


@real
def test_history_reads_a_sweep_back_from_the_bucket_with_this_machines_store_empty(
    tmp_path, capsys, monkeypatch, mlflow_store, s3_store
) -> None:
    """After the run (its cluster gone), another machine, or this one with its store
    emptied, reads the sweep back from the bucket: the table the run printed."""
    _, bucket = a_sweep_kept(tmp_path, capsys, monkeypatch, mlflow_store, s3_store)
    here = json.loads(ran(capsys, "history", "lr-momentum", "--output", "json"))[0]
    monkeypatch.setenv("AICHOR_IAC_HISTORY", str(tmp_path / "elsewhere"))
    config = stack(
        tmp_path,
        manifest="sweep.yaml",
        history=f"s3://{bucket}/kept",
        historyEndpoint=s3_store.url,
    )
    listed = ran(capsys, "history", "--stack-config", config)
    assert "lr-momentum" in listed and "best" in listed
    (back,) = json.loads(ran(capsys, "history", "lr-momentum", "--output", "json"))
    assert (back["kind"], back["state"], back["best"]) == ("sweep", "Succeeded", here["best"])
    assert back["objective"] == "loss" and back["direction"] == "minimize"
    assert back["file"].endswith("sweep.yaml") and back["stack"] == "dev"

    def table(record: dict) -> list:
        return [
            (
                t["name"],
                t["state"],
                t["parameters"],
                t["objective"],
                t["metrics"]["loss"][-1]["value"],
            )
            for t in record["trials"]
        ]

    assert table(back) == table(here)
    logs = ran(capsys, "history", "lr-momentum", "--logs")
    assert logs.count("epoch=2 loss=") == 6
    again = ran(capsys, "history", "--stack-config", config)  # (read again: not doubled)
    assert again.count("lr-momentum") == listed.count("lr-momentum")


@pytest.mark.parametrize(
    "env, found",
    [
        ({"AICHOR_MLFLOW": "https://mlflow.example.com"}, [("mlflow.example.com", 443, True)]),
        ({"AICHOR_MLFLOW": "http://127.0.0.1:5000"}, [("127.0.0.1", 5000, False)]),
        (
            {"AICHOR_HISTORY": "s3://b/p", "AWS_REGION": "eu-west-3"},
            [("s3.eu-west-3.amazonaws.com", 443, True)],
        ),
        (
            {"AICHOR_HISTORY": "s3://b", "AWS_ENDPOINT_URL": "http://10.1.2.3:9000"},
            [("10.1.2.3", 9000, False)],
        ),
        ({"AICHOR_HISTORY": "/mnt/shared/runs"}, []),  # (a folder: no address)
    ],
)
def test_a_local_runs_pods_reach_the_stores_addresses(env, found) -> None:
    """Where a local run's pods find each store: the URL's own address (a name: 127.0.0.1 in
    the hosts file, where the pod's forwarder listens)."""
    from aichor_iac.local import egress

    keeper = {"name": "aichor-keeper", "env": [{"name": k, "value": v} for k, v in env.items()]}
    job = {"kind": "Job", "spec": {"template": {"spec": {"initContainers": [keeper]}}}}
    addresses = egress.addresses([job])
    assert [(a.host, a.port, a.named) for a in addresses] == found
    for address in addresses:
        assert address.ip == ("127.0.0.1" if address.named else address.host)


@real
def test_status_logs_and_events_read_the_store_once_the_cluster_has_forgotten(
    tmp_path, capsys, monkeypatch, mlflow_store, s3_store
) -> None:
    """The stack's cluster unreachable, or reached but with none of the sweep's objects (after
    `pulumi destroy`): `status`, `logs` and `events` read its newest run from aichor:history,
    and say so."""
    from fake_kube import Cluster, kubeconfig, serving

    _, bucket = a_sweep_kept(tmp_path, capsys, monkeypatch, mlflow_store, s3_store)
    monkeypatch.chdir(tmp_path)  # (the Pulumi project's folder: aichor:manifest is in it)
    table = ran(capsys, "status", "--local", "sweep.yaml")
    monkeypatch.setenv("AICHOR_IAC_HISTORY", str(tmp_path / "elsewhere"))
    gone = tmp_path / "gone-kubeconfig"
    gone.write_text(yaml.safe_dump(kubeconfig("https://127.0.0.1:9")))
    empty = Cluster(
        namespace="default", served={"batch/v1/jobs": [], "v1/pods": [], "v1/events": []}
    )
    with serving(empty) as url:
        destroyed = tmp_path / "kubeconfig"
        destroyed.write_text(yaml.safe_dump(kubeconfig(url)))
        for kube, why in (
            (gone, "cannot reach the cluster"),
            (destroyed, "has none of its objects"),
        ):
            config = stack(
                tmp_path,
                manifest="sweep.yaml",
                history=f"s3://{bucket}/kept",
                historyEndpoint=s3_store.url,
                **{"kubernetes:kubeconfig": str(kube)},
            )
            capsys.readouterr()
            assert cli.main(["status", "--stack-config", config]) == 0
            out, err = capsys.readouterr()
            assert why in err and f"read from aichor:history (s3://{bucket}/kept)" in err
            sweep = out[out.index("\nlr-momentum\n") :]  # (its trials' table, as the run's)
            assert sweep.split() == table[table.index("\nlr-momentum\n") :].split()
            assert "Complete (CompletionsReached)" in out
            assert cli.main(["logs", "--stack-config", config]) == 0
            assert "epoch=2 loss=" in capsys.readouterr().out
            assert cli.main(["events", "--stack-config", config]) == 0


def test_an_azure_container_is_written_with_the_azure_clis_keys(tmp_path, capsys) -> None:
    config = stack(
        tmp_path,
        history="az://runs/team-a",
        historySecret="blob-keys",
        historyEndpoint="http://127.0.0.1:10000/devstoreaccount1",
        networkPolicy="false",
    )
    out = ran(capsys, "render", "examples/pytorch.yaml", "--stack-config", config)
    (pod, *_) = [
        d["spec"]["template"]["spec"]
        for d in yaml.safe_load_all(out)
        if d and d.get("kind") == "Job"
    ]
    (keeper,) = [c for c in pod["initContainers"] if c["name"] == "aichor-keeper"]
    refs = {
        e["name"]: e["valueFrom"]["secretKeyRef"]["name"]
        for e in keeper["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert refs == {"AZURE_STORAGE_ACCOUNT": "blob-keys", "AZURE_STORAGE_KEY": "blob-keys"}
    literal = {e["name"]: e.get("value") for e in keeper["env"] if "value" in e}
    assert literal["AICHOR_HISTORY"] == "az://runs/team-a"
    assert literal["AZURE_STORAGE_BLOB_ENDPOINT"] == "http://127.0.0.1:10000/devstoreaccount1"
    assert "AWS_ENDPOINT_URL" not in literal


@real
def test_a_local_sweep_is_kept_in_an_azure_container_and_read_back(
    tmp_path, capsys, monkeypatch, azurite_store
) -> None:
    """The README's sweep with aichor:history on Azurite (through each pod's network, as
    the shell reaches it), read back with this machine's store empty."""
    from stores import AZURITE_ACCOUNT, AZURITE_KEY, blob_client

    blob_client(azurite_store.url).create_container("sweeps")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", AZURITE_ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_KEY", AZURITE_KEY)
    ran(capsys, "examples", "sweep", "-o", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    config = stack(
        tmp_path,
        manifest="sweep.yaml",
        history="az://sweeps/kept",
        historySecret="blob-keys",
        historyEndpoint=azurite_store.url,
    )
    ran(capsys, "run", "--local", "sweep.yaml", "--stack-config", config)
    here = json.loads(ran(capsys, "history", "lr-momentum", "--output", "json"))[0]
    monkeypatch.setenv("AICHOR_IAC_HISTORY", str(tmp_path / "elsewhere"))
    ran(capsys, "history", "--stack-config", config)
    (back,) = json.loads(ran(capsys, "history", "lr-momentum", "--output", "json"))
    assert back["best"] == here["best"] and len(back["trials"]) == 6
    assert [t["objective"] for t in back["trials"]] == [t["objective"] for t in here["trials"]]


@pytest.mark.parametrize(
    ("history", "secret", "keys"),
    [
        ("s3://runs/team-a", None, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
        ("gs://runs/team-a", None, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
        ("az://runs/team-a", None, "AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY"),
        ("s3://runs/team-a", "store-keys", None),
        ("gs://runs/team-a", "hmac-keys", None),
    ],
)
def test_a_bucket_without_its_keys_is_warned_of_once(tmp_path, capsys, history, secret, keys):
    """Without a Secret the keeper's writes go unsigned, which a store refuses (moto takes an
    object's first write and refuses the next: a run kept without its end)."""
    given = {"historySecret": secret} if secret else {}
    config = stack(tmp_path, history=history, egressCIDRs="0.0.0.0/0", **given)
    capsys.readouterr()
    assert cli.main(["validate", "examples/sweep.yaml", "--stack-config", config]) == 0
    err = capsys.readouterr().err
    warned = [line for line in err.splitlines() if "warning: aichor:historySecret" in line]
    assert len(warned) == (1 if keys else 0), err  # (once, not for each of the six trials)
    if keys:
        assert f"{history}'s keys" in warned[0] and keys in warned[0]
