"""AIchor manifests as people write them: the keys and operators of real manifests
(`jobset`, `batchjob`, `debug`, `activeDeadlineSeconds`, `engineName`, `spec.env` as a map,
head-only kuberay clusters, any `builder`), one refusal for other platforms, and `validate`
deciding exactly what `render` decides."""

from __future__ import annotations

import pytest
import yaml
from conftest import expand, pytorch_manifest, replica_envs

from aichor_iac import cli
from aichor_iac.doors import parse
from aichor_iac.problems import ManifestError

R = {"cpus": 1, "ramRatio": 2}
HOST = "exp-{job}-{i}.exp.default.svc.cluster.local"


def jobset(**types: dict) -> dict:
    return {
        "kind": "AIchorManifest",
        "apiVersion": "0.2.1",
        "spec": {"operator": "jobset", "image": "img", "command": "run", "types": types},
    }


def problems(text: str) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        parse(text, source="m.yaml")
    return str(caught.value).splitlines()


# --- other platforms --------------------------------------------------------------------------

VERTEX = """\
kind: AIchorManifest
apiVersion: 0.2.2
spec:
  operator: vertexai
  image: europe-docker.pkg.dev/p/r/trainer:latest
  command: python train.py
  workerPoolSpecs:
    - machineSpec: {machineType: n1-standard-8, acceleratorType: NVIDIA_TESLA_T4}
      replicaCount: 1
"""
SLURM = """\
kind: AIchorManifest
spec:
  operator: slurm
  job:
    nodes: 2
    ntasks-per-node: 4
    script: srun python train.py
"""


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (VERTEX, "m.yaml:4: spec.operator: 'vertexai' targets Google Cloud's Vertex AI"),
        (SLURM, "m.yaml:3: spec.operator: 'slurm' targets a Slurm cluster"),
    ],
)
def test_manifests_for_other_platforms_get_one_clear_refusal(text, line):
    lines = problems(text)
    assert len(lines) == 1 and lines[0].startswith(line)
    assert "another platform" in lines[0] and "jobset" in lines[0]


# --- keys of real manifests -------------------------------------------------------------------


def jobs(data: dict, **settings) -> list[dict]:
    return [o for o in expand(data, **settings).objects if o["kind"] == "Job"]


@pytest.mark.parametrize(
    ("spec", "deadline"),
    [
        ({"activeDeadlineSeconds": 3600}, 3600),
        ({"activeDeadlineSeconds": 3600, "timeout": "2h"}, 7200),  # timeout supersedes it
        ({}, None),
    ],
)
def test_active_deadline_seconds_is_the_older_timeout(spec, deadline):
    for job in jobs(pytorch_manifest(1, 1, **spec)):
        assert job["spec"].get("activeDeadlineSeconds") == deadline


def test_engine_name_is_recorded_as_a_label_on_every_object_and_pod():
    objects = expand(pytorch_manifest(1, 1, engineName="kyber-gpu")).objects
    for obj in objects:
        assert obj["metadata"]["labels"]["aichor.ai/engine-name"] == "kyber-gpu"
    for job in (o for o in objects if o["kind"] == "Job"):
        assert job["spec"]["template"]["metadata"]["labels"]["aichor.ai/engine-name"] == "kyber-gpu"


def test_env_as_a_map_reaches_every_replica_as_text():
    data = pytorch_manifest(1, 1, env={"NCCL_DEBUG": "INFO", "EPOCHS": 3, "FAST": True})
    for _, _, env in replica_envs(data):
        assert (env["NCCL_DEBUG"], env["EPOCHS"], env["FAST"]) == ("INFO", "3", "true")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"1BAD": "x"}, "spec.env.0.name: String should match pattern"),
        ({"RANK": "3"}, "spec.env.0.name: RANK is set by aichor-iac for operator 'pytorch'"),
        (
            {"A": {"nested": 1}},
            "spec.env.0.value: must be text, not a mapping: give text (quote it to keep it text: '...')",
        ),
    ],
)
def test_env_map_errors_name_the_entry(env, expected):
    text = yaml.safe_dump(pytorch_manifest(1, 1, env=env))
    with pytest.raises(ManifestError) as caught:
        from aichor_iac import planning

        planning.blueprint(parse(text, source="m.yaml"))
    assert any(expected in line for line in str(caught.value).splitlines())


@pytest.mark.parametrize(
    "builder",
    [
        None,
        {"image": "image", "context": "pytorch-demo", "dockerfile": "./Dockerfile"},
        {"image": "image", "dockerfile": "./Dockerfile", "context": ".", "buildArgs": {"A": "1"}},
        {"dockerfile": "./build/ray.Dockerfile", "context": "smoke-test", "target": "runtime"},
    ],
)
def test_any_builder_block_is_accepted_and_ignored(builder):
    data = {**pytorch_manifest(1, 1), "builder": builder}
    assert len(jobs(data)) == 2


