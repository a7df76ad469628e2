"""A pod's volumes as directories: projected Secret and ConfigMap files with their modes
(written once per pod), an emptyDir of its own, each PersistentVolumeClaim one directory all
its pods share; and the mount points they need on this machine."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..engine import REDACTED
from .host import LocalUnavailable


def volume_of(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in pod_spec.get("volumes", []) if v["name"] == name)


def emulated(volume: dict[str, Any]) -> bool:
    """Whether a local pod gets the volume: all but a memory-backed emptyDir (/dev/shm)."""
    return volume.get("emptyDir", {}).get("medium") != "Memory"


# Local clusters at once on one machine share the mount points they make: the last one to
# leave removes them (one that removed them while another still starts containers there
# would see them made again by those containers, and left behind). /run is a tmpfs.
REGISTRY = Path("/run/aichor-local")


class MountPoints:
    """The directories pods mount volumes at, made for the clusters that need them (bind
    mounts need their targets to exist) and removed when the last of those clusters leaves.
    LocalUnavailable when one cannot be made (nothing is left made then)."""

    def __init__(self, workloads: list[dict[str, Any]], registry: Path = REGISTRY) -> None:
        self.targets = sorted(_targets(workloads))
        self.registry = registry
        self.live: Any = None  # this cluster's registration, locked shared while it lives

    def __enter__(self) -> MountPoints:
        try:
            self._register()
        except BaseException:
            if self.live is not None:  # (nothing left made: a cluster that cannot start)
                self.__exit__()
            raise
        return self

    def _register(self) -> None:
        self.registry.mkdir(parents=True, exist_ok=True)
        with _registry_lock(self.registry):
            self.live = (self.registry / f"live-{uuid.uuid4().hex}").open("w")
            fcntl.flock(self.live, fcntl.LOCK_SH)
            self._made(self.targets)

    def _made(self, targets: list[Path]) -> None:
        """Each target made (under the registry's lock), and recorded for the last to leave."""
        made: list[Path] = []
        try:
            for target in targets:
                made += _make(target)
        finally:
            with (self.registry / "made").open("a") as record:
                record.writelines(f"{path}\n" for path in made)

    def add(self, workloads: list[dict[str, Any]]) -> None:
        """The mount points of more workloads, made now (the cluster is registered)."""
        more = sorted(_targets(workloads) - set(self.targets))
        if not more:
            return
        self.targets = sorted({*self.targets, *more})
        with _registry_lock(self.registry):
            self._made(more)

    def __exit__(self, *exc: object) -> None:
        with _registry_lock(self.registry):
            if self.live is not None:
                self.live.close()  # (its lock with it)
                Path(self.live.name).unlink(missing_ok=True)
            if any(_alive(path) for path in self.registry.glob("live-*")):
                return  # another cluster still needs them: the last one removes them
            record = self.registry / "made"
            made = record.read_text().splitlines() if record.exists() else []
            for path in sorted(set(made), key=lambda p: -p.count("/")):  # deepest first
                with contextlib.suppress(OSError):
                    os.rmdir(path)
            record.unlink(missing_ok=True)


def _targets(workloads: list[dict[str, Any]]) -> set[Path]:
    targets = set()
    for workload in workloads:
        spec = workload["spec"]["template"]["spec"]
        for container in spec["containers"] + spec.get("initContainers", []):
            for mount in container.get("volumeMounts", []):
                if emulated(volume_of(spec, mount["name"])):
                    targets.add(Path(mount["mountPath"]))
    return targets


def _make(target: Path) -> list[Path]:
    """The directories made for `target` to exist, from the top."""
    made: list[Path] = []
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


@contextlib.contextmanager
def _registry_lock(registry: Path) -> Iterator[None]:
    with (registry / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _alive(path: Path) -> bool:
    """Whether the cluster registered as `path` still lives (holds its lock); a dead one's
    registration (its process was killed) is removed."""
    with path.open() as registration:
        try:
            fcntl.flock(registration, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    path.unlink(missing_ok=True)
    return False


class Volumes:
    """Where each volume's files are, under `root`; `config` holds the ConfigMaps' data by
    name, `secrets` the Secrets' values by (name, key): a redacted one is the value of its key
    in `generated` (a generated Secret's are never rendered), a given one is kept."""

    def __init__(self, root: Path, generated: dict[str, str]):
        self.root, self.generated = root, generated
        self.config: dict[str, dict[str, str]] = {}
        self.secrets: dict[tuple[str, str], str] = {}
        self.lock = threading.Lock()

    def add(self, objects: list[dict[str, Any]]) -> None:
        """The ConfigMaps and Secrets of `objects`, from now on."""
        for obj in objects:
            name = obj["metadata"]["name"]
            if obj["kind"] == "ConfigMap":
                self.config[name] = obj.get("data", {})
            elif obj["kind"] == "Secret":
                for key, value in _secret_data(obj).items():
                    generated = self.generated.get(key, "")
                    self.secrets[name, key] = generated if value == REDACTED else value

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


def _secret_data(secret: dict[str, Any]) -> dict[str, str]:
    """A Secret's values by key, as the kubelet gives them (`data` decoded)."""
    data = {
        key: value if value == REDACTED else base64.b64decode(value).decode(errors="replace")
        for key, value in (secret.get("data") or {}).items()
    }
    return {**data, **(secret.get("stringData") or {})}
