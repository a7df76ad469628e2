"""Kubeflow Trainer v2 TrainJobs in, the JobSet Trainer's controller would create out (v2.3.0):
on its standard `torch-distributed` runtime (known by name, no cluster) or a runtime given in
the same file; the trainer's image, command, args, env, nodes and resources on the `node`
container, and the torch plugin's PET_* env exactly as Trainer injects it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import schemas
import yaml
from conftest import ROOT, expand

from aichor_iac import doors, engine
from aichor_iac.local import run_experiment
from aichor_iac.problems import ManifestError
from aichor_iac.rules import limits
from aichor_iac.settings import Settings

INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def trainjob(runtime: str = "torch-distributed", **trainer: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj"},
        "spec": {"runtimeRef": {"name": runtime}, **({"trainer": trainer} if trainer else {})},
    }


def node_jobs(data: dict[str, Any] | str) -> dict[str, dict[str, Any]]:
    """The Jobs of a TrainJob (or of a YAML text: a TrainJob and its runtime), as Trainer's
    plugins make them: without `aichor:progress`'s variables and files, which Trainer gives
    only under its TrainJobStatus gate (tests/k8s/test_progress_objects.py)."""
    if isinstance(data, str):
        model = doors.parse(data, source="test.yaml")
        rendering = engine.expand(model, Settings(progress=False), stack="test", name="tj")
    else:
        rendering = expand(data, name="tj", progress=False)
    objects = rendering.objects
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "Job"}


def container(job: dict[str, Any], name: str = "node") -> dict[str, Any]:
    return next(c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def env(c: dict[str, Any]) -> dict[str, str]:
    return {
        e["name"]: e.get("value") or f"field:{e['valueFrom']['fieldRef']['fieldPath']}"
        for e in c.get("env", [])
    }


def test_torch_distributed_gives_trainers_jobset_and_pet_env() -> None:
    """One Job `<name>-node-0` of numNodes pods; the node container runs the trainer's image,
    command and args with its env, then PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK (the
    completion index), PET_MASTER_ADDR (rank 0's host) and PET_MASTER_PORT 29500 on its port."""
    data = trainjob(
        numNodes=3,
        image="ghcr.io/me/train:1",
        command=["torchrun"],
        args=["train.py", "--epochs", "2"],
        env=[{"name": "A", "value": "1"}],
    )
    (job,) = node_jobs(data).values()
    assert job["metadata"]["name"] == "tj-node-0"
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (3, 3)
    node = container(job)
    assert node["image"] == "ghcr.io/me/train:1"
    assert node["command"] == ["torchrun"] and node["args"] == ["train.py", "--epochs", "2"]
    assert env(node) == {
        "A": "1",
        "PET_NNODES": "3",
        "PET_NPROC_PER_NODE": "1",
        "PET_NODE_RANK": f"field:{INDEX}",
        "PET_MASTER_ADDR": "tj-node-0-0.tj",
        "PET_MASTER_PORT": "29500",
        "JOB_COMPLETION_INDEX": f"field:{INDEX}",
    }
    assert {"containerPort": 29500} in [
        {k: v for k, v in p.items() if k == "containerPort"} for p in node["ports"]
    ]
    assert job["spec"]["template"]["spec"]["subdomain"] == "tj"
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels["jobset.sigs.k8s.io/jobset-name"] == "tj"
    for obj in expand(data, name="tj").objects:
        schemas.validate(obj)
    assert limits.check(expand(data, name="tj").objects) == []


@pytest.mark.parametrize(
    ("trainer", "per_node"),
    [
        ({"numProcPerNode": 4}, "4"),
        ({"resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}}, "auto"),
        ({"resourcesPerNode": {"requests": {"cpu": "3"}, "limits": {"cpu": "8"}}}, "3"),
        ({"resourcesPerNode": {"limits": {"cpu": "1500m"}}}, "2"),
        ({}, "1"),
    ],
)
def test_procs_per_node_as_the_torch_plugin_counts_them(trainer: dict, per_node: str) -> None:
    """numProcPerNode, else `auto` with GPUs, else the CPUs (request, else limit, rounded up;
    at least 1)."""
    (job,) = node_jobs(trainjob(**(trainer or {"numNodes": 1}))).values()
    assert env(container(job))["PET_NPROC_PER_NODE"] == per_node


@pytest.mark.parametrize("runtime", ["torch-distributed", "jax-distributed", "xgboost-distributed"])
def test_without_a_trainer_the_plugins_add_nothing(runtime: str) -> None:
    """The torch, jax and xgboost plugins set their env and port on the trainer's container
    only for a TrainJob that has `spec.trainer` (v2.3.0): the runtime's own pods run as they
    are."""
    (job,) = node_jobs(trainjob(runtime)).values()
    assert set(env(container(job))) == {"JOB_COMPLETION_INDEX"}
    assert 29500 not in [p["containerPort"] for p in container(job).get("ports", [])]


@pytest.mark.parametrize(
    ("runtime", "trainer", "expected"),
    [
        (
            "jax-distributed",
            {"numNodes": 2},
            {
                "JAX_NUM_PROCESSES": "2",
                "JAX_PROCESS_ID": f"field:{INDEX}",
                "JAX_COORDINATOR_ADDRESS": "tj-node-0-0.tj:29500",
            },
        ),
        (
            "xgboost-distributed",
            {"numNodes": 3, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}},
            {
                "DMLC_TRACKER_URI": "tj-node-0-0.tj",
                "DMLC_TRACKER_PORT": "29500",
                "DMLC_TASK_ID": f"field:{INDEX}",
                "DMLC_NUM_WORKER": "6",  # a worker per GPU of every node
            },
        ),
        ("xgboost-distributed", {"numNodes": 3}, {"DMLC_NUM_WORKER": "3"}),
    ],
)
def test_the_jax_and_xgboost_plugins_env(runtime: str, trainer: dict, expected: dict) -> None:
    (job,) = node_jobs(trainjob(runtime, **trainer)).values()
    seen = env(container(job))
    assert {k: seen[k] for k in expected} == expected
    assert not any(k.startswith("PET_") for k in seen)


def test_resources_per_node_merge_into_the_runtimes() -> None:
    runtime = runtime_doc(resources={"limits": {"cpu": "2", "memory": "4Gi"}})
    data = trainjob("mine", resourcesPerNode={"limits": {"memory": "8Gi", "nvidia.com/gpu": 1}})
    data["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    job = node_jobs(text(runtime, data))["tj-node-0"]
    assert container(job)["resources"] == {
        "limits": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": 1}
    }


def runtime_doc(resources: dict | None = None, policy: dict | None = None) -> dict[str, Any]:
    """A TrainingRuntime `mine`: a `prepare` Job, then the trainer's `node` Job after it."""
    node = {"name": "node", "image": "busybox", "env": [{"name": "B", "value": "from runtime"}]}
    if resources:
        node["resources"] = resources
    prepare = {"name": "prepare", "image": "busybox", "command": ["sh", "-c", "true"]}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": "mine"},
        "spec": {
            "mlPolicy": {"numNodes": 2, **(policy if policy is not None else {"torch": {}})},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "prepare",
                            "template": {"spec": {"template": {"spec": {"containers": [prepare]}}}},
                        },
                        {
                            "name": "node",
                            "dependsOn": [{"name": "prepare", "status": "Complete"}],
                            "template": {
                                "metadata": {
                                    "labels": {
                                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
                                    }
                                },
                                "spec": {"template": {"spec": {"containers": [node]}}},
                            },
                        },
                    ]
                }
            },
        },
    }


