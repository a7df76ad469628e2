"""The Pod Security Standards a namespace enforces (`pod-security.kubernetes.io/enforce`), as
the API server's Pod Security admission checks a pod (k8s.io/pod-security-admission, the
latest version of each control; pure): what in a pod template breaks `baseline` or
`restricted`. `privileged` allows everything."""

from __future__ import annotations

from typing import Any

from .needs import containers

LEVELS = ("privileged", "baseline", "restricted")
# Capabilities baseline lets a container add (restricted: NET_BIND_SERVICE alone)
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def violations(spec: dict[str, Any], annotations: dict[str, str], level: str) -> list[str]:
    """What in the pod (its spec and template annotations) `level` forbids."""
    if level not in ("baseline", "restricted"):
        return []
    found = _baseline(spec, annotations)
    if level == "restricted":
        found += _restricted(spec)
    return found


def _context(container: dict[str, Any]) -> dict[str, Any]:
    return container.get("securityContext") or {}


def _baseline(spec: dict[str, Any], annotations: dict[str, str]) -> list[str]:
    found = [f"{host} is true" for host in ("hostNetwork", "hostPID", "hostIPC") if spec.get(host)]
    pod = spec.get("securityContext") or {}
    found += [f"volume {v['name']}: hostPath" for v in spec.get("volumes", []) if "hostPath" in v]
    found += [
        f"sysctl {s['name']} is not a safe one"
        for s in pod.get("sysctls", [])
        if s["name"] not in SAFE_SYSCTLS
    ]
    found += _selinux_and_seccomp("the pod", pod)
    if (pod.get("windowsOptions") or {}).get("hostProcess"):
        found.append("the pod: windowsOptions.hostProcess is true")
    found += [
        f"AppArmor annotation {k}: {v}"
        for k, v in annotations.items()
        if k.startswith("container.apparmor.security.beta.kubernetes.io/")
        and v != "runtime/default"
        and not v.startswith("localhost/")
    ]
    for c in containers(spec):
        name, context = f"container {c['name']}", _context(c)
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        added = set((context.get("capabilities") or {}).get("add", [])) - BASELINE_CAPABILITIES
        found += [f"{name}: capability {cap} added" for cap in sorted(added)]
        ports = [p["hostPort"] for p in c.get("ports", []) if p.get("hostPort")]
        found += [f"{name}: hostPort {port}" for port in ports]
        if context.get("procMount", "Default") != "Default":
            found.append(f"{name}: procMount {context['procMount']}")
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"{name}: windowsOptions.hostProcess is true")
        found += _selinux_and_seccomp(name, context)
    return found


def _selinux_and_seccomp(name: str, context: dict[str, Any]) -> list[str]:
    found = []
    selinux = context.get("seLinuxOptions") or {}
    if selinux.get("type", "") not in SELINUX_TYPES:
        found.append(f"{name}: seLinuxOptions.type {selinux['type']}")
    found += [f"{name}: seLinuxOptions.{k} is set" for k in ("user", "role") if selinux.get(k)]
    if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
        found.append(f"{name}: seccompProfile Unconfined")
    if (context.get("appArmorProfile") or {}).get("type") == "Unconfined":
        found.append(f"{name}: appArmorProfile Unconfined")
    return found


def _restricted(spec: dict[str, Any]) -> list[str]:
    found = [
        f"volume {v['name']}: {kind}"
        for v in spec.get("volumes", [])
        for kind in sorted(set(v) - {"name"} - RESTRICTED_VOLUMES)
    ]
    pod = spec.get("securityContext") or {}
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type") in ("RuntimeDefault", "Localhost")
    if pod.get("runAsUser") == 0:
        found.append("the pod: runAsUser 0")
    for c in containers(spec):
        name, context = f"container {c['name']}", _context(c)
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation is not false")
        non_root = context.get("runAsNonRoot", pod.get("runAsNonRoot"))
        if non_root is not True:
            found.append(f"{name}: runAsNonRoot is not true")
        if context.get("runAsUser") == 0:
            found.append(f"{name}: runAsUser 0")
        seccomp = (context.get("seccompProfile") or {}).get("type")
        if not (seccomp in ("RuntimeDefault", "Localhost") or (seccomp is None and pod_seccomp)):
            found.append(f"{name}: seccompProfile is not RuntimeDefault or Localhost")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{name}: capabilities do not drop ALL")
        added = set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}
        found += [
            f"{name}: capability {cap} added"
            for cap in sorted(added & BASELINE_CAPABILITIES)  # (the others: baseline's)
        ]
    return found
