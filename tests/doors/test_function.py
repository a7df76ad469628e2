"""An experiment from a Python function (`aichor_iac.experiment_from_function`): the function
travels with what it uses from its module as a program in a ConfigMap (no shell reads it),
becomes the custom resource the Kubeflow SDK would create, and runs: locally as a program, and
for real on the local cluster as a three-pod gloo all-reduce."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import fn_helpers
import pytest
import schemas
import yaml
from conftest import ROOT
from kube import LocalCluster, pod_env

import aichor_iac
from aichor_iac import engine, experiment_from_function
from aichor_iac.experiment import Experiment
from aichor_iac.problems import ManifestError
from aichor_iac.rules import limits
from aichor_iac.settings import Settings


def objects(model: Experiment, **settings: Any) -> list[dict[str, Any]]:
    return engine.expand(model, Settings(**settings), stack="test", name="exp").objects


def program_of(model: Experiment) -> tuple[str, str]:
    config_map = model.spec.origin.companions[0]
    return config_map["data"]["main.py"], config_map["data"]["args.json"]


def run_program(model: Experiment, tmp_path: Path) -> dict[str, Any]:
    """The shipped program run by a fresh Python, its files where the replicas mount them
    (a copy: /aichor/function is the mount point), outside this test's modules."""
    main, args = program_of(model)
    (tmp_path / "args.json").write_text(args)
    (tmp_path / "main.py").write_text(
        main.replace("/aichor/function/args.json", str(tmp_path / "args.json"))
    )
    result = subprocess.run(
        [sys.executable, "-I", str(tmp_path / "main.py")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"RANK": "7", "PATH": os.environ["PATH"]},
    )
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def test_the_function_travels_with_what_it_uses(tmp_path: Path) -> None:
    model = experiment_from_function(fn_helpers.report, args={"count": 2})
    seen = run_program(model, tmp_path)
    assert seen == {
        "prefix": "$HOME $(id) `id`",  # the user's `$`: never read by a shell
        "helper": 2.5 + 2 * 2.5,  # a class and a constant of the module
        "names": ["a", "b"],
        "rank": "7",
        "path": "a/b",  # a function imported from another module
        "json": "[1]",
        "socket": "socket",
        "sqrt": 4.0,
    }
    main, _ = program_of(model)
    assert "import join as joined" in main and "import json" in main  # (os.path's module)


@pytest.mark.parametrize(
    ("framework", "nodes", "kind", "jobs"),
    [
        ("pytorch", 3, "PyTorchJob", {"exp-master": 1, "exp-worker": 2}),
        ("pytorch", 1, "PyTorchJob", {"exp-master": 1}),
        ("xgboost", 2, "XGBoostJob", {"exp-master": 1, "exp-worker": 1}),
        ("tf", 2, "TFJob", {"exp-worker": 2}),
        ("jax", 2, "JAXJob", {"exp-worker": 2}),
        ("paddle", 2, "PaddleJob", {"exp-worker": 2}),
        ("ray", 3, "RayJob", {"exp-head": 1, "exp-workers": 2, "exp-submitter": 1}),
    ],
)
def test_each_framework_is_the_resource_the_sdk_would_create(
    framework: str, nodes: int, kind: str, jobs: dict[str, int]
) -> None:
    model = experiment_from_function(
        fn_helpers.report,
        framework=framework,
        num_nodes=nodes,
        resources_per_node={"cpu": 2, "memory": "4Gi", "gpu": 1},
        env={"A": "b", "LITERAL": "$(HOME) $x"},
        packages=["numpy>=1.26", "requests[socks]==2.32.3"],
    )
    assert model.spec.origin.kind == kind
    rendered = objects(model)
    for obj in rendered:
        schemas.validate(obj)
    assert limits.check(rendered) == []
    found = {o["metadata"]["name"]: o for o in rendered if o["kind"] == "Job"}
    assert {n: j["spec"]["completions"] for n, j in found.items()} == jobs
    config_map = next(o for o in rendered if o["kind"] == "ConfigMap")
    assert set(config_map["data"]) == {"main.py", "args.json"}
    node = next(iter(found.values()))["spec"]["template"]["spec"]
    main = node["containers"][0]
    assert {"name": "function", "mountPath": "/aichor/function", "readOnly": True} in main[
        "volumeMounts"
    ]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"name": "A", "value": "b"} in main["env"]
    assert {"name": "LITERAL", "value": "$$(HOME) $$x"} in main["env"]  # never expanded
    if framework == "ray":  # packages are the Ray job's runtime env
        submitter = found["exp-submitter"]["spec"]["template"]["spec"]["containers"][0]
        assert '{"runtime_env":{"pip":["numpy>=1.26",' in " ".join(submitter["command"])
    else:
        kept = next(iter(model.spec.origin.kept.values()))
        text = kept.main["command"][2]  # (the replica runs it after its wait for peers)
        assert "--target /tmp/aichor-packages 'numpy>=1.26' 'requests[socks]==2.32.3'" in text
        entry = "torchrun" if framework == "pytorch" and nodes > 1 else "python3 -u"
        assert f"exec {entry} /aichor/function/main.py" in text