def text(*documents: dict[str, Any]) -> str:
    return yaml.safe_dump_all(documents, sort_keys=False)


def expand_text(data: str) -> Any:
    return doors.parse(data, source="test.yaml")


def test_a_runtime_in_the_same_file_runs_with_its_order_and_policy() -> None:
    """A TrainingRuntime beside the TrainJob: its JobSet template (a `prepare` Job the trainer
    depends on) and its ML policy's node count, the trainer's env upserted over the
    runtime's."""
    data = trainjob("mine", env=[{"name": "B", "value": "from trainjob"}])
    data["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    found = node_jobs(text(data, runtime_doc()))
    assert sorted(found) == ["tj-node-0", "tj-prepare-0"]
    node = found["tj-node-0"]
    assert node["spec"]["completions"] == 2
    assert env(container(node))["B"] == "from trainjob"
    assert env(container(node))["PET_NNODES"] == "2"
    assert "pulumi.com/skipAwait" not in found["tj-prepare-0"]["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("data", "path", "message"),
    [
        (trainjob("nope"), "spec.runtimeRef.name", "no ClusterTrainingRuntime 'nope' is known"),
        (
            trainjob(env=[{"name": "PET_NNODES", "value": "2"}]),
            "spec.trainer.env.0",
            "reserved for the torch runtime",
        ),
        (trainjob(image="bad image"), "spec.trainer.image", "image reference"),
        (
            trainjob("xgboost-distributed", env=[{"name": "DMLC_TASK_ID", "value": "0"}]),
            "spec.trainer.env.0",
            "reserved for the xgboost runtime",
        ),
        (trainjob(numNodes=0), "spec.trainer.numNodes", ""),
        (
            {
                **trainjob(),
                "spec": {
                    "runtimeRef": {"name": "torch-distributed"},
                    "initializer": {"dataset": {"storageUri": "hf://a/b"}},
                },
            },
            "spec.runtimeRef",
            "must have dataset-initializer job",
        ),
        (
            {
                **trainjob(),
                "spec": {"runtimeRef": {"name": "torch-distributed"}, "managedBy": "x/y"},
            },
            "spec.managedBy",
            "ManagedBy must be trainer.kubeflow.org/trainjob-controller",
        ),
        (
            {
                **trainjob(),
                "spec": {"runtimeRef": {"name": "torch-distributed", "kind": "Deployment"}},
            },
            "spec.runtimeRef.kind",
            "TrainingRuntime",
        ),
    ],
)
def test_bad_trainjobs_are_refused_at_the_field(data: dict, path: str, message: str) -> None:
    with pytest.raises(ManifestError) as error:
        expand(data)
    found = {p.path: p.message for p in error.value.problems}
    assert path in found and message in found[path], found


def test_a_runtime_problem_is_at_the_runtimes_line() -> None:
    runtime = runtime_doc(policy={"flux": {}})
    data = trainjob("mine")
    data["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    with pytest.raises(ManifestError, match=r"mlPolicy.flux is not run from a TrainJob yet"):
        expand_text(text(data, runtime))
    broken = runtime_doc()
    broken["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "completionMode"
    ] = "NonIndexed"
    with pytest.raises(ManifestError) as error:
        expand_text(text(data, broken))
    (problem,) = error.value.problems
    assert (
        problem.path == "runtime: spec.template.spec.replicatedJobs.0.template.spec.completionMode"
    )
    assert problem.line is not None and problem.line > 10  # (in the runtime's document)


def test_runtime_patches_merge_as_trainers_strategic_merge() -> None:
    """runtimePatches, in order: a replicated Job's pods get the patch's service account,
    placement and volumes; its containers' mounts merge by path, the env of a container that
    is not the TrainJob's to give by name; other Jobs and the runtime's order stay."""
    data = trainjob("mine", numNodes=2)
    data["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    pod = {
        "serviceAccountName": "sa",
        "nodeSelector": {"pool": "train"},
        "volumes": [{"name": "data", "emptyDir": {}}],
        "containers": [
            {
                "name": "node",
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }
        ],
    }
    first = {"name": "node", "template": {"spec": {"template": {"spec": pod}}}}
    prepare = {"containers": [{"name": "prepare", "env": [{"name": "C", "value": "new"}]}]}
    first_prepare = {"name": "prepare", "template": {"spec": {"template": {"spec": prepare}}}}
    second = {
        "name": "node",
        "template": {"spec": {"template": {"spec": {"serviceAccountName": "sa2"}}}},
    }
    data["spec"]["runtimePatches"] = [
        {
            "manager": "a",
            "trainingRuntimeSpec": {
                "template": {"spec": {"replicatedJobs": [first, first_prepare]}}
            },
        },
        {
            "manager": "b",
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [second]}}},
        },
    ]
    found = node_jobs(text(data, runtime_doc()))
    assert sorted(found) == ["tj-node-0", "tj-prepare-0"]
    spec = found["tj-node-0"]["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "sa2" and spec["nodeSelector"] == {"pool": "train"}
    assert {"name": "data", "emptyDir": {}} in spec["volumes"]
    node = container(found["tj-node-0"])
    assert env(node)["B"] == "from runtime"
    assert {"name": "data", "mountPath": "/data"} in node["volumeMounts"]
    assert env(container(found["tj-prepare-0"], "prepare"))["C"] == "new"
    assert "serviceAccountName" not in found["tj-prepare-0"]["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("rjob", "path", "message"),
    [
        ({"name": "other"}, "replicatedJobs.0.name", "doesn't exist in the runtime"),
        (
            {
                "name": "node",
                "template": {"spec": {"template": {"spec": {"containers": [{"name": "sidecar"}]}}}},
            },
            "replicatedJobs.0.template.spec.template.spec.containers.0.name",
            "the runtime's node job does not have",
        ),
        (
            {
                "name": "node",
                "template": {
                    "spec": {
                        "template": {
                            "spec": {
                                "containers": [
                                    {"name": "node", "env": [{"name": "A", "value": "1"}]}
                                ]
                            }
                        }
                    }
                },
            },
            "replicatedJobs.0.template.spec.template.spec.containers.0.env",
            "in spec.trainer.env",
        ),
    ],
)
def test_what_trainers_webhook_refuses_of_a_patch(rjob: dict, path: str, message: str) -> None:
    data = trainjob(numNodes=2)
    spec = {"replicatedJobs": [rjob]}
    data["spec"]["runtimePatches"] = [
        {"manager": "a", "trainingRuntimeSpec": {"template": {"spec": spec}}}
    ]
    with pytest.raises(ManifestError) as error:
        expand(data)
    found = {p.path: p.message for p in error.value.problems}
    at = f"spec.runtimePatches.0.trainingRuntimeSpec.template.spec.{path}"
    assert at in found and message in found[at], found


def test_a_runtime_patch_outside_what_trainer_patches_is_refused() -> None:
    data = trainjob()
    patch = {"replicatedJobs": [{"name": "node", "template": {"spec": {"parallelism": 4}}}]}
    data["spec"]["runtimePatches"] = [
        {"manager": "a", "trainingRuntimeSpec": {"template": {"spec": patch}}}
    ]
    with pytest.raises(ManifestError) as error:
        expand(data)
    (problem,) = error.value.problems
    assert problem.path.startswith(
        "spec.runtimePatches.0.trainingRuntimeSpec.template.spec.replicatedJobs.0"
    )


def test_a_runtime_beside_another_resource_is_refused() -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "a",
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {
                                    "containers": [
                                        {"name": "a", "image": "busybox", "command": ["true"]}
                                    ]
                                }
                            }
                        }
                    },
                }
            ]
        },
    }
    with pytest.raises(ManifestError, match="beside the TrainJob that names it"):
        expand_text(text(jobset, runtime_doc()))


