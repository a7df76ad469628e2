"""The Pod Security Standards as the API server's admission checks a pod (pure): a table of
what `baseline` and `restricted` refuse, and the experiment's own pods under each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aichor_iac import engine
from aichor_iac.check import needs
from aichor_iac.check.podsecurity import violations
from aichor_iac.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
# A container restricted admits: every control set as the level wants
SAFE = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def pod(context: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "i", "securityContext": {**SAFE, **(context or {})}}
    return {"containers": [container], **spec}


@pytest.mark.parametrize(
    ("spec", "baseline", "restricted"),
    [
        (pod(), [], []),
        (pod(hostNetwork=True), ["hostNetwork is true"], []),
        (pod(hostPID=True, hostIPC=True), ["hostPID is true", "hostIPC is true"], []),
        (pod({"privileged": True}), ["container main: privileged"], []),
        (
            pod({"capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]}}),
            ["container main: capability IPC_LOCK added"],  # (RDMA's)
            [],
        ),
        (
            pod({"capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}),
            [],  # (baseline's own list)
            ["container main: capability CHOWN added"],  # (restricted: NET_BIND_SERVICE alone)
        ),
        (pod({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}), [], []),
        (pod({"capabilities": {}}), [], ["container main: capabilities do not drop ALL"]),
        (
            pod(volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
            ["volume h: hostPath"],
            ["volume h: hostPath"],
        ),
        (pod(volumes=[{"name": "n", "nfs": {"server": "s", "path": "/"}}]), [], ["volume n: nfs"]),
        (pod(volumes=[{"name": "e", "emptyDir": {}}]), [], []),
        (
            pod(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}),
            ["sysctl kernel.msgmax is not a safe one"],
            [],
        ),
        (
            pod(securityContext={"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]}),
            [],
            [],
        ),
        (
            pod({"seccompProfile": {"type": "Unconfined"}}),
            ["container main: seccompProfile Unconfined"],
            ["container main: seccompProfile is not RuntimeDefault or Localhost"],
        ),
        (pod({"procMount": "Unmasked"}), ["container main: procMount Unmasked"], []),
        (
            pod({"seLinuxOptions": {"type": "spc_t"}}),
            ["container main: seLinuxOptions.type spc_t"],
            [],
        ),
        (
            pod({"allowPrivilegeEscalation": True}),
            [],
            ["container main: allowPrivilegeEscalation is not false"],
        ),
        (pod({"runAsNonRoot": None}), [], ["container main: runAsNonRoot is not true"]),
        (pod({"runAsNonRoot": None}, securityContext={"runAsNonRoot": True}), [], []),
        (pod({"runAsUser": 0}), [], ["container main: runAsUser 0"]),
        (
            pod(
                {"seccompProfile": None}, securityContext={"seccompProfile": {"type": "Localhost"}}
            ),
            [],
            [],
        ),
    ],
)
def test_what_each_level_refuses(spec, baseline, restricted) -> None:
    for container in spec["containers"]:  # (None: the field left out)
        context = container["securityContext"]
        container["securityContext"] = {k: v for k, v in context.items() if v is not None}
    ports = [{"containerPort": 80, "hostPort": 8080}]
    assert violations(spec, {}, "privileged") == []
    assert violations(spec, {}, "baseline") == baseline
    assert violations(spec, {}, "restricted") == baseline + restricted
    spec["containers"][0]["ports"] = ports
    assert "container main: hostPort 8080" in violations(spec, {}, "baseline")


def test_an_apparmor_annotation_that_unconfines_is_refused_by_baseline() -> None:
    key = "container.apparmor.security.beta.kubernetes.io/main"
    assert violations(pod(), {key: "runtime/default"}, "baseline") == []
    assert violations(pod(), {key: "unconfined"}, "baseline") == [
        f"AppArmor annotation {key}: unconfined"
    ]


def test_the_experiments_pods_pass_restricted_with_run_as_non_root() -> None:
    # aichor:runAsNonRoot is what restricted asks beyond what every pod already sets
    for run_as_non_root, left in ((False, ["runAsNonRoot is not true"]), (True, [])):
        settings = Settings(run_as_non_root=run_as_non_root)
        for workload in needs.pods(
            engine.render(ROOT / "examples" / "pytorch.yaml", settings=settings)
        ):
            found = violations(workload.spec, {}, "restricted")
            # (each container's: the master's pod has the progress receiver's too)
            assert sorted({v.split(": ", 1)[1] for v in found}) == left, workload.owner
