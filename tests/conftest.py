"""The mock harness: every test renders through `aichor_iac.engine`, which runs the real
components under Pulumi's mock monitor (DESIGN §7) and records each resource with its inputs
(normalised: camelCase Kubernetes JSON, integers as integers, secrets redacted), parent,
dependencies and options. Each run calls `pulumi.runtime.set_mocks` afresh."""

from __future__ import annotations

import ast
import atexit
import copy
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube import PRINT_ENV, process_env

from aichor_iac import doors, engine
from aichor_iac.k8s import shell
from aichor_iac.problems import ManifestError
from aichor_iac.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
# As Pulumi's language host runs a program (pulumi-language-python-exec, the Automation API's
# server: `_suppress_unobserved_task_logging`): a program that fails (a sweep's gate) leaves
# futures whose error nothing retrieves, and asyncio's log of them must not format their
# tracebacks whenever they are collected (CPython 3.11.7 fails an `ast.parse` it interrupts).
logging.getLogger("asyncio").setLevel(logging.CRITICAL)
# CPython 3.11.7 keeps one AST constructor depth per interpreter, not per thread (gh-106905,
# mended in 3.11.8): an `ast.parse` in one thread (a traceback's carets, pytest's unraisable
# hook, an import) while another's runs fails one of them with "SystemError: AST constructor
# recursion depth mismatch" (once in a hypothesis test, beside the engine's threads). The
# suite's processes parse one at a time (re-entrant: a collection in a parse may parse).
_parse, _parsing = ast.parse, threading.RLock()


def _parse_alone(*args: Any, **kwargs: Any) -> ast.AST:
    with _parsing:
        return _parse(*args, **kwargs)


ast.parse = _parse_alone  # type: ignore[assignment]
# Every `run --local` keeps its record (issue 66): the suite's, apart from the user's (each
# process of the suite, and what it starts, in a folder of its own)
os.environ["AICHOR_IAC_HISTORY"] = tempfile.mkdtemp(prefix="aichor-iac-history-")
atexit.register(shutil.rmtree, os.environ["AICHOR_IAC_HISTORY"], ignore_errors=True)
ALL_EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
# The examples of one experiment each, which most tests take one at a time: examples/sweep.yaml
# holds a sweep's six trials (the program's, the render corpus's and the docs' tests take it).
EXAMPLES = [p for p in ALL_EXAMPLES if "\nkind: Experiment\n" not in p.read_text()]
# The AIchor manifests among them (the custom resources beside them are a PyTorchJob, a TrainJob)
AICHOR_EXAMPLES = [p for p in EXAMPLES if "\nkind: AIchorManifest\n" in p.read_text()]
# The public examples of kubeflow/trainer and kubeflow/mpi-operator, unchanged.
KUBEFLOW_EXAMPLES = sorted((ROOT / "tests" / "kubeflow").glob("*.yaml"))
RESOURCES = {"cpus": 4, "ramRatio": 3}


def pytorch_manifest(masters: int | None = 1, workers: int = 2, **spec: Any) -> dict[str, Any]:
    """A PyTorch manifest as data: `masters=None` gives 0.2.3's single worker group."""
    types: dict[str, Any] = {}
    if masters is not None:
        types["Master"] = {"count": masters, "resources": dict(RESOURCES)}
    types["Worker"] = {"count": workers, "resources": dict(RESOURCES)}
    return {
        "kind": "AIchorManifest",
        "apiVersion": "0.2.2" if masters is not None else "0.2.3",
        "spec": {
            "operator": "pytorch",
            "image": "pytorch/pytorch:2.3.1",
            "command": "python train.py",
            "types": types,
            **spec,
        },
    }


def restarting_jobset(
    container: dict[str, Any], name: str = "js", job: str = "node", replicas: int = 1, **more: Any
) -> dict[str, Any]:
    """A JobSet of one replicated Job of `container`, restarted as a group (`maxRestarts`, 1
    unless `more` says) when one of its pods fails."""
    template = {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}
    replicated = {"name": job, "replicas": replicas, "template": {"spec": template}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"failurePolicy": {"maxRestarts": 1, **more}, "replicatedJobs": [replicated]},
    }


