"""`aichor-iac check` (issue 42) against a server that answers as the Kubernetes API does
(tests/fake_kube.py, its answers checked against the API's OpenAPI schemas): each case of a
user's cluster gives its line, its fix and the exit code (1 when something blocks; unknown
never blocks, and is never a false ok)."""

from __future__ import annotations

import json
import os
import re
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_kube import FORBIDDEN, Cluster, kubeconfig, serving

from aichor_iac import cli, engine, load
from aichor_iac.components import experiment
from aichor_iac.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PYTORCH = ROOT / "examples" / "pytorch.yaml"  # a master and 2 workers, a Quadro RTX 4000 each
RDMA = ROOT / "tests" / "aichor" / "pytorch-rdma-h100.yaml"
PRODUCT = "nvidia.com/gpu.product"


def node(name: str, product: str = "Quadro-RTX-4000", **more: Any) -> dict[str, Any]:
    allocatable = {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "4", "pods": "110"}
    allocatable["ephemeral-storage"] = "100Gi"
    labels = {"kubernetes.io/hostname": name, PRODUCT: product}
    found = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    return {**found, "spec": more, "status": {"allocatable": allocatable}}


def quota(name: str, hard: dict[str, str], used: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"hard": hard},
        "status": {"hard": hard, "used": used},
    }


def limit_range(name: str, item: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"limits": [item]},
    }


def check(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    cluster: Cluster,
    manifest: Path = PYTORCH,
    config: dict[str, str] | None = None,
    pulumi: str | None = "v3.200.0",
) -> tuple[int, dict[str, dict[str, str]]]:
    """The exit code and each check's line (by its name), of `check --output json` against
    the cluster, with a Pulumi CLI that says `pulumi` (None: none on PATH)."""
    tools = tmp_path / "bin"
    tools.mkdir(parents=True, exist_ok=True)
    (tools / "pulumi").unlink(missing_ok=True)
    if pulumi is not None:
        (tools / "pulumi").write_text(f"#!/bin/sh\necho {pulumi}\n")
        (tools / "pulumi").chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))
    stack = tmp_path / "Pulumi.dev.yaml"
    settings = {"aichor:namespace": "team-a", **(config or {})}
    stack.write_text(yaml.safe_dump({"config": settings}))
    with serving(cluster) as url:
        config_file = kubeconfig_of(tmp_path, url)
        argv = ["check", str(manifest), "--stack-config", str(stack)]
        code = cli.main([*argv, "--kubeconfig", str(config_file), "--output", "json"])
    found = json.loads(capsys.readouterr().out)
    lines = {line["check"]: line for line in found["checks"]}
    assert found["blocked"] == sum(line["state"] == "blocked" for line in lines.values())
    return code, lines


