"""Trainer's TorchTune runtimes (v2.3.0, `manifests/base/runtimes/torchtune/`) and what its
torch plugin does for a trainer whose command is TorchTune's entry point `tune run`
(`torchtune.go`): the recipe and config chosen from the nodes, processes and GPUs and the
LoRA/QLoRA arguments, the rendezvous endpoint for several processes, the runtime's fixed paths
(output, tokenizer, checkpoint) kept, and what its webhook refuses.

Each runtime downloads a dataset and a model into the shared `initializer` claim (JobSet's
volumeClaimPolicies) before the trainer runs (`initializers`).
"""

from __future__ import annotations

from typing import Any

from ...problems import Problem
from .runtimes import ANCESTOR, NODE, TRAINER_PORT

ENTRYPOINT = ["tune", "run"]
MODELS = ("llama3_2/1B", "llama3_2/3B", "llama3_3/70B", "qwen2_5/1.5B")
MULTI_NODE = "llama3_3/70B"  # the one model Trainer fine-tunes on several nodes
IMMUTABLE = ("output_dir", "tokenizer.path", "checkpointer.checkpoint_dir", "tokenizer.merges_file")


MOUNT = [{"name": "initializer", "mountPath": "/workspace"}]  # the claim, in every container


def _job(name: str, ancestor: str, container: dict[str, Any], **more: Any) -> dict[str, Any]:
    """A replicated Job of one container, labelled with the step of the TrainJob it runs."""
    return {
        "name": name,
        **more,
        "template": {
            "metadata": {"labels": {ANCESTOR: ancestor}},
            "spec": {"template": {"spec": {"containers": [{**container, "volumeMounts": MOUNT}]}}},
        },
    }


def _initializer(step: str, uri: str) -> dict[str, Any]:
    container = {
        "name": step,
        "image": f"ghcr.io/kubeflow/trainer/{step}",
        "env": [{"name": "STORAGE_URI", "value": uri}],
    }
    return _job(step, step, container)


def _runtime(name: str, model_uri: str, config: str, tokenizer: list[str]) -> dict[str, Any]:
    """A TorchTune runtime as the manifests write it: the dataset and model initializers
    into a 20Gi claim, then the trainer (`tune run` on 2 GPUs) once both are complete."""
    command = [
        *ENTRYPOINT,
        f"--rdzv_endpoint=localhost:{TRAINER_PORT}",
        "full_finetune_distributed",
        "--config",
        config,
        "dataset=torchtune.datasets.instruct_dataset",
        "dataset.source=parquet",
        "dataset.data_dir=/workspace/dataset/data",
        "output_dir=/workspace/output",
        *tokenizer,
        "checkpointer.checkpoint_dir=/workspace/model",
    ]
    node = {
        "name": NODE,
        "image": "ghcr.io/kubeflow/trainer/torchtune-trainer",
        "command": command,
        "resources": {"limits": {"nvidia.com/gpu": 2}},
    }
    after = [
        {"name": "dataset-initializer", "status": "Complete"},
        {"name": "model-initializer", "status": "Complete"},
    ]
    claim = {
        "metadata": {"name": "initializer"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}},
    }
    jobs = [
        _initializer("dataset-initializer", "hf://tatsu-lab/alpaca"),
        _initializer("model-initializer", model_uri),
        _job(NODE, "trainer", node, dependsOn=after),
    ]
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torchtune"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {"volumeClaimPolicies": [{"templates": [claim]}], "replicatedJobs": jobs}
            },
        },
    }


LLAMA_TOKENIZER = ["tokenizer.path=/workspace/model/original/tokenizer.model"]
RUNTIMES = {
    "torchtune-llama3.2-1b": _runtime(
        "torchtune-llama3.2-1b",
        "hf://meta-llama/Llama-3.2-1B-Instruct",
        "llama3_2/1B_full",
        LLAMA_TOKENIZER,
    ),
    "torchtune-llama3.2-3b": _runtime(
        "torchtune-llama3.2-3b",
        "hf://meta-llama/Llama-3.2-3B-Instruct",
        "llama3_2/3B_full",
        LLAMA_TOKENIZER,
    ),
    "torchtune-qwen2.5-1.5b": _runtime(
        "torchtune-qwen2.5-1.5b",
        "hf://Qwen/Qwen2.5-1.5B-Instruct",
        "qwen2_5/1.5B_full",
        [
            "tokenizer.path=/workspace/model/vocab.json",
            "tokenizer.merges_file=/workspace/model/merges.txt",
        ],
    ),
}