@pytest.mark.parametrize(
    "debug",
    [
        {"jupyter": False},
        {"vscode": {"enabled": False, "path": "/aichor/code", "provider": "github"}},
    ],
)
def test_debug_blocks_that_are_off_are_accepted(debug):
    assert len(jobs(pytorch_manifest(1, 1, debug=debug))) == 2


@pytest.mark.parametrize(
    ("operator", "types", "role"),
    [
        ("pytorch", {"Master": {"resources": R}, "Worker": {"resources": R}}, "master"),
        ("jax", {"Worker": {"count": 2, "resources": R}}, "worker"),
        ("kuberay", {"Head": {"resources": R}}, "head"),
        (
            "ray",
            {
                "Head": {"resources": R},
                "Workers": [{"name": "w", "count": 1, "resources": R}],
                "Job": {"resources": R},
            },
            "head",
        ),
    ],
)
def test_jupyter_runs_beside_the_entry_point_with_a_generated_token(operator, types, role):
    data = {
        "spec": {
            "operator": operator,
            "image": "img",
            "command": "run",
            "debug": {"jupyter": True},
            "types": types,
        }
    }
    rendering = expand(data)
    objects = {f"{o['kind']}/{o['metadata']['name']}": o for o in rendering.objects}
    for name, obj in objects.items():
        if obj["kind"] != "Job":
            continue
        init = obj["spec"]["template"]["spec"].get("initContainers", [])
        jupyters = [c for c in init if c["name"] == "jupyter"]
        assert bool(jupyters) == (name == f"Job/exp-{role}")
        if jupyters:
            (sidecar,) = jupyters
            assert sidecar["restartPolicy"] == "Always" and sidecar["image"] == "img"
            assert "readinessProbe" not in sidecar  # never holds the pod (the head's gate) back
            assert sidecar["env"] == [
                {
                    "name": "JUPYTER_TOKEN",
                    "valueFrom": {"secretKeyRef": {"name": "exp-secret", "key": "jupyter-token"}},
                }
            ]
    service = objects["Service/exp-jupyter"]["spec"]
    assert service["selector"]["app.kubernetes.io/component"] == role
    assert service["selector"]["batch.kubernetes.io/job-completion-index"] == "0"
    assert objects["Secret/exp-secret"]["stringData"]["jupyter-token"] == "[secret]"
    assert rendering.outputs["jupyterToken"] == "[secret]"
    assert "kubectl port-forward -n default svc/exp-jupyter 8888" in rendering.outputs["jupyter"]
    assert "mock-password" not in repr(rendering.objects) + repr(rendering.outputs)


def test_vscode_sessions_are_refused_with_what_to_use_instead():
    text = yaml.safe_dump(pytorch_manifest(1, 1, debug={"vscode": {"enabled": True}}))
    (line,) = problems(text)
    assert "spec.debug.vscode.enabled: VS Code sessions are AIchor's own service" in line
    assert "kubectl exec" in line


@pytest.mark.parametrize(
    "workers", [None, [], [{"name": "cpu-workers", "count": 0, "resources": R}]]
)
def test_kuberay_head_only_cluster(workers):
    types = {"Head": {"resources": R}}
    if workers is not None:
        types["Workers"] = workers
    data = {"spec": {"operator": "kuberay", "image": "img", "command": "run", "types": types}}
    rendering = expand(data)
    assert [o["metadata"]["name"] for o in rendering.objects if o["kind"] == "Job"] == [
        "exp-head",
        "exp-submitter",
    ]
    assert rendering.outputs["expectedNodeCount"] == 1


def test_ray_still_needs_a_worker_pool():
    data = {
        "spec": {
            "operator": "ray",
            "image": "i",
            "command": "c",
            "types": {"Head": {"resources": R}, "Job": {"resources": R}},
        }
    }
    (line,) = problems(yaml.safe_dump(data))
    assert "spec.types.Workers: give at least one worker pool" in line


# --- jobset and batchjob ----------------------------------------------------------------------


