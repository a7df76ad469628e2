"""A function in Kubeflow's v2 SDK shape (`TrainerClient().train(runtime=...,
trainer=CustomTrainer(func=..., func_args=..., num_nodes=..., resources_per_node=...,
packages_to_install=..., env=...))`): the TrainJob the SDK creates on the runtime, the function
shipped in a ConfigMap (mounted by a runtime patch) instead of pasted into a shell."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any

import fn_helpers
import pytest
import schemas
from conftest import ROOT
from kube import LocalCluster, pod_env

import aichor_iac
from aichor_iac import engine, experiment_from_trainer
from aichor_iac.problems import ManifestError
from aichor_iac.rules import limits


@dataclass
class CustomTrainer:
    """The v2 SDK's `kubeflow.trainer.CustomTrainer`, field for field."""

    func: Any
    func_args: dict[str, Any] | None = None
    image: str | None = None
    packages_to_install: list[str] | None = None
    pip_index_urls: list[str] = field(default_factory=lambda: ["https://pypi.org/simple"])
    num_nodes: int | None = None
    resources_per_node: dict[str, Any] | None = None
    env: dict[str, str] | None = None


def rendered(trainer: Any, **options: Any) -> dict[str, dict[str, Any]]:
    objects = engine.render(experiment_from_trainer(trainer, name="fn", **options), name="fn")
    for obj in objects:
        schemas.validate(obj)
    assert limits.check(objects) == []
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in objects}


def node(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return objects["Job/fn-node-0"]["spec"]["template"]["spec"]


def test_a_custom_trainer_is_the_trainjob_the_sdk_creates() -> None:
    """torch-distributed: one Job of num_nodes pods; the node container runs torchrun on the
    shipped program with the PET_* env after the trainer's, resources as the SDK gives them
    (requests and limits alike, `gpu` NVIDIA's), the runtime's image unless one is given."""
    trainer = CustomTrainer(
        func=fn_helpers.report,
        func_args={"count": 2},
        num_nodes=3,
        resources_per_node={"CPU": 2, "memory": "4Gi", "gpu": 1},
        packages_to_install=["numpy>=1.26"],
        env={"WANDB_MODE": "offline $(not expanded)"},
    )
    model = experiment_from_trainer(trainer, name="fn")
    assert (model.spec.origin.kind, model.spec.origin.jobset.runtime) == (
        "TrainJob",
        "torch-distributed",
    )
    objects = rendered(trainer)
    assert (
        objects["ConfigMap/fn-function"]["data"]["args.json"].replace(" ", "").replace("\n", "")
        == '{"count":2}'
    )
    job = objects["Job/fn-node-0"]["spec"]
    assert (job["completions"], job["parallelism"]) == (3, 3)
    pod = node(objects)
    container = pod["containers"][0]
    assert container["image"].startswith("pytorch/pytorch:")
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert container["command"][2].endswith("exec torchrun /aichor/function/main.py")
    assert "numpy>=1.26" in container["command"][2]
    names = [e["name"] for e in container["env"]]
    assert names[0] == "WANDB_MODE" and {"PET_NNODES", "PET_MASTER_ADDR"} <= set(names)
    assert container["env"][0]["value"] == "offline $$(not expanded)"
    asked = {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
    assert container["resources"] == {"limits": asked, "requests": asked}
    assert {"name": "function", "mountPath": "/aichor/function", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert {"name": "function", "configMap": {"name": "fn-function"}} in pod["volumes"]


def test_on_the_jax_runtime_the_program_runs_under_python() -> None:
    trainer = {"func": fn_helpers.report, "num_nodes": 2, "image": "ghcr.io/me/jax:1"}
    container = node(rendered(trainer, runtime="jax-distributed"))["containers"][0]
    assert container["command"][2].endswith("exec python3 -u /aichor/function/main.py")
    assert container["image"] == "ghcr.io/me/jax:1"
    assert "JAX_COORDINATOR_ADDRESS" in {e["name"] for e in container["env"]}


@pytest.mark.parametrize("runtime", ["deepspeed-distributed", "mlx-distributed"])
def test_on_an_mpi_runtime_mpirun_runs_the_program_on_every_rank(runtime: str) -> None:
    """The SDK's MPI entry point: the launcher runs `mpirun --hostfile /etc/mpi/hostfile` of a
    shell that installs the packages and runs the program, on every rank; the program is
    mounted on the launcher and on the nodes (where ranks run)."""
    trainer = {"func": fn_helpers.report, "num_nodes": 3, "packages_to_install": ["numpy"]}
    objects = rendered(trainer, runtime=runtime)
    launcher = objects["Job/fn-launcher-0"]["spec"]["template"]["spec"]["containers"][0]
    argv = launcher["command"][-1]  # (what the following wrapper runs)
    assert argv.startswith("mpirun --hostfile /etc/mpi/hostfile /bin/sh -c "), argv
    assert "exec python3 -u /aichor/function/main.py" in argv and "numpy" in argv
    for job in ("Job/fn-launcher-0", "Job/fn-node-0"):
        mounts = objects[job]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        assert "/aichor/function" in [m["mountPath"] for m in mounts], job
    assert objects["Job/fn-node-0"]["spec"]["parallelism"] == 2


@pytest.mark.parametrize(
    ("trainer", "options", "path", "message"),
    [
        ({"func": fn_helpers.report}, {"runtime": "mpi-distributed"}, "runtime", "give one of"),
        ({"func": None}, {}, "func", "give the training function"),
        (
            {"func": fn_helpers.report, "pip_index_urls": ["https://a/simple", "https://b/simple"]},
            {},
            "pip_index_urls",
            "one package index",
        ),
        (
            {"func": fn_helpers.report, "packages_to_install": ["--index-url=http://evil"]},
            {},
            "packages.0",
            "not a requirement",
        ),
    ],
)
def test_what_the_trainer_cannot_say_is_a_clear_error(
    trainer: dict, options: dict, path: str, message: str
) -> None:
    with pytest.raises(ManifestError) as error:
        experiment_from_trainer(trainer, **options)
    (problem,) = error.value.problems
    assert problem.path == path and message in problem.message


def test_the_notebook_function_runs_as_a_trainjob_for_real() -> None:
    """examples/from_function.py's function as a CustomTrainer on torch-distributed: three
    nodes, torchrun from the PET_* env alone, the gradient all-reduced over gloo."""
    spec = importlib.util.spec_from_file_location(
        "from_function", ROOT / "examples" / "from_function.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    trainer = CustomTrainer(
        func=example.train,
        func_args={"learning_rate": 0.5},
        num_nodes=3,
        resources_per_node={"cpu": 1, "memory": "2Gi"},
    )
    env = pod_env()
    objects = aichor_iac.render(experiment_from_trainer(trainer, name="ddp"), name="ddp")
    with LocalCluster(objects, env) as cluster:
        results = cluster.run(timeout=300)
    outputs = "".join(r.stdout for r in results.values())
    for rank in range(3):
        assert f"rank {rank} of 3: weight -3.00, mean 1.5" in outputs, outputs[-3000:]