def model(runtime: str) -> str:
    """Trainer's `getModelFromRuntimeRef`: `torchtune-llama3.2-1b` is `llama3_2/1B`."""
    fields = runtime.split("-")
    return f"{fields[1].replace('.', '_')}/{fields[2].upper()}" if len(fields) == 3 else ""


def recipe_and_config(
    runtime: str, nodes: int, per_node: int | None, gpus: int, args: list[str]
) -> tuple[str, str]:
    """Trainer's `getRecipeAndConfig` (`per_node` None is `auto`)."""
    recipe, suffix = "full_finetune_distributed", "_full"
    qlora, lora = _qlora(args), any("model.lora_attn_modules" in a for a in args)
    if nodes == 1 and (per_node == 1 or gpus == 1):
        recipe = "lora_finetune_single_device" if qlora or lora else "full_finetune_single_device"
        suffix = (
            "_qlora_single_device"
            if qlora
            else "_lora_single_device"
            if lora
            else "_full_single_device"
        )
    elif nodes == 1 and qlora:
        recipe, suffix = "lora_finetune_distributed", "_qlora"
    elif nodes == 1 and lora:
        recipe, suffix = "lora_finetune_distributed", "_lora"
    elif nodes > 1:
        suffix = "_full_multinode"
    return recipe, f"{model(runtime)}{suffix}"


def _qlora(args: list[str]) -> bool:
    """QLoRA: `model.quantize_base` true, unless `model.use_dora` is."""

    def enabled(item: str) -> bool:
        return any(
            item in key and value.strip().lower() == "true"
            for key, sep, value in (a.partition("=") for a in args)
            if sep
        )

    return not enabled("model.use_dora") and enabled("model.quantize_base")


def problems(
    runtime: str, nodes: int, per_node: int | None, gpus: int, args: list[str]
) -> list[Problem]:
    """What the torch plugin's webhook refuses of a `tune run` trainer (`validateTorchTune`)."""
    found, name = [], model(runtime)
    if name not in MODELS:
        reason = f"must have a supported pretrained model, invalid model configured: {name}"
        found.append(Problem("spec.runtimeRef.name", reason))
    if nodes > 1 and name != MULTI_NODE:
        found.append(Problem("spec.trainer.numNodes", f"must be 1 for {name} model"))
    _, config = recipe_and_config(runtime, nodes, per_node, gpus, args)
    if "_qlora" in config:
        if name == "qwen2_5/1.5B":
            found.append(
                Problem("spec.runtimeRef.name", f"QLoRA is not supported for {name} model")
            )
        if "_qlora_single_device" not in config and name in ("llama3_2/1B", "llama3_2/3B"):
            reason = f"must be auto or 1 for {name} model when using QLoRA"
            found.append(Problem("spec.trainer.numProcPerNode", reason))
            reason = f"must have gpu resource with value 1 for {name} model when using QLoRA"
            found.append(Problem("spec.trainer.resourcesPerNode", reason))
    lora = any("model.lora_attn_modules" in a for a in args) or _qlora(args)
    if nodes > 1 and lora:
        reason = "LoRA fine-tuning is not supported for multi-node training in TorchTune"
        found.append(Problem("spec.trainer.numNodes", reason))
    for i, arg in enumerate(args):
        if (key := arg.split("=", 1)[0]) in IMMUTABLE:
            reason = f"must not set immutable config '{key}': the runtime manages it"
            found.append(Problem(f"spec.trainer.args.{i}", reason))
    return found


def command(
    runtime: str,
    trainjob: str,
    nodes: int,
    per_node: str,
    gpus: int,
    args: list[str],
    own: list[Any],
) -> list[str]:
    """The trainer's command as the torch plugin completes `tune run`: the rendezvous endpoint
    (rank 0's host) for several processes, the recipe and config, and the runtime command's
    fixed paths (`own`)."""
    result = list(ENTRYPOINT)
    several = (per_node.isdigit() and int(per_node) > 1) or (per_node == "auto" and gpus > 1)
    if nodes > 1 or several:
        result.append(f"--rdzv_endpoint={trainjob}-{NODE}-0-0.{trainjob}:{TRAINER_PORT}")
    count = int(per_node) if per_node.isdigit() else None
    recipe, config = recipe_and_config(runtime, nodes, count, gpus, args)
    kept = [c for c in own if isinstance(c, str) and c.split("=")[0] in IMMUTABLE]
    return [*result, recipe, "--config", config, *kept]
