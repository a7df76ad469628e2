"""TrainJobs on Trainer's TorchTune runtimes (v2.3.0), known by name: the dataset and model
initializers into the shared claim, then `tune run` completed as Trainer's torch plugin does
(recipe and config from nodes, processes, GPUs and LoRA arguments; the rendezvous endpoint; the
runtime's fixed paths), and what its webhook refuses."""

from __future__ import annotations

from typing import Any

import pytest
import schemas
from conftest import expand
from test_trainjob import container, env, trainjob

from aichor_iac.doors.trainer.torchtune import recipe_and_config
from aichor_iac.problems import ManifestError
from aichor_iac.rules import limits

LORA = ["model.lora_attn_modules=['q_proj']"]
QLORA = ["model.quantize_base=True"]


@pytest.mark.parametrize(
    ("nodes", "per_node", "gpus", "args", "recipe", "suffix"),
    [  # kubeflow/trainer v2.3.0 torchtune_test.go, TestGetRecipeAndConfig
        (1, None, 1, [], "full_finetune_single_device", "_full_single_device"),
        (1, None, 1, LORA, "lora_finetune_single_device", "_lora_single_device"),
        (1, None, 1, QLORA, "lora_finetune_single_device", "_qlora_single_device"),
        (1, None, 4, [], "full_finetune_distributed", "_full"),
        (1, None, 4, LORA, "lora_finetune_distributed", "_lora"),
        (1, None, 4, QLORA, "lora_finetune_distributed", "_qlora"),
        (2, None, 8, [], "full_finetune_distributed", "_full_multinode"),
        (1, 1, 4, [], "full_finetune_single_device", "_full_single_device"),
        (1, 4, 4, [], "full_finetune_distributed", "_full"),
        (1, None, 4, [*QLORA, "model.use_dora=True"], "full_finetune_distributed", "_full"),
    ],
)
def test_recipe_and_config_as_trainer_chooses(
    nodes: int, per_node: int | None, gpus: int, args: list[str], recipe: str, suffix: str
) -> None:
    got = recipe_and_config("torchtune-llama3.2-1b", nodes, per_node, gpus, args)
    assert got == (recipe, f"llama3_2/1B{suffix}")


def tune(runtime: str = "torchtune-llama3.2-1b", **trainer: Any) -> dict[str, Any]:
    data = trainjob(runtime, command=["tune", "run"], **trainer)
    data["spec"]["initializer"] = {"dataset": {"storageUri": "hf://me/data"}}
    return data


def rendered(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    objects = expand(data, name="tj").objects
    for obj in objects:
        schemas.validate(obj)
    assert limits.check(objects) == []
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in objects}


def test_a_torchtune_runtime_initializes_then_runs_tune() -> None:
    """2 GPUs on one node: the initializers fill `initializer-tj`, the trainer then runs the
    distributed full fine-tune of the runtime's model with a rendezvous on rank 0, the
    runtime's output, tokenizer and checkpoint paths, the trainer's own args, and the torch
    env without the master's (TorchTune is told by argument)."""
    objects = rendered(tune(args=["epochs=1"]))
    assert sorted(k for k in objects if k.startswith(("Job/", "PersistentVolumeClaim/"))) == [
        "Job/tj-dataset-initializer-0",
        "Job/tj-model-initializer-0",
        "Job/tj-node-0",
        "PersistentVolumeClaim/initializer-tj",
    ]
    dataset = container(objects["Job/tj-dataset-initializer-0"], "dataset-initializer")
    assert env(dataset)["STORAGE_URI"] == "hf://me/data"
    model = container(objects["Job/tj-model-initializer-0"], "model-initializer")
    assert env(model)["STORAGE_URI"] == "hf://meta-llama/Llama-3.2-1B-Instruct"
    node = container(objects["Job/tj-node-0"])
    assert node["command"] == [
        "tune",
        "run",
        "--rdzv_endpoint=tj-node-0-0.tj:29500",
        "full_finetune_distributed",
        "--config",
        "llama3_2/1B_full",
        "output_dir=/workspace/output",
        "tokenizer.path=/workspace/model/original/tokenizer.model",
        "checkpointer.checkpoint_dir=/workspace/model",
    ]
    assert node["args"] == ["epochs=1"]
    assert {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK"} <= set(env(node))
    assert not {"PET_MASTER_ADDR", "PET_MASTER_PORT"} & set(env(node))
    assert env(node)["PET_NPROC_PER_NODE"] == "auto"


def test_one_gpu_is_a_single_device_run_without_rendezvous() -> None:
    objects = rendered(
        tune("torchtune-qwen2.5-1.5b", resourcesPerNode={"limits": {"nvidia.com/gpu": 1}})
    )
    command = container(objects["Job/tj-node-0"])["command"]
    assert command[:5] == [
        "tune",
        "run",
        "full_finetune_single_device",
        "--config",
        "qwen2_5/1.5B_full_single_device",
    ]
    assert "tokenizer.merges_file=/workspace/model/merges.txt" in command


@pytest.mark.parametrize(
    ("data", "path", "message"),
    [
        (tune(numNodes=2), "spec.trainer.numNodes", "must be 1 for llama3_2/1B model"),
        (tune(args=["output_dir=/mine"]), "spec.trainer.args.0", "immutable config 'output_dir'"),
        (
            tune("torchtune-qwen2.5-1.5b", args=QLORA),
            "spec.runtimeRef.name",
            "QLoRA is not supported for qwen2_5/1.5B",
        ),
        (tune(args=QLORA), "spec.trainer.numProcPerNode", "must be auto or 1"),
    ],
)
def test_what_the_torchtune_webhook_refuses(data: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(ManifestError) as error:
        expand(data)
    found = {p.path: p.message for p in error.value.problems}
    assert path in found and message in found[path], found
