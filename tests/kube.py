"""What Kubernetes does with a rendered pod template, emulated for tests: downward API values,
`$(VAR)` expansion of env values and commands, and running the container's command with the
resulting environment (so the shell prelude runs too)."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

INDEX_PATH = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def expand(text: str, mapping: dict[str, str]) -> str:
    """Kubernetes' expansion (k8s.io/kubernetes third_party/forked/golang/expansion): `$(VAR)`
    becomes the value of an earlier variable, `$$` becomes `$`, anything else stays."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(mapping.get(name, f"$({name})"))
                    i = end + 1
                    continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def container_env(job: dict[str, Any], index: int, container: str | None = None) -> dict[str, str]:
    """The env Kubernetes gives a container of pod `index` of an Indexed Job."""
    spec = job["spec"]["template"]["spec"]
    main = _container(spec, container)
    env: dict[str, str] = {}
    for entry in main.get("env", []):
        if "valueFrom" in entry:
            source = entry["valueFrom"]
            if "fieldRef" in source:
                path = source["fieldRef"]["fieldPath"]
                env[entry["name"]] = {
                    INDEX_PATH: str(index),
                    "status.podIP": f"10.0.0.{index + 1}",
                    "metadata.namespace": job["metadata"]["namespace"],
                }[path]
            else:
                env[entry["name"]] = f"<{entry['name']} from {sorted(source)[0]}>"
        else:
            env[entry["name"]] = expand(entry.get("value", ""), env)
    env.setdefault("JOB_COMPLETION_INDEX", str(index))  # the Job controller adds it otherwise
    env["HOSTNAME"] = f"{job['metadata']['name']}-{index}"  # the pod's host name
    return env


def run_container(
    job: dict[str, Any],
    index: int,
    container: str | None = None,
    timeout: float = 60,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run the container's command here, with the env Kubernetes would give it."""
    main = _container(job["spec"]["template"]["spec"], container)
    env = container_env(job, index, container)
    command = [expand(part, env) for part in main["command"] + main.get("args", [])]
    process_env = {"PATH": os.environ["PATH"], **env, **(extra_env or {})}
    return subprocess.run(
        command, env=process_env, capture_output=True, text=True, timeout=timeout, check=False
    )


def process_env(job: dict[str, Any], index: int, **kwargs: Any) -> dict[str, str]:
    """The environment the user's command sees, when that command is `PRINT_ENV`."""
    result = run_container(job, index, **kwargs)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


PRINT_ENV = "python3 -c 'import json, os; print(json.dumps(dict(os.environ)))'"


def _container(pod_spec: dict[str, Any], name: str | None) -> dict[str, Any]:
    containers = pod_spec["containers"] + pod_spec.get("initContainers", [])
    return next(c for c in containers if name is None or c["name"] == name)


class LocalCluster:
    """Run every replica of a rendered experiment as local processes, the way Kubernetes would
    run its pods: init containers, then the main container, each with its env and host name.

    The replicas share a network namespace of their own (`ip netns`, root only), whose
    /etc/hosts resolves every replica host to 127.0.0.1; when a replica's main container exits,
    its host leaves that file, as a finished pod leaves the Service's DNS records.
    """

    def __init__(self, objects: list[dict[str, Any]], env: dict[str, str]):
        import threading
        import uuid
        from pathlib import Path

        self.jobs = [o for o in objects if o["kind"] == "Job"]
        self.env = env
        self.lock = threading.Lock()
        self.results: dict[str, subprocess.CompletedProcess] = {}
        self.netns = f"aichor-test-{uuid.uuid4().hex[:8]}"
        self.etc = Path("/etc/netns") / self.netns  # `ip netns exec` mounts etc/hosts from here
        self.hosts = {
            f"{job['metadata']['name']}-{i}": self._fqdn(job, i)
            for job in self.jobs
            for i in range(job["spec"]["completions"])
        }

    @staticmethod
    def available() -> bool:
        name = "aichor-probe"
        try:
            made = subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode == 0
        except FileNotFoundError:
            return False
        if made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        return made

    def __enter__(self) -> LocalCluster:
        subprocess.run(["ip", "netns", "add", self.netns], check=True)
        subprocess.run(
            ["ip", "netns", "exec", self.netns, "ip", "link", "set", "lo", "up"], check=True
        )
        self.etc.mkdir(parents=True, exist_ok=True)
        # The hosts file is the authority, as the cluster DNS is for its own names: a name that
        # left it is "not found" (NXDOMAIN), not a lookup error.
        (self.etc / "nsswitch.conf").write_text("hosts: files\n")
        self._write()
        return self

    def __exit__(self, *exc: object) -> None:
        import shutil

        subprocess.run(["ip", "netns", "del", self.netns], check=False)
        shutil.rmtree(self.etc, ignore_errors=True)

    def run(self, timeout: float = 120) -> dict[str, subprocess.CompletedProcess]:
        """Start every replica at once; return each one's main container result by pod name."""
        import threading

        threads = [
            threading.Thread(target=self._replica, args=(job, i), daemon=True)
            for job in self.jobs
            for i in range(job["spec"]["completions"])
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout)
        return self.results

    def _replica(self, job: dict[str, Any], index: int) -> None:
        pod = f"{job['metadata']['name']}-{index}"
        spec = job["spec"]["template"]["spec"]
        for init in spec.get("initContainers", []):
            result = self._container(job, index, init["name"])
            if result.returncode != 0:
                self._finish(pod, result)
                return
        self._finish(pod, self._container(job, index, spec["containers"][0]["name"]))

    def _container(self, job: dict[str, Any], index: int, name: str) -> subprocess.CompletedProcess:
        main = _container(job["spec"]["template"]["spec"], name)
        env = container_env(job, index, name)
        command = [expand(part, env) for part in main["command"] + main.get("args", [])]
        return subprocess.run(
            ["ip", "netns", "exec", self.netns, *command],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    def _finish(self, pod: str, result: subprocess.CompletedProcess) -> None:
        with self.lock:
            self.results[pod] = result
            self.hosts.pop(pod, None)
            self._write()

    def _write(self) -> None:
        text = "127.0.0.1 localhost\n" + "".join(f"127.0.0.1 {h}\n" for h in self.hosts.values())
        path = self.etc / "hosts"
        with path.open("r+" if path.exists() else "w") as f:  # in place: mounts see this inode
            f.truncate(0)
            f.write(text)

    @staticmethod
    def _fqdn(job: dict[str, Any], index: int) -> str:
        spec = job["spec"]["template"]["spec"]
        namespace = job["metadata"]["namespace"]
        return (
            f"{job['metadata']['name']}-{index}.{spec['subdomain']}.{namespace}.svc.cluster.local"
        )
