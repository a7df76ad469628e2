"""Mount points shared by local clusters at once: made by the first that needs them, removed by
the last to leave (a cluster that removed them while another still starts containers there
would leave them behind, made again by those containers)."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from aichor_iac.local.host import LocalUnavailable
from aichor_iac.local.volumes import MountPoints


def workload(*paths: Path) -> dict:
    mounts = [{"name": f"v{i}", "mountPath": str(p)} for i, p in enumerate(paths)]
    volumes = [{"name": f"v{i}", "emptyDir": {}} for i in range(len(paths))]
    container = {"name": "c", "volumeMounts": mounts}
    return {"spec": {"template": {"spec": {"containers": [container], "volumes": volumes}}}}


def test_the_last_cluster_to_leave_removes_what_the_first_made(tmp_path: Path) -> None:
    registry, target = tmp_path / "registry", tmp_path / "aichor" / "function"
    first = MountPoints([workload(target)], registry).__enter__()
    second = MountPoints([workload(target, tmp_path / "aichor" / "logs")], registry).__enter__()
    assert target.is_dir() and (tmp_path / "aichor" / "logs").is_dir()
    first.__exit__()
    assert target.is_dir()  # the second still starts containers there
    second.__exit__()
    assert not (tmp_path / "aichor").exists()
    assert not list(registry.glob("live-*"))


def test_a_killed_cluster_does_not_keep_them_forever(tmp_path: Path) -> None:
    registry, target = tmp_path / "registry", tmp_path / "aichor" / "function"
    points = MountPoints([workload(target)], registry).__enter__()
    (registry / "live-killed").write_text("")  # registered, its lock gone with its process
    points.__exit__()
    assert not (tmp_path / "aichor").exists()


def test_a_live_cluster_holds_its_registration_locked(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    points = MountPoints([workload(tmp_path / "a")], registry).__enter__()
    (live,) = registry.glob("live-*")
    with live.open() as other, pytest.raises(BlockingIOError):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    points.__exit__()


def test_a_mount_point_that_cannot_be_made_is_a_clear_refusal(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    points = MountPoints([workload(tmp_path / "made", tmp_path / "file" / "sub")], tmp_path / "r")
    with pytest.raises(LocalUnavailable, match="cannot be made here"):
        points.__enter__()
    points.__exit__()
    assert not (tmp_path / "made").exists()