def test_jobset_types_become_jobs_named_like_jobsets_with_aichor_variables():
    data = jobset(
        master={"resources": R},
        **{"worker-heavy": {"count": 2, "completions": 3, "parallelisms": 2, "resources": R}},
    )
    rendered = {j["metadata"]["name"]: j["spec"] for j in jobs(data)}
    assert {n: (s["completions"], s["parallelism"]) for n, s in rendered.items()} == {
        "exp-master-0": (1, 1),
        "exp-worker-heavy-0": (3, 2),
        "exp-worker-heavy-1": (3, 2),
    }
    assert all(s["completionMode"] == "Indexed" for s in rendered.values())
    seen = {}
    for role, index, env in replica_envs(data):
        seen[(role, index)] = {
            k: env[k]
            for k in (
                "JOB_INDEX",
                "JOB_GLOBAL_INDEX",
                "GLOBAL_REPLICAS",
                "REPLICATED_JOB_NAME",
                "REPLICATED_JOB_REPLICAS",
                "JOB_COMPLETION_INDEX",
            )
        }
        assert env["HOSTNAME"] == f"exp-{role}-{index}"
    heavy = {
        "GLOBAL_REPLICAS": "3",
        "REPLICATED_JOB_NAME": "worker-heavy",
        "REPLICATED_JOB_REPLICAS": "2",
    }
    expected = {
        ("master-0", 0): {
            "JOB_INDEX": "0",
            "JOB_GLOBAL_INDEX": "0",
            "GLOBAL_REPLICAS": "3",
            "REPLICATED_JOB_NAME": "master",
            "REPLICATED_JOB_REPLICAS": "1",
            "JOB_COMPLETION_INDEX": "0",
        }
    }
    for j in range(2):
        for i in range(3):
            expected[(f"worker-heavy-{j}", i)] = {
                **heavy,
                "JOB_INDEX": str(j),
                "JOB_GLOBAL_INDEX": str(j + 1),
                "JOB_COMPLETION_INDEX": str(i),
            }
    assert seen == expected


def test_jobset_is_complete_when_every_job_is():
    data = jobset(a={"count": 2, "resources": R}, b={"resources": R})
    for job in jobs(data, wait="complete"):
        assert "pulumi.com/skipAwait" not in (job["metadata"].get("annotations") or {})
    rendering = expand(data)
    assert "-l training.kubeflow.org/job-name=exp" in rendering.outputs["logs"]


@pytest.mark.parametrize(
    ("types", "expected"),
    [
        ({"Worker_1": {"resources": R}}, "spec.types: jobset type names are lowercase letters"),
        ({"w": {"count": 0, "resources": R}}, "spec.types: give at least one type with count ≥ 1"),
        (
            {"w": {"completions": 0, "resources": R}},
            "spec.types.w.completions: Input should be greater than or equal to 1",
        ),
        (
            {"w": {"parallelism": 2, "resources": R}},
            "spec.types.w.parallelism: unknown key 'parallelism'; did you mean 'parallelisms'?",
        ),
    ],
)
def test_bad_jobset_types(types, expected):
    lines = problems(yaml.safe_dump(jobset(**types)))
    assert any(expected in line for line in lines), lines


def test_wait_ready_does_not_wait_for_independent_pods():
    # jobset and batchjob pods run a few at a time and end on their own: "all Ready" may never
    # be seen, so `ready` awaits none of their Jobs (`complete` awaits them all).
    data = jobset(w={"count": 2, "completions": 4, "parallelisms": 2, "resources": R})
    for job in jobs(data, wait="ready"):
        assert job["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"


@pytest.mark.parametrize("name", ["Fast_SSD", "ssd/fast", "-ssd", "x" * 254])
def test_tensorboard_storage_class_must_be_a_storage_class_name(name, tmp_path):
    from aichor_iac.settings import load_stack_file

    stack = tmp_path / "Pulumi.x.yaml"
    stack.write_text(yaml.safe_dump({"config": {"aichor:tensorboardStorageClass": name}}))
    with pytest.raises(ManifestError, match="aichor:tensorboardStorageClass"):
        load_stack_file(stack)


def test_batchjob_is_one_indexed_job():
    data = {
        "spec": {
            "operator": "batchjob",
            "image": "i",
            "command": "c",
            "types": {"worker": {"count": 3, "resources": R}},
        }
    }
    (job,) = jobs(data)
    assert (job["metadata"]["name"], job["spec"]["completions"], job["spec"]["parallelism"]) == (
        "exp-worker",
        3,
        3,
    )
    indexes = sorted(int(env["JOB_COMPLETION_INDEX"]) for _, _, env in replica_envs(data))
    assert indexes == [0, 1, 2]


# --- one validity path ------------------------------------------------------------------------

AGREEMENT = {
    "valid": pytorch_manifest(1, 1),
    "reserved env": pytorch_manifest(1, 1, env=[{"name": "WORLD_SIZE", "value": "1"}]),
    "jupyter": pytorch_manifest(1, 1, debug={"jupyter": True}),
    "vscode": pytorch_manifest(1, 1, debug={"vscode": {"enabled": True}}),
    "bad count": pytorch_manifest(2, 1),
    "jobset": jobset(w={"count": 2, "resources": R}),
}


@pytest.mark.parametrize("case", sorted(AGREEMENT))
def test_validate_decides_exactly_what_render_decides(case, tmp_path, capsys):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(AGREEMENT[case]))
    results = []
    for command in ("validate", "render"):
        code = cli.main([command, str(path)])
        results.append((code, capsys.readouterr().err))
    assert results[0] == results[1]
    code, err = results[0]
    assert code in (0, 2) and "Traceback" not in err
    if code == 2:
        assert all(line.startswith(f"{path}:") for line in err.splitlines())