@pytest.mark.parametrize(
    ("policy", "scheduler", "spec"),
    [
        ({"coscheduling": {}}, "coscheduling", {"minMember": 3, "scheduleTimeoutSeconds": 60}),
        (
            {"coscheduling": {"scheduleTimeoutSeconds": 300}},
            "coscheduling",
            {"minMember": 3, "scheduleTimeoutSeconds": 300},
        ),
        ({"volcano": {}}, "volcano", {"minMember": 3}),
    ],
)
def test_a_runtimes_pod_group_policy_is_the_stacks_gang(
    policy: dict, scheduler: str, spec: dict
) -> None:
    """The runtime's podGroupPolicy names the gang scheduler: the stack's must be it (else the
    fix is said), and the PodGroup gets the plugin's settings beside the gang's minMember."""
    runtime = runtime_doc()  # (its prepare Job made Ready-gated: a gang starts all at once)
    runtime["spec"]["template"]["spec"]["replicatedJobs"][1]["dependsOn"][0]["status"] = "Ready"
    runtime["spec"]["podGroupPolicy"] = policy
    data = trainjob("mine")
    data["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    experiment = doors.parse(text(data, runtime), source="test.yaml")
    rendering = engine.expand(
        experiment, Settings(gang_scheduler=scheduler), stack="test", name="tj"
    )
    (group,) = [o for o in rendering.objects if o["kind"] == "PodGroup"]
    assert group["spec"] == spec
    other = "volcano" if scheduler == "coscheduling" else "coscheduling"
    for setting, fix in ((other, f"set it to {scheduler}"), ("none", f"({scheduler})")):
        with pytest.raises(ManifestError) as error:
            engine.expand(experiment, Settings(gang_scheduler=setting), stack="test", name="tj")
        (problem,) = error.value.problems
        assert problem.path == "spec.runtimeRef" and fix in problem.message


def test_a_gang_cannot_hold_a_job_that_must_complete_first() -> None:
    """runtime_doc's `prepare` must complete before `node` starts: no gang starts both."""
    data = trainjob("mine")
    data["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    experiment = doors.parse(text(data, runtime_doc()), source="test.yaml")
    with pytest.raises(ManifestError) as error:
        engine.expand(experiment, Settings(gang_scheduler="volcano"), stack="test", name="tj")
    (problem,) = error.value.problems
    assert problem.path == "aichor:gangScheduler" and "'prepare' must complete" in problem.message


def test_a_deadline_is_every_jobs() -> None:
    data = trainjob(numNodes=2)
    data["spec"]["activeDeadlineSeconds"] = 3600
    (job,) = node_jobs(data).values()
    assert job["spec"]["activeDeadlineSeconds"] == 3600


def test_a_runtime_alone_is_not_an_experiment() -> None:
    with pytest.raises(ManifestError, match="give the TrainJob that names it"):
        expand_text(text(runtime_doc()))


def run_locally(
    data: dict[str, Any] | list[dict[str, Any]],
    script: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> list[tuple[str, str]]:
    """The lines (pod, line) of a successful local run of a TrainJob (and the runtime beside
    it) next to an example's script (its interpreter and torchrun from this environment)."""
    shutil.copy(ROOT / "examples" / script, tmp_path)
    path = tmp_path / "trainjob.yaml"
    path.write_text(yaml.safe_dump_all(data if isinstance(data, list) else [data]))
    return run_experiment(path, name="tj", timeout=300)  # (else LocalRunFailed: its last lines)


def test_real_torch_distributed_trainjob_over_gloo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the local cluster: 3 nodes run torchrun from the PET_* env alone, all-reduce over
    gloo, and rank 0 saves the model (the checkpoint)."""
    data = trainjob(numNodes=3, command=["torchrun", "train.py", "--out", "/tmp"])
    lines = run_locally(data, "train.py", tmp_path, monkeypatch)
    assert ("tj-node-0-0", "model saved in /tmp") in lines
    for rank in range(3):
        assert (f"tj-node-0-{rank}", f"rank {rank} of 3 done") in lines


EXAMPLES = sorted((ROOT / "tests" / "trainer").glob("*.yaml"))
# The public examples refused, and the field each refusal names (docs/coming-from/trainer-v2.md).
REFUSED = {
    "flux.flux-interactive": "spec.runtimeRef.name",
    "flux.flux-runtime": "kind",
    "flux.lammps-train-gpus": "spec.runtimeRef.name",
    "flux.lammps-train-job": "spec.runtimeRef.name",
    "yaml.05-multi-step": "spec.runtimeRef",
}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_public_examples_render_or_are_refused_as_documented(path: Path) -> None:
    """kubeflow/trainer v2.3.0's YAML examples: valid objects with Trainer's JobSet, or the
    refusal REFUSED names."""
    if path.stem in REFUSED:
        with pytest.raises(ManifestError) as error:
            doors.load(path)
        assert REFUSED[path.stem] in {p.path for p in error.value.problems}
        return
    # (the volcano example's runtime asks for Volcano's gang: the stack schedules one)
    gang = {"gang_scheduler": "volcano"} if "volcano" in path.stem else {}
    objects = expand(path, **gang).objects
    for obj in objects:
        if obj["kind"] != "PodGroup":  # (Volcano's: not in Kubernetes' schemas)
            schemas.validate(obj)
    assert limits.check(objects) == []
    (job,) = [o for o in objects if o["kind"] == "Job"]
    assert "PET_MASTER_ADDR" in env(container(job))


def test_the_docs_list_exactly_the_refused_examples() -> None:
    text = (ROOT / "docs" / "coming-from" / "trainer-v2.md").read_text()
    section = text.split("## The examples that need a change")[1]
    assert sorted(re.findall(r"^\| `([a-z0-9.-]+)` \|", section, re.M)) == sorted(REFUSED)


def test_real_jax_distributed_trainjob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the local cluster: 3 nodes form one JAX cluster from the jax plugin's env alone
    (examples/train_jax.py: a global array over every process, its gradient all-reduced)."""
    data = trainjob("jax-distributed", numNodes=3, command=["python3", "-u", "train_jax.py"])
    lines = run_locally(data, "train_jax.py", tmp_path, monkeypatch)
    for i in range(3):
        said = [line for p, line in lines if p == f"tj-node-0-{i}"]
        assert any(line.startswith(f"process {i} of 3 on tj-node-0-{i}") for line in said), said