def with_resources(data: dict[str, Any], **resources: Any) -> dict[str, Any]:
    """A copy of a manifest whose every group has these resources added."""
    data = copy.deepcopy(data)
    for group in data["spec"]["types"].values():
        group["resources"].update(resources)
    return data


def expand(
    data: dict[str, Any] | str | Path, name: str = "exp", **settings: Any
) -> engine.Rendering:
    if isinstance(data, dict):
        model = doors.parse(yaml.safe_dump(data, sort_keys=False), source="test.yaml")
    else:
        model = doors.load(data)
    return engine.expand(model, Settings(**settings), stack="test", name=name)


def replica_envs(data: dict[str, Any], **settings: Any) -> list[tuple[str, int, dict[str, str]]]:
    """(role, index, environment the command sees) for every replica, computed from the
    rendered Jobs as Kubernetes would and by running the command (set to `PRINT_ENV`)."""
    data = copy.deepcopy(data)
    data["spec"]["command"] = PRINT_ENV
    result = []
    for job in (o for o in expand(data, **settings).objects if o["kind"] == "Job"):
        role = job["metadata"]["labels"]["training.kubeflow.org/replica-type"]
        for i in range(job["spec"]["completions"]):
            env = process_env(job, i, extra_env={"AICHOR_FOLLOW_INTERVAL": "0.05"})
            result.append((role, i, env))
    return result


def wait_of(pod_spec: dict[str, Any]) -> str:
    """The wait for peers that runs before the main container's command ("" if none)."""
    script = pod_spec["containers"][0]["command"][2]
    if shell.WAIT_BEGIN not in script:
        return ""
    return script.split(shell.WAIT_BEGIN, 1)[1].split(shell.WAIT_END, 1)[0]


def by_name(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in objects}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that needs the local cluster (skipped without `ip netns`: kube.NEEDS_CLUSTER and
    the real runs' own conditions, each naming it) runs real pods: it is slow too."""
    for item in items:
        if any("ip netns" in m.kwargs.get("reason", "") for m in item.iter_markers("skipif")):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def render() -> Callable[..., dict[str, dict[str, Any]]]:
    """render(manifest_data_or_path, name=..., **settings) -> {"Kind/name": object}."""
    return lambda data, **kwargs: by_name(expand(data, **kwargs).objects)


def specs(cr: dict[str, Any]) -> dict[str, Any]:
    """A Kubeflow custom resource's replica specs."""
    return next(v for k, v in cr["spec"].items() if k.endswith("ReplicaSpecs"))


def runnable(path: Path) -> tuple[dict[str, Any], set[str]]:
    """A public example as data, with the documented fixes its errors ask for applied (no
    v1alpha1 template fields), and which."""
    cr, fixes = yaml.safe_load(path.read_text()), set()
    for _ in range(3):  # the front door's errors first, then the plan's
        try:
            expand(cr)
            return cr, fixes
        except ManifestError as error:
            text = str(error)
        for replica in specs(cr).values():
            if "template.apiVersion: unknown field" in text:
                del replica["template"]["apiVersion"], replica["template"]["kind"]
                fixes.add("v1alpha1 template")
    raise AssertionError(f"{path.name} still fails: {text}")


@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory: pytest.TempPathFactory):
    """A real MLflow tracking server on 127.0.0.1 (SQLite), for this test process."""
    from stores import mlflow_server, running

    with running(mlflow_server(tmp_path_factory.mktemp("mlflow"))) as server:
        yield server


@pytest.fixture(scope="session")
def s3_store(tmp_path_factory: pytest.TempPathFactory):
    """A real S3-compatible server on 127.0.0.1 (moto's), for this test process."""
    from stores import running, s3_server

    with running(s3_server(tmp_path_factory.mktemp("s3"))) as server:
        yield server


@pytest.fixture(scope="session")
def azurite_store(tmp_path_factory: pytest.TempPathFactory):
    """A real Azure Blob Storage emulator (Azurite) on 127.0.0.1, for this test process."""
    from stores import AZURITE, azurite_server, running

    if not AZURITE.exists():
        pytest.skip(f"no {AZURITE}: make test installs Azurite with npm (none here?)")
    with running(azurite_server(tmp_path_factory.mktemp("azurite"))) as server:
        yield server