SLICE = {"tpu": {"type": "tpu-v5-lite-podslice", "topology": "4x4", "tpuChipsCount": 4}}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            pytorch_manifest(1, 1, types={"Master": {"resources": {**R, "accelerators": SLICE}}}),
            "spec.types.Master.resources.accelerators.tpu: a 4x4 slice of 4 hosts is a multi-host "
            "TPU slice, which only jax Workers and Ray worker pools can be",
        ),
        (
            {
                "spec": {
                    "operator": "kuberay",
                    "image": "i",
                    "command": "c",
                    "types": {"Head": {"resources": {**R, "accelerators": SLICE}}},
                }
            },
            "spec.types.Head.resources.accelerators.tpu: a 4x4 slice of 4 hosts",
        ),
        (
            {
                "spec": {
                    "operator": "jax",
                    "image": "i",
                    "command": "c",
                    "types": {
                        "Worker": {
                            "resources": {
                                **R,
                                "accelerators": {"tpu": {**SLICE["tpu"], "topology": "3x3"}},
                            }
                        }
                    },
                }
            },
            "spec.types.Worker.resources.accelerators.tpu: topology 3x3 has 9 chips, which 4 chips "
            "per host do not divide",
        ),
    ],
)
def test_tpu_topologies_that_cannot_run(data, expected, tmp_path, capsys):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert cli.main(["validate", str(path)]) == 2
    assert expected in capsys.readouterr().err


def test_two_groups_may_not_become_one_job(tmp_path, capsys):
    pools = [
        {"name": "tpu", "count": 1, "resources": {**R, "accelerators": SLICE}},
        {"name": "tpu-0", "count": 1, "resources": R},
    ]
    data = {
        "spec": {
            "operator": "kuberay",
            "image": "i",
            "command": "c",
            "types": {"Head": {"resources": R}, "Workers": pools},
        }
    }
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert cli.main(["validate", str(path)]) == 2
    assert (
        "two groups would both be the Job dev-tpu-0: rename one of them" in capsys.readouterr().err
    )


RDMA = {"rdma": {"devices": ["sriov_a", "sriov_b"]}, "accelerators": {"gpu": {"count": 8}}}


@pytest.mark.parametrize(
    ("settings", "resources", "networks"),
    [
        ({}, ["intel.com/sriov_a", "intel.com/sriov_b"], "sriov-a,sriov-b"),
        (
            {"rdma_resource_prefix": "nvidia.com", "rdma_networks": ["sriov_b=infra/rdma-b"]},
            ["nvidia.com/sriov_a", "nvidia.com/sriov_b"],
            "sriov-a,infra/rdma-b",
        ),
    ],
)
def test_rdma_requests_a_vf_of_each_device_and_attaches_its_network(settings, resources, networks):
    data = pytorch_manifest(
        1, 1, types={"Master": {"resources": {**R, **RDMA}}, "Worker": {"resources": R}}
    )
    by_name = {j["metadata"]["name"]: j["spec"]["template"] for j in jobs(data, **settings)}
    master, worker = by_name["exp-master"], by_name["exp-worker"]
    limits = master["spec"]["containers"][0]["resources"]["limits"]
    assert sorted(k for k in limits if "/sriov" in k) == resources and all(
        limits[k] == "1" for k in resources
    )
    assert master["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == networks
    assert master["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert "k8s.v1.cni.cncf.io/networks" not in (worker["metadata"].get("annotations") or {})
    assert "add" not in worker["spec"]["containers"][0]["securityContext"]["capabilities"]


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("aichor:rdmaNetworks", ["sriov_a"], "is not device=network"),
        ("aichor:rdmaNetworks", ["sriov_a=Bad_Net"], "is not device=network"),
        ("aichor:rdmaResourcePrefix", "Intel.com/", "should match pattern"),
    ],
)
def test_bad_rdma_settings_name_the_key(key, value, expected, tmp_path):
    from aichor_iac.settings import load_stack_file

    stack = tmp_path / "Pulumi.x.yaml"
    stack.write_text(yaml.safe_dump({"config": {"aichor:manifest": "m.yaml", key: value}}))
    with pytest.raises(ManifestError) as caught:
        load_stack_file(stack)
    assert key in str(caught.value) and expected in str(caught.value)


def test_rdma_devices_are_checked():
    text = yaml.safe_dump(
        pytorch_manifest(
            1, 1, types={"Master": {"resources": {**R, "rdma": {"devices": ["a", "a", "b c"]}}}}
        )
    )
    lines = problems(text)
    assert any(
        "spec.types.Master.resources.rdma.devices.2: String should match pattern" in x
        for x in lines
    )