def test_nproc_per_node_uses_torchrun_and_multiplies_the_world() -> None:
    model = experiment_from_function(fn_helpers.report, num_nodes=1, nproc_per_node=4)
    assert model.spec.origin.fields["nprocPerNode"] == "4"
    job = next(o for o in objects(model) if o["kind"] == "Job")
    assert "exec torchrun /aichor/function/main.py" in " ".join(
        job["spec"]["template"]["spec"]["containers"][0]["command"]
    )


@pytest.mark.parametrize(
    ("func", "options", "path", "message"),
    [
        (lambda: 1, {}, "func", "defined with `def`"),
        (
            fn_helpers.make_closure(),
            {},
            "make_closure.<locals>.inner",
            "uses secret from the function",
        ),
        (fn_helpers.uses_a_live_object, {}, "uses_a_live_object: OPEN", "TextIOWrapper object"),
        (fn_helpers.uses_a_partial, {}, "uses_a_partial: SHOUT", "not importable by name"),
        (fn_helpers.report, {"framework": "mxnet"}, "framework", "give one of pytorch"),
        (fn_helpers.report, {"num_nodes": 0}, "num_nodes", "1 or more"),
        (fn_helpers.report, {"framework": "tf", "nproc_per_node": 2}, "nproc_per_node", "PyTorch"),
        (fn_helpers.report, {"args": {"x": object()}}, "args", "must be JSON"),
        (fn_helpers.report, {"packages": ["--index-url=http://evil"]}, "packages.0", "requirement"),
        (fn_helpers.report, {"packages": ["numpy; rm -rf /"]}, "packages.0", "requirement"),
        (fn_helpers.report, {"packages": ["a b"]}, "packages.0", "requirement"),
        (fn_helpers.report, {"name": "Bad_Name"}, "metadata.name", "DNS-1035"),
    ],
)
def test_what_cannot_travel_or_run_is_a_clear_error(
    func: Any, options: dict[str, Any], path: str, message: str
) -> None:
    with pytest.raises(ManifestError) as error:
        experiment_from_function(func, **options)
    assert any(p.path == path and message in p.message for p in error.value.problems), str(
        error.value
    )


def test_rendering_is_deterministic() -> None:
    def render() -> str:
        model = experiment_from_function(fn_helpers.report, num_nodes=2)
        return yaml.safe_dump_all(objects(model))

    assert render() == render()


# --- for real: three pods of a PyTorch function -----------------------------------------------

real = pytest.mark.skipif(
    not LocalCluster.available(), reason="needs `ip netns` (root) for the local cluster"
)


@real
def test_the_notebook_example_runs_for_real() -> None:
    # examples/from_function.py: three nodes, its helper and constant shipped with it.
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location(
        "from_function", ROOT / "examples" / "from_function.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    env = pod_env(AICHOR_FOLLOW_INTERVAL="0.5")
    with LocalCluster(aichor_iac.render(example.experiment(), name="exp"), env) as cluster:
        results = cluster.run(timeout=300)
    outputs = "".join(r.stdout for r in results.values())
    for rank in range(3):  # 3 steps of gradient 1+2+3 = 6 over 3 ranks at rate 0.5
        assert f"rank {rank} of 3: weight -3.00, mean 1.5" in outputs, outputs[-3000:]
