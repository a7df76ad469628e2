"""Experiment services (shared volume, TensorBoard, env and Secrets, outputs, scheduling,
isolation, editor schema): objects present or absent, mounts, env, outputs."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import jsonschema
import pytest
import yaml
from conftest import AICHOR_EXAMPLES, ROOT, expand, pytorch_manifest

from aichor_iac.doors.aichor import json_schema
from aichor_iac.k8s import progress
from aichor_iac.problems import ManifestError

STORAGE = {
    "sharedVolume": {"mountPoint": "/mnt/shared", "sizeGB": 100, "storageClass": "fast"},
    "attachExistingPVCs": [{"name": "datasets", "mountPoint": "/data"}],
}


def with_services(**spec) -> dict:
    return pytorch_manifest(1, 2, tensorboard={"enabled": True}, storage=STORAGE, **spec)


def objects(data: dict, **settings) -> dict[str, dict]:
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in expand(data, **settings).objects}


def pod(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


def test_issue_example_tensorboard_shared_volume_network_policy_and_outputs(capsys):
    from aichor_iac import cli

    rendered = objects(with_services())
    assert sorted(rendered) == [
        "Deployment/exp-tensorboard",
        "Job/exp-master",
        "Job/exp-worker",
        "NetworkPolicy/exp",
        "PersistentVolumeClaim/exp-shared",
        "Secret/exp-secret",  # (the progress receiver's credentials)
        "Service/exp",
        "Service/exp-tensorboard",
    ]
    claim = rendered["PersistentVolumeClaim/exp-shared"]["spec"]
    assert claim == {
        "accessModes": ["ReadWriteMany"],
        "storageClassName": "fast",
        "resources": {"requests": {"storage": "100Gi"}},
    }
    for name in ("Job/exp-master", "Job/exp-worker", "Deployment/exp-tensorboard"):
        spec = pod(rendered[name])
        claims = {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in spec["volumes"]
            if "persistentVolumeClaim" in v
        }
        mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
        assert {claims[n]: mounts[n] for n in claims} == {
            "exp-shared": "/mnt/shared",
            "datasets": "/data",
        }
    tensorboard = pod(rendered["Deployment/exp-tensorboard"])["containers"][0]
    assert tensorboard["command"][:3] == ["tensorboard", "--logdir", "/mnt/shared/tensorboard"]
    assert all(m["readOnly"] for m in tensorboard["volumeMounts"])
    assert rendered["Service/exp-tensorboard"]["spec"]["type"] == "ClusterIP"

    assert cli.main(["preview", str(ROOT / "examples/pytorch-tensorboard.yaml")]) == 0
    text = capsys.readouterr().out
    for line in (
        r"tensorboard +: kubectl port-forward -n default svc/pytorch-tb-tensorboard 6006",
        r"sharedVolume +: pytorch-tb-shared",
        r"NetworkPolicy +pytorch-tb ",
        r"Deployment +pytorch-tb-tensorboard ",
        r"logs +: kubectl logs -n default -f job/pytorch-tb-master",
        r"pods +: 4",
        r'gpus +: \{"NVIDIA-A10G": 4\}',
        r'addresses +: \{"master": ',
    ):
        assert re.search(line, text), line


def test_nothing_extra_when_disabled():
    rendered = objects(pytorch_manifest(1, 1), network_policy=False, progress=False)
    assert sorted(rendered) == ["Job/exp-master", "Job/exp-worker", "Service/exp"]
    outputs = expand(pytorch_manifest(1, 1)).outputs
    assert "tensorboard" not in outputs and "sharedVolume" not in outputs
    assert "volumes" not in pod(rendered["Job/exp-master"])


def test_shared_volume_survives_destroy_unless_asked():
    def retained(**settings) -> bool:
        rendering = expand(with_services(), **settings)
        claim = next(r for r in rendering.resources if r.kind == "PersistentVolumeClaim")
        assert claim.inputs["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
        return bool(claim.options.get("retainOnDelete"))

    assert retained() is True
    assert retained(delete_shared_volume=True) is False


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (
            {},
            {
                "AICHOR_INPUT_PATH": "/mnt/shared/input",
                "AICHOR_OUTPUT_PATH": "/mnt/shared/output",
                "AICHOR_TENSORBOARD_PATH": "/mnt/shared/tensorboard",
                "AICHOR_LOGS_PATH": "/mnt/shared/logs",
            },
        ),
        (
            {
                "experiment_id": "e1",
                "project_id": "p1",
                "output_path": "s3://bucket/out",
                "egress_cidrs": ["0.0.0.0/0"],  # object storage is outside the cluster
            },
            {
                "AICHOR_EXPERIMENT_ID": "e1",
                "AICHOR_PROJECT_ID": "p1",
                "AICHOR_INPUT_PATH": "/mnt/shared/input",
                "AICHOR_OUTPUT_PATH": "s3://bucket/out",
                "AICHOR_TENSORBOARD_PATH": "/mnt/shared/tensorboard",
                "AICHOR_LOGS_PATH": "/mnt/shared/logs",
            },
        ),
    ],
)
def test_platform_paths_default_to_the_shared_volume(settings, expected):
    env = pod(objects(with_services(), **settings)["Job/exp-worker"])["containers"][0]["env"]
    aichor = {e["name"]: e["value"] for e in env if e["name"].startswith("AICHOR_")}
    assert aichor == expected


def test_spec_env_values_and_secret_references():
    data = with_services(
        env=[
            {"name": "WANDB_MODE", "value": "offline $(HOME)"},
            {"name": "HF_TOKEN", "secretKeyRef": {"name": "hf", "key": "token"}},
        ]
    )
    rendered = expand(data)
    for name in ("exp-master", "exp-worker"):
        job = next(o for o in rendered.objects if o["metadata"]["name"] == name)
        env = pod(job)["containers"][0]["env"]
        assert env[-2:] == [
            {"name": "WANDB_MODE", "value": "offline $$(HOME)"},
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
        ]
    # never copied: the one Secret is the experiment's own (the progress receiver's keys)
    secrets = [o for o in rendered.objects if o["kind"] == "Secret"]
    assert [(s["metadata"]["name"], sorted(s["stringData"])) for s in secrets] == [
        ("exp-secret", sorted(progress.KEYS))
    ]


@pytest.mark.parametrize(
    ("env", "settings", "expected"),
    [
        (
            [{"name": "RANK", "value": "3"}],
            {},
            "spec.env.0.name: RANK is set by aichor-iac for operator 'pytorch'; choose another name",
        ),
        (
            [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}],
            {},
            "spec.env.1.name: 'A' is given twice",
        ),
        ([{"name": "A"}], {}, "spec.env.0: give exactly one of value or secretKeyRef"),
        (
            [{"name": "1A", "value": "x"}],
            {},
            "spec.env.0.name: String should match pattern '^[A-Za-z_][A-Za-z0-9_]*$'",
        ),
    ],
)
def test_bad_env(env, settings, expected):
    with pytest.raises(ManifestError) as caught:
        expand(pytorch_manifest(1, 1, env=env), **settings)
    assert expected in [f"{p.path}: {p.message}" for p in caught.value.problems]


@pytest.mark.parametrize(
    ("spec", "settings", "source", "path"),
    [
        (
            {},
            {"tensorboard_path": "gs://bucket/tb", "network_policy": False},
            "path",
            "gs://bucket/tb",
        ),
        (
            {"storage": STORAGE},
            {"tensorboard_path": "s3://b/x", "egress_cidrs": ["0.0.0.0/0"]},
            "path",
            "s3://b/x",
        ),
        ({"storage": STORAGE}, {}, "shared", "/mnt/shared/tensorboard"),
        ({}, {}, "volume", "/aichor/tensorboard"),
        ({}, {"tensorboard_volume_gb": 50, "tensorboard_storage_class": "ssd"}, "volume", None),
    ],
)
def test_tensorboard_log_location_is_chosen_once_and_explained(spec, settings, source, path):
    path = path or "/aichor/tensorboard"
    data = pytorch_manifest(1, 2, tensorboard={"enabled": True}, **spec)
    rendering = expand(data, progress=False, **settings)  # (TensorBoard's sidecar alone)
    rendered = {f"{o['kind']}/{o['metadata']['name']}": o for o in rendering.objects}
    assert rendering.outputs["tensorboardLogs"].startswith(f"{path} ({source}: ")
    board = pod(rendered["Deployment/exp-tensorboard"])
    assert board["containers"][0]["command"][:3] == ["tensorboard", "--logdir", path]
    assert all(m["readOnly"] for m in board["containers"][0].get("volumeMounts", []))
    own = source == "volume"
    assert ("PersistentVolumeClaim/exp-tensorboard" in rendered) == own
    ports = [p["port"] for p in rendered["Service/exp-tensorboard"]["spec"]["ports"]]
    assert ports == ([6006, 6007] if own else [6006])
    for job in (o for o in rendered.values() if o["kind"] == "Job"):
        spec_ = pod(job)
        env = {e["name"]: e.get("value") for e in spec_["containers"][0]["env"]}
        assert env["AICHOR_TENSORBOARD_PATH"] == path
        sidecars = [c for c in spec_.get("initContainers", []) if c.get("restartPolicy")]
        assert [c["name"] for c in sidecars] == (["tensorboard-logs"] if own else [])
        if own:  # the replica writes locally; the sidecar reads that directory and ships it
            (local,) = [m for m in spec_["containers"][0]["volumeMounts"] if m["mountPath"] == path]
            assert {"name": "tensorboard-logs", "emptyDir": {}} in spec_["volumes"]
            assert sidecars[0]["volumeMounts"] == [{**local, "readOnly": True}]
            assert (
                sidecars[0]["command"][-3]
                == "http://exp-tensorboard.default.svc.cluster.local:6007"
            )
            assert spec_["initContainers"][0] == sidecars[0]  # before any wait
    if own:
        claim = rendered["PersistentVolumeClaim/exp-tensorboard"]["spec"]
        assert claim["accessModes"] == ["ReadWriteOnce"]
        assert (
            claim["resources"]["requests"]["storage"]
            == f"{settings.get('tensorboard_volume_gb', 10)}Gi"
        )
        assert claim.get("storageClassName") == settings.get("tensorboard_storage_class")
        deployment = rendered["Deployment/exp-tensorboard"]["spec"]
        assert deployment["strategy"] == {"type": "Recreate"}  # one node may hold the volume
        receiver = board["containers"][1]
        assert receiver["name"] == "log-receiver" and not receiver["volumeMounts"][0].get(
            "readOnly"
        )


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"tensorboard_path": "gs://bucket/tb"}, "aichor:tensorboardPath"),
        ({"output_path": "s3://bucket/out"}, "aichor:outputPath"),
        ({"input_path": "hdfs://namenode/data"}, "aichor:inputPath"),
    ],
)
def test_object_storage_behind_the_network_policy_is_an_error_not_a_silent_block(settings, key):
    data = pytorch_manifest(1, 1, tensorboard={"enabled": True})
    with pytest.raises(ManifestError) as caught:
        expand(data, **settings)
    (problem,) = caught.value.problems
    assert problem.path == key
    assert "does not let pods reach" in problem.message and "aichor:egressCIDRs" in problem.message
    assert expand(data, egress_cidrs=["0.0.0.0/0"], **settings).objects
    assert expand(data, network_policy=False, **settings).objects


def test_nothing_is_half_created_when_a_manifest_has_a_problem():
    from aichor_iac import engine

    data = pytorch_manifest(1, 1, env=[{"name": "RANK", "value": "1"}])
    with pytest.raises(ManifestError, match="RANK is set by aichor-iac"):
        expand(data)
    assert engine.run(lambda: {}).resources == []  # a fresh run registers nothing else


def test_network_policy_isolates_the_experiment():
    policy = objects(with_services(), egress_cidrs=["10.0.0.0/8"])["NetworkPolicy/exp"]["spec"]
    own = {
        "podSelector": {
            "matchLabels": {
                "app.kubernetes.io/instance": "exp",
                "app.kubernetes.io/part-of": "aichor",
            }
        }
    }
    assert policy["podSelector"] == own["podSelector"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["ingress"] == [{"from": [own]}]
    assert policy["egress"] == [
        {"to": [own]},
        {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]},
    ]


def test_no_load_balancer_or_node_port():
    for obj in expand(with_services()).objects:
        if obj["kind"] == "Service":
            assert obj["spec"].get("type", "ClusterIP") == "ClusterIP"


@pytest.mark.parametrize(
    ("gang", "api", "marker", "scheduler"),
    [
        (
            "coscheduling",
            "scheduling.x-k8s.io/v1alpha1",
            ("labels", "scheduling.x-k8s.io/pod-group"),
            "scheduler-plugins-scheduler",
        ),
        (
            "volcano",
            "scheduling.volcano.sh/v1beta1",
            ("annotations", "scheduling.k8s.io/group-name"),
            "volcano",
        ),
    ],
)
def test_gang_scheduling(gang, api, marker, scheduler):
    rendered = objects(pytorch_manifest(1, 3), gang_scheduler=gang, priority_class_name="high")
    group = rendered["PodGroup/exp"]
    assert group["apiVersion"] == api and group["spec"] == {"minMember": 4}
    for name in ("Job/exp-master", "Job/exp-worker"):
        template = rendered[name]["spec"]["template"]
        assert template["metadata"][marker[0]][marker[1]] == "exp"
        assert template["spec"]["schedulerName"] == scheduler
        assert template["spec"]["priorityClassName"] == "high"


def test_kueue_queue_label_and_image_pull_secrets():
    rendered = objects(pytorch_manifest(1, 1), kueue_queue="team-a", image_pull_secrets=["reg"])
    for name in ("Job/exp-master", "Job/exp-worker"):
        assert rendered[name]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
        assert pod(rendered[name])["imagePullSecrets"] == [{"name": "reg"}]
    assert "schedulerName" not in pod(rendered["Job/exp-master"])


def test_schema_file_is_current_and_every_example_validates_against_it():
    shipped = json.loads((ROOT / "schema/aichor-manifest.schema.json").read_text())
    assert shipped == json_schema()
    printed = subprocess.run(
        [sys.executable, "-m", "aichor_iac.cli", "schema"],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    assert json.loads(printed) == shipped
    for path in AICHOR_EXAMPLES:  # (the AIchor manifests: the schema is theirs)
        text = path.read_text()
        assert text.startswith(
            "# yaml-language-server: $schema=../schema/aichor-manifest.schema.json\n"
        )
        jsonschema.validate(yaml.safe_load(text), shipped)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {
                "spec": {
                    "operator": "pytorch",
                    "image": "i",
                    "command": "c",
                    "types": {},
                    "imagePullPolicy": "x",
                }
            },
            shipped,
        )


def test_tensorboard_gets_the_configured_path_as_given():
    # Kubernetes expands $(VAR) in commands and env: the path reaches TensorBoard unexpanded,
    # as it reaches the replicas.
    rendered = objects(
        pytorch_manifest(1, 1, tensorboard={"enabled": True}),
        tensorboard_path="/logs/$(EXP)/tb",
        network_policy=False,
    )
    board = pod(rendered["Deployment/exp-tensorboard"])["containers"][0]
    assert board["command"][2] == "/logs/$$(EXP)/tb"
    assert {"name": "AICHOR_TENSORBOARD_PATH", "value": "/logs/$$(EXP)/tb"} in board["env"]
    replica = pod(rendered["Job/exp-master"])["containers"][0]["env"]
    assert {"name": "AICHOR_TENSORBOARD_PATH", "value": "/logs/$$(EXP)/tb"} in replica


def test_a_tensorboard_that_stops_answering_is_restarted():
    rendered = objects(pytorch_manifest(1, 1, tensorboard={"enabled": True}))
    board = pod(rendered["Deployment/exp-tensorboard"])["containers"][0]
    assert board["livenessProbe"] == {
        "httpGet": {"path": "/", "port": 6006},
        "initialDelaySeconds": 60,
        "periodSeconds": 30,
        "timeoutSeconds": 5,
        "failureThreshold": 5,
    }