def kubeconfig_of(tmp_path: Path, url: str) -> Path:
    """A kubeconfig whose one context is the API at `url`."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig(url)))
    return path


def fitting() -> Cluster:
    """A cluster where the example fits: every permission, no quota or LimitRange, a node
    with its GPUs."""
    return Cluster(nodes=[node("gpu-1")])


def test_a_cluster_that_fits_gives_every_line_ok(tmp_path, monkeypatch, capsys) -> None:
    cluster = fitting()
    code, lines = check(tmp_path, monkeypatch, capsys, cluster)
    assert code == 0
    assert {name: line["state"] for name, line in lines.items()} == {
        "namespace team-a": "ok",
        "permissions: secrets": "ok",
        "permissions: networkpolicies.networking.k8s.io": "ok",
        "permissions: services": "ok",
        "permissions: jobs.batch": "ok",
        "permissions: pods": "ok",
        "permissions: pods/log": "ok",
        "permissions: events": "ok",
        "quotas": "ok",
        "limits": "ok",
        "pod security": "ok",
        # (the master's pods ask for the progress receiver's quarter of a core more)
        "nodes for Job/pytorch-ddp-master": "ok",
        "nodes for Job/pytorch-ddp-worker": "ok",
        "Pulumi CLI": "ok",
        "pulumi-kubernetes": "ok",
    }
    # every verb pulumi up, destroy and status use, asked of the API for each resource
    asked = {(r["verb"], r["resource"], r.get("namespace")) for r in cluster.reviews}
    for verb in ("create", "get", "list", "watch", "patch", "delete"):
        assert (verb, "jobs", "team-a") in asked
    assert ("get", "pods", "team-a") in asked and ("list", "events", "team-a") in asked
    assert lines["Pulumi CLI"]["detail"] == "3.200.0"


def test_a_role_that_cannot_create_jobs(tmp_path, monkeypatch, capsys) -> None:
    cluster = fitting()
    cluster.denied = {("create", "jobs.batch"), ("delete", "jobs.batch")}
    code, lines = check(tmp_path, monkeypatch, capsys, cluster)
    assert code == 1
    line = lines["permissions: jobs.batch"]
    assert (line["state"], line["detail"]) == ("blocked", "cannot create, delete in team-a")
    assert line["fix"].endswith(
        "kubectl create role aichor --verb=create,delete --resource=jobs.batch -n team-a"
    )


def test_a_quota_with_no_gpus_left(tmp_path, monkeypatch, capsys) -> None:
    cluster = fitting()
    gpus = {"requests.nvidia.com/gpu": "8"}
    cluster.quotas = [
        quota("gpus", gpus, {"requests.nvidia.com/gpu": "7"}),
        quota("room", {"requests.cpu": "100", "pods": "10"}, {"requests.cpu": "50", "pods": "2"}),
    ]
    code, lines = check(tmp_path, monkeypatch, capsys, cluster)
    assert code == 1
    line = lines["quota gpus"]
    assert (line["state"], line["detail"]) == (
        "blocked",
        "requests.nvidia.com/gpu: 3 needed, 1 left",
    )
    assert "ResourceQuota gpus" in line["fix"]
    assert lines["quota room"]["state"] == "ok"  # 12 of 50 CPUs left, 3 of 8 pods


def test_a_quota_counting_limits_refuses_containers_without_them(
    tmp_path, monkeypatch, capsys
) -> None:
    cluster = fitting()
    cluster.quotas = [quota("eph", {"limits.ephemeral-storage": "1Ti"}, {})]
    code, lines = check(tmp_path, monkeypatch, capsys, cluster)
    assert (code, lines["quota eph"]["state"]) == (0, "ok")  # (only cpu and memory must be set)


def test_a_limit_range_whose_max_memory_is_below_a_replicas(tmp_path, monkeypatch, capsys) -> None:
    cluster = fitting()
    cluster.ranges = [limit_range("small", {"type": "Container", "max": {"memory": "8Gi"}})]
    code, lines = check(tmp_path, monkeypatch, capsys, cluster)
    assert code == 1
    line = lines["limits small"]
    assert line["state"] == "blocked"
    assert line["detail"].startswith(
        "Job/pytorch-ddp-master container pytorch: memory limit 14Gi > max 8Gi"  # (12 + shm 2)
    )
    assert "LimitRange small" in line["fix"]


def test_a_limit_ranges_defaults_fill_what_a_container_leaves_out(
    tmp_path, monkeypatch, capsys
) -> None:
    # A container that sets no ephemeral-storage takes the default, within the bounds
    cluster = fitting()
    item = {"type": "Container", "max": {"ephemeral-storage": "10Gi"}}
    cluster.ranges = [limit_range("disk", {**item, "default": {"ephemeral-storage": "1Gi"}})]
    code, lines = check(tmp_path, monkeypatch, capsys, cluster)
    assert (code, lines["limits disk"]["state"]) == (0, "ok")
    cluster.ranges = [limit_range("disk", item)]  # (no default: no limit, refused)
    code, lines = check(tmp_path, monkeypatch, capsys, cluster)
    assert "ephemeral-storage limit none > max 10Gi" in lines["limits disk"]["detail"]


def test_a_restricted_namespace_refuses_an_rdma_pod(tmp_path, monkeypatch, capsys) -> None:
    cluster = Cluster(labels={"pod-security.kubernetes.io/enforce": "restricted"})
    cluster.nodes = [node("h100", "NVIDIA-H100-80GB-HBM3")]
    code, lines = check(tmp_path, monkeypatch, capsys, cluster, RDMA)
    assert code == 1
    line = lines["pod security"]
    assert line["state"] == "blocked"
    assert "container pytorch: capability IPC_LOCK added" in line["detail"]
    assert "RDMA needs IPC_LOCK, which only privileged allows" in line["fix"]
    cluster.labels = {"pod-security.kubernetes.io/enforce": "privileged"}
    code, lines = check(tmp_path, monkeypatch, capsys, cluster, RDMA)
    assert lines["pod security"]["state"] == "ok"


def test_nodes_with_no_matching_gpu_product(tmp_path, monkeypatch, capsys) -> None:
    taint = {"key": "dedicated", "value": "other-team", "effect": "NoSchedule"}
    cluster = Cluster(nodes=[node("a100-1", "A100"), node("a100-2", "A100")])
    cluster.nodes.append(node("quadro-1", taints=[taint]))
    code, lines = check(tmp_path, monkeypatch, capsys, cluster)
    assert code == 1
    line = lines["nodes for Job/pytorch-ddp-worker"]
    assert line["state"] == "blocked"
    assert line["detail"] == (
        "none of 3 nodes fits: 2 lack nvidia.com/gpu.product=Quadro-RTX-4000; "
        "1 have taint dedicated=other-team:NoSchedule"
    )
    assert "autoscaler" in line["fix"]


def test_nodes_that_cannot_be_read_are_unknown_and_block_nothing(
    tmp_path, monkeypatch, capsys
) -> None:
    cluster = Cluster(nodes=FORBIDDEN, quotas=FORBIDDEN)
    code, lines = check(tmp_path, monkeypatch, capsys, cluster)
    assert code == 0
    assert lines["nodes"]["state"] == "unknown"
    assert lines["nodes"]["detail"].endswith("not an error")
    assert (lines["quotas"]["state"], lines["quotas"]["detail"]) == (
        "unknown",
        "cannot be listed in team-a",
    )


@pytest.mark.parametrize(
    ("served", "state", "detail"),
    [
        ({}, "blocked", "Kueue is not installed (no LocalQueue kind)"),
        ({"kueue.x-k8s.io/v1beta1/localqueues": ["other"]}, "blocked", "no such LocalQueue"),
        ({"kueue.x-k8s.io/v1beta2/localqueues": ["team-queue"]}, "ok", "exists in team-a"),
    ],
)
def test_the_stacks_kueue_queue(tmp_path, monkeypatch, capsys, served, state, detail) -> None:
    cluster = fitting()
    cluster.served = {
        path: [{"metadata": {"name": name, "namespace": "team-a"}} for name in names]
        for path, names in served.items()
    }
    config = {"aichor:kueueQueue": "team-queue"}
    code, lines = check(tmp_path, monkeypatch, capsys, cluster, config=config)
    line = lines["Kueue LocalQueue team-queue"]
    assert (code, line["state"]) == (int(state == "blocked"), state)
    assert line["detail"].startswith(detail)
    if served.get("kueue.x-k8s.io/v1beta1/localqueues"):
        assert "(it has other)" in line["fix"]


def test_a_gang_scheduler_that_is_not_installed(tmp_path, monkeypatch, capsys) -> None:
    config = {"aichor:gangScheduler": "coscheduling"}
    code, lines = check(tmp_path, monkeypatch, capsys, fitting(), config=config)
    line = lines["gang scheduler: PodGroup (scheduling.x-k8s.io/v1alpha1)"]
    assert (code, line["state"]) == (1, "blocked")
    assert "permissions: podgroups.scheduling.x-k8s.io" in lines
    cluster = fitting()
    cluster.served = {"scheduling.x-k8s.io/v1alpha1/podgroups": []}
    code, lines = check(tmp_path, monkeypatch, capsys, cluster, config=config)
    assert lines["gang scheduler: PodGroup (scheduling.x-k8s.io/v1alpha1)"]["state"] == "ok"


@pytest.mark.parametrize(
    ("labels", "config", "state", "detail"),
    [
        (None, {}, "blocked", "does not exist"),
        (None, {"aichor:createNamespace": "true"}, "ok", "absent: the stack creates it"),
        ({}, {"aichor:createNamespace": "true"}, "blocked", "exists, and the stack would"),
        ({"app.kubernetes.io/part-of": "aichor"}, {"aichor:createNamespace": "true"}, "ok", ""),
    ],
)
def test_the_namespace(tmp_path, monkeypatch, capsys, labels, config, state, detail) -> None:
    cluster = fitting()
    cluster.labels = labels
    code, lines = check(tmp_path, monkeypatch, capsys, cluster, config=config)
    line = lines["namespace team-a"]
    assert line["state"] == state and line["detail"].startswith(detail)
    assert code == int(state == "blocked")
    if config:  # the stack creates it: namespaces, cluster-wide
        assert lines["permissions: namespaces"]["detail"].startswith("create, get")
        assert {"verb": "create", "resource": "namespaces", "group": ""} in [
            {k: r.get(k) for k in ("verb", "resource", "group")} for r in cluster.reviews
        ]


@pytest.mark.parametrize(
    ("pulumi", "state", "detail"),
    [
        (None, "blocked", "not found on PATH"),
        ("v3.0.2", "blocked", "3.0.2, older than 3.1.0"),
        ("nonsense", "unknown", "`pulumi version` said 'nonsense\\n'"),  # (never a false ok)
    ],
)
def test_the_pulumi_cli(tmp_path, monkeypatch, capsys, pulumi, state, detail) -> None:
    code, lines = check(tmp_path, monkeypatch, capsys, fitting(), pulumi=pulumi)
    found = (lines["Pulumi CLI"]["state"], lines["Pulumi CLI"]["detail"])
    assert (code, *found) == (int(state == "blocked"), state, detail)


def test_the_table_piped_to_a_file_keeps_each_name_and_quantity_whole(
    tmp_path, monkeypatch, capsys
) -> None:
    # Not a terminal (a CI log, `| tee`): no cell breaks inside a word, whatever its width.
    cluster = fitting()
    cluster.denied = {("create", "jobs.batch")}
    cluster.quotas = [
        quota("gpus", {"requests.nvidia.com/gpu": "8"}, {"requests.nvidia.com/gpu": "7"})
    ]
    check(tmp_path, monkeypatch, capsys, cluster)  # (to write the files)
    monkeypatch.delenv("COLUMNS", raising=False)
    log = tmp_path / "check.log"
    with serving(cluster) as url, log.open("w") as piped, redirect_stdout(piped):
        config = yaml.safe_load((tmp_path / "kubeconfig").read_text())
        config["clusters"][0]["cluster"]["server"] = url
        (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
        argv = ["check", str(PYTORCH), "--stack-config", str(tmp_path / "Pulumi.dev.yaml")]
        assert cli.main([*argv, "--kubeconfig", str(tmp_path / "kubeconfig")]) == 1
    out = log.read_text()
    for whole in (
        "permissions: jobs.batch",
        "cannot create in team-a",
        "requests.nvidia.com/gpu: 3 needed, 1 left",
        "ResourceQuota gpus",
    ):
        assert whole in out, whole
    assert "2 blocked, 0 unknown, 13 ok" in " ".join(out.split())
    assert os.environ["PATH"] == str(tmp_path / "bin")


def test_pulumi_preview_shows_what_blocks_as_the_components_warnings(
    tmp_path, monkeypatch, capsys
) -> None:
    # aichor:check: the program checks the default provider's cluster (kubernetes:kubeconfig)
    check(tmp_path, monkeypatch, capsys, fitting())  # (the Pulumi CLI on PATH)
    cluster = fitting()
    cluster.denied = {("create", "jobs.batch")}
    manifest, settings = load(PYTORCH), Settings(namespace="team-a", check=True)
    with serving(cluster) as url:
        config = {"kubernetes:kubeconfig": str(kubeconfig_of(tmp_path, url))}
        found = engine.run(
            lambda: experiment("pytorch-ddp", manifest, settings).outputs, "dev", config
        )
        offline = engine.expand(manifest, settings)
    checked = [w for w in found.warnings if w.startswith("aichor:check:")]
    assert checked == [
        "aichor:check: permissions: jobs.batch: cannot create in team-a (fix: ask for a role "
        "with them: kubectl create role aichor --verb=create --resource=jobs.batch -n team-a)"
    ]
    assert cluster.reviews  # (read by the program)
    assert not [w for w in offline.warnings if w.startswith("aichor:check:")]  # (never offline)


def test_a_limit_range_bounds_the_claims_too(tmp_path, monkeypatch, capsys) -> None:
    # (the RDMA example enables TensorBoard: a claim for its logs)
    cluster = Cluster(nodes=[node("h100", "NVIDIA-H100-80GB-HBM3")])
    item = {"type": "PersistentVolumeClaim", "max": {"storage": "1Gi"}}
    cluster.ranges = [limit_range("claims", item)]
    code, lines = check(tmp_path, monkeypatch, capsys, cluster, RDMA)
    line = lines["limits claims"]
    assert (code, line["state"]) == (1, "blocked")
    assert re.fullmatch(
        r"PersistentVolumeClaim/\S+-tensorboard: storage \d+Gi > max 1Gi", line["detail"]
    )


def test_progress_reports_add_their_objects_to_what_is_checked(tmp_path, monkeypatch, capsys):
    """Issue 52: with `aichor:progress`, the experiment's Secret (the receiver's CA,
    certificate and token) is asked for too, and the receiver's sidecar counts in the pod's
    requests and its security."""
    cluster = fitting()
    code, lines = check(tmp_path, monkeypatch, capsys, cluster, config={"aichor:progress": True})
    assert code == 0
    assert lines["permissions: secrets"]["state"] == "ok"
    assert lines["pod security"]["state"] == "ok" and lines["quotas"]["state"] == "ok"
    asked = {(r["verb"], r["resource"]) for r in cluster.reviews}
    assert ("create", "secrets") in asked
