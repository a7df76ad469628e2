"""A TrainJob's dataset and model initializers (Trainer v2.3.0): the runtime's initializer Jobs
get the TrainJob's storageUri (STORAGE_URI), env and secretRef (envFrom), run before the trainer
(the runtime's dependsOn Complete) and share the `initializer` claim with it (JobSet's
volumeClaimPolicies); an initializer the runtime cannot run is refused as Trainer's webhook
refuses it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_trainjob import container, env, run_locally, trainjob

from aichor_iac import doors, engine
from aichor_iac.problems import ManifestError
from aichor_iac.settings import Settings

MOUNT = [{"name": "initializer", "mountPath": "/workspace"}]


def step(job: str, command: str = "true", **more: Any) -> dict[str, Any]:
    """An initializer's replicated Job as Trainer's runtimes write it."""
    main = {"name": job, "image": "python:3.11", "command": ["/bin/sh", "-c", command]}
    pod = {"containers": [{**main, "volumeMounts": MOUNT, **more}]}
    return {
        "name": job,
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": job}},
            "spec": {"template": {"spec": pod}},
        },
    }


def runtime(*steps: dict[str, Any], command: str = "true") -> dict[str, Any]:
    """A TrainingRuntime `init`: the steps, then the trainer's `node` Job once they are
    complete, all sharing the `initializer` claim."""
    node = step("node", command)
    node["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] = (
        "trainer"
    )
    node["dependsOn"] = [{"name": s["name"], "status": "Complete"} for s in steps]
    claim = {
        "metadata": {"name": "initializer"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": "init"},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "volumeClaimPolicies": [{"templates": [claim]}],
                    "replicatedJobs": [*copy.deepcopy(steps), node],
                }
            },
        },
    }


def on(given: dict[str, Any], initializer: dict[str, Any], **trainer: Any) -> list[dict[str, Any]]:
    data = trainjob("init", **trainer)
    data["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    data["spec"]["initializer"] = initializer
    return [data, given]


def render(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    text = yaml.safe_dump_all(documents, sort_keys=False)
    model = doors.parse(text, source="t.yaml")  # (as Trainer's plugins make it: node_jobs)
    objects = engine.expand(model, Settings(progress=False), stack="test", name="tj").objects
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in objects}


def test_initializers_get_the_trainjobs_source_and_run_first() -> None:
    objects = render(
        on(
            runtime(
                step("dataset-initializer", env=[{"name": "X", "value": "runtime"}]),
                step("model-initializer"),
            ),
            {
                "dataset": {
                    "storageUri": "hf://tatsu-lab/alpaca",
                    "env": [{"name": "X", "value": "mine"}],
                    "secretRef": {"name": "hf-token"},
                },
                "model": {"storageUri": "hf://meta-llama/Llama-3.2-1B"},
            },
            numNodes=2,
        )
    )
    dataset = container(objects["Job/tj-dataset-initializer-0"], "dataset-initializer")
    assert env(dataset) == {
        "X": "mine",
        "STORAGE_URI": "hf://tatsu-lab/alpaca",
        "JOB_COMPLETION_INDEX": "field:metadata.annotations['batch.kubernetes.io/job-completion-index']",
    }
    assert [e["name"] for e in dataset["env"]][:2] == ["X", "STORAGE_URI"]  # (upserted in place)
    assert dataset["envFrom"] == [{"secretRef": {"name": "hf-token"}}]
    model = container(objects["Job/tj-model-initializer-0"], "model-initializer")
    assert env(model)["STORAGE_URI"] == "hf://meta-llama/Llama-3.2-1B"
    for job in ("dataset-initializer", "model-initializer", "node"):
        spec = objects[f"Job/tj-{job}-0"]["spec"]["template"]["spec"]
        claims = [v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"]]
        assert claims == ["initializer-tj"], job
        labels = objects[f"Job/tj-{job}-0"]["spec"]["template"]["metadata"]["labels"]
        assert "trainer.kubeflow.org/trainjob-ancestor-step" not in labels
    assert "PersistentVolumeClaim/initializer-tj" in objects
    assert objects["Job/tj-node-0"]["spec"]["parallelism"] == 2


@pytest.mark.parametrize(
    ("steps", "initializer", "message"),
    [
        ((), {"dataset": {}}, "must have dataset-initializer job"),
        ((step("model-initializer"),), {"model": {}, "dataset": {}}, "dataset-initializer job"),
        (
            (step("dataset-initializer", name="other"),),
            {"dataset": {}},
            "must have container with name - dataset-initializer",
        ),
        (
            (step("dataset-initializer", volumeMounts=[]),),
            {"dataset": {}},
            "must have volumeMount with name - initializer",
        ),
    ],
)
def test_what_the_webhook_refuses(
    steps: tuple[dict[str, Any], ...], initializer: dict[str, Any], message: str
) -> None:
    with pytest.raises(ManifestError) as error:
        render(on(runtime(*steps), initializer))
    found = {p.path: p.message for p in error.value.problems}
    assert message in found.get("spec.runtimeRef", ""), found


def test_real_initializer_downloads_before_the_trainer_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the local cluster: the dataset initializer writes what STORAGE_URI names into the
    shared claim and ends; only then does each of the trainer's 2 nodes start, and reads it."""
    fetch = 'mkdir -p /workspace/dataset && echo "rows from $STORAGE_URI" > /workspace/dataset/data'
    read = 'echo "node $PET_NODE_RANK read: $(cat /workspace/dataset/data)"'
    documents = on(
        runtime(step("dataset-initializer", fetch), command=read),
        {"dataset": {"storageUri": "hf://tatsu-lab/alpaca"}},
        numNodes=2,
    )
    lines = run_locally(documents, "train.py", tmp_path, monkeypatch)
    for rank in range(2):
        assert (f"tj-node-0-{rank}", f"node {rank} read: rows from hf://tatsu-lab/alpaca") in lines
