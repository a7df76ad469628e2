"""A pod's volumes as directories: projected Secret and ConfigMap files with their modes
(written once per pod), an emptyDir of its own, each PersistentVolumeClaim one directory all
its pods share; and the mount points they need on this machine."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from .host import LocalUnavailable


def volume_of(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in pod_spec.get("volumes", []) if v["name"] == name)


def emulated(volume: dict[str, Any]) -> bool:
    """Whether a local pod gets the volume: all but a memory-backed emptyDir (/dev/shm)."""
    return volume.get("emptyDir", {}).get("medium") != "Memory"


def mount_points(workloads: list[dict[str, Any]]) -> list[Path]:
    """Bind mounts need their targets to exist: make every directory a pod mounts a volume
    at, and return those made (to remove them, deepest last). LocalUnavailable when one
    cannot be made (what was made is removed)."""
    targets = set()
    for workload in workloads:
        spec = workload["spec"]["template"]["spec"]
        for container in spec["containers"] + spec.get("initContainers", []):
            for mount in container.get("volumeMounts", []):
                if emulated(volume_of(spec, mount["name"])):
                    targets.add(Path(mount["mountPath"]))
    made: list[Path] = []
    for target in sorted(targets):
        for directory in reversed([p for p in (target, *target.parents) if not p.exists()]):
            try:
                directory.mkdir()
            except OSError as error:
                for path in reversed(made):
                    path.rmdir()
                raise LocalUnavailable(
                    f"a pod mounts a volume at {target}, and {directory} cannot be made "
                    f"here: {error.strerror}"
                ) from None
            made.append(directory)
    return made


class Volumes:
    """Where each volume's files are, under `root`; `config` holds the ConfigMaps' data by
    name, `secrets` the Secrets' values by (name, key)."""

    def __init__(
        self,
        root: Path,
        config: dict[str, dict[str, str]],
        secrets: dict[tuple[str, str], str],
    ):
        self.root, self.config, self.secrets = root, config, secrets
        self.lock = threading.Lock()

    def claim(self, name: str) -> Path:
        """The directory standing for a PersistentVolumeClaim (it outlives every pod)."""
        path = self.root / "claims" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def source(self, pod: str, spec: dict[str, Any], name: str) -> Path | None:
        """Where a volume's files are for `pod`; None: not emulated (a memory-backed
        /dev/shm)."""
        volume = volume_of(spec, name)
        if not emulated(volume):
            return None
        if "persistentVolumeClaim" in volume:
            return self.claim(volume["persistentVolumeClaim"]["claimName"])
        path = self.root / pod / "volumes" / name
        if "emptyDir" in volume:
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o777)
            return path
        with self.lock:
            if not path.exists():
                self._files(path, volume)
        return path

    def _files(self, path: Path, volume: dict[str, Any]) -> None:
        """A projected (or ConfigMap) volume's files, each with its mode."""
        if "configMap" in volume:  # a ConfigMap's keys (or the items named) as files
            ref = volume["configMap"]
            data = self.config[ref["name"]]
            items = ref.get("items") or [{"key": k, "path": k} for k in data]
            volume = {"projected": {"sources": [{"configMap": {**ref, "items": items}}]}}
        projected = volume["projected"]
        for source in projected["sources"]:
            kind, ref = next(iter(source.items()))
            for item in ref["items"]:
                if kind == "secret":
                    value = self.secrets[(ref["name"], item["key"])]
                else:
                    value = self.config[ref["name"]][item["key"]]
                target = path / item["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(value)
                target.chmod(item.get("mode", projected.get("defaultMode", 0o644)))
