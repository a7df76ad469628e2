"""What a local run makes of the rendered experiments before it runs them: each group capped
to `--replicas` (GPUs masked off), the generated Secrets' values and those given beside a
custom resource, the images' entrypoints it must be told, the Jobs' creation order, and the
env every pod's processes start from."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..k8s import progress
from . import reports
from .host import LocalUnavailable

if TYPE_CHECKING:
    from ..engine import Rendering
    from ..planning import Blueprint

# An experiment's gate: the failed trials that end its sweep, and the entry Jobs of the
# earlier trials it counts (`Trial.counted`)
Gate = tuple[int, list[str]]


def base_env(masked: bool = False) -> dict[str, str]:
    """What every pod's processes start from; `masked`: a smoke test, in which no process
    takes a GPU of this machine (only where there are any: Paddle's launcher takes any
    CUDA_VISIBLE_DEVICES for a GPU job)."""
    # (this Python environment's programs first, as an activated venv has them: a replica's
    # `torchrun` is the one installed beside aichor-iac, whatever the caller's PATH)
    path = os.pathsep.join(
        [str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")]
    )
    env = {
        "PATH": path,
        "HOME": os.environ.get("HOME", "/"),
    }
    if masked and glob.glob("/dev/nvidia[0-9]*"):
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def job_order(rendering: Rendering) -> dict[str, list[str]]:
    """Each Job's Jobs it is created after (its Pulumi dependencies that are Jobs; the other
    objects it depends on hold at once)."""
    jobs = {r.urn: r.inputs["metadata"]["name"] for r in rendering.resources if r.kind == "Job"}
    return {
        jobs[r.urn]: [jobs[d] for d in r.dependencies if d in jobs]
        for r in rendering.resources
        if r.urn in jobs
    }


def sweep_gates(blueprints: list[Blueprint]) -> dict[str, Gate]:
    """Each trial created unless its sweep has failed (`sweep_order.sweep_gate`), by name."""
    from ..k8s.context import Context

    entries = {}
    for blueprint in blueprints:
        if trial := blueprint.manifest.trial:
            entries[trial.sweep, trial.index] = Context(blueprint).entry_job()
    return {
        b.names.experiment: (
            trial.max_failed or 0,
            [entries[trial.sweep, i] for i in trial.counted],
        )
        for b in blueprints
        if (trial := b.manifest.trial) and trial.counted  # (counted: max_failed is set)
    }


def with_secrets(objects: list[dict[str, Any]], manifest: Any) -> list[dict[str, Any]]:
    """The rendered objects with the values of the Secrets given beside a custom resource
    (render redacts them; the local cluster's pods need them, and nothing here prints them)."""
    origin = manifest.spec.origin
    given = {
        c["metadata"]["name"]: c
        for c in (origin.companions if origin else ())
        if c["kind"] == "Secret"
    }
    return [
        {
            **o,
            **{
                k: given[o["metadata"]["name"]][k]
                for k in ("data", "stringData")
                if k in given[o["metadata"]["name"]]
            },
        }
        if o["kind"] == "Secret" and o["metadata"]["name"] in given
        else o
        for o in objects
    ]


def progress_hosts(objects: list[dict[str, Any]]) -> list[str]:
    """The hosts the experiments' replicas send progress reports to (their URLs' hosts)."""
    urls = {
        variable["value"]
        for o in objects
        if o["kind"] == "Job"
        for container in o["spec"]["template"]["spec"]["containers"]
        for variable in container.get("env", [])
        if variable["name"] == progress.ENV_URL
    }
    return sorted({url.split("/")[2].rsplit(":", 1)[0] for url in urls})


def check_entrypoints(objects: list[dict[str, Any]], entrypoints: dict[str, list[str]]) -> None:
    """LocalUnavailable naming each container that runs its image's entrypoint, where it is
    not given (no image is pulled here)."""
    unknown = []
    for job in (o for o in objects if o["kind"] == "Job"):
        spec = job["spec"]["template"]["spec"]
        for container in spec["containers"] + spec.get("initContainers", []):
            if "command" not in container and container["image"] not in entrypoints:
                unknown.append(
                    f"container {container['name']} of Job {job['metadata']['name']} runs "
                    f"the entrypoint of {container['image']}"
                )
    if unknown:
        raise LocalUnavailable(
            "no image is pulled here, and "
            + "; ".join(unknown)
            + ": say what it runs with --entrypoint IMAGE=COMMAND (docker inspect --format "
            "'{{json .Config.Entrypoint}}' IMAGE)"
        )


def capped_to(manifest: Any, replicas: int) -> Any:
    """The experiment with at most `replicas` replicas per group (pool; a jobset type's Jobs
    and pods per Job) and no GPUs (a Ray node then offers none), nothing else changed."""

    spec = manifest.spec

    def capped(group: Any) -> Any:
        accelerators = group.resources.accelerators.model_copy(update={"gpu": None})
        update = {
            "count": min(group.count, replicas),
            "resources": group.resources.model_copy(update={"accelerators": accelerators}),
        }
        if hasattr(group, "completions"):  # a jobset type: pods per Job too
            update["completions"] = min(group.completions, replicas)
            update["parallelisms"] = min(group.parallelisms, update["completions"])
        return group.model_copy(update=update)

    types = {  # (a jobset's own type names are the model's extra fields: updated alike)
        name: [capped(g) for g in group] if isinstance(group, list) else capped(group)
        for name, group in spec.types.present().items()
    }
    capped_spec = spec.model_copy(update={"types": spec.types.model_copy(update=types)})
    return manifest.model_copy(update={"spec": capped_spec})  # (with where it was read)


def secret_values(keys: list[str], hosts: Sequence[str] = ()) -> dict[str, str]:
    """Values for the experiment's generated Secret (Pulumi generates them on a cluster);
    the progress receiver's certificate names `hosts` (each experiment's entry pod)."""
    import secrets as random

    values = {key: random.token_hex(24) for key in keys}
    if progress.CERT in keys:
        with tempfile.TemporaryDirectory() as directory:
            made = reports.credentials(Path(directory), hosts)
            files = {progress.CA: made.ca, progress.CERT: made.cert, progress.KEY: made.key}
            values |= {key: path.read_text() for key, path in files.items()}
    if "ssh-privatekey" in keys:
        if shutil.which("ssh-keygen") is None:
            raise LocalUnavailable("an MPI experiment's key pair needs `ssh-keygen` (openssh)")
        with tempfile.TemporaryDirectory() as directory:
            key = Path(directory) / "id"
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True
            )
            values["ssh-privatekey"] = key.read_text()
            values["ssh-publickey"] = key.with_suffix(".pub").read_text()
    return values
