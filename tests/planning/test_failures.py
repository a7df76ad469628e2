"""When a replica fails: what `aichor:maxRestarts` renders (every replica under the group
restart, each Job's budget and pod failure policy) and the experiments it is refused for."""

from __future__ import annotations

import json
import re

import pytest
import schemas
import yaml
from conftest import KUBEFLOW_EXAMPLES, ROOT, expand, runnable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from test_properties import types_by_operator

from aichor_iac import doors
from aichor_iac.cli import main
from aichor_iac.convert import convert
from aichor_iac.pods import LIFELINE_PORT, regroup
from aichor_iac.problems import ManifestError
from aichor_iac.settings import Settings, from_config

R = {"cpus": 1, "ramRatio": 1}


def manifest(operator: str = "pytorch", spec: dict | None = None, **types: int) -> dict:
    types = types or {"Master": 1, "Worker": 2}
    data = {
        "operator": operator,
        "image": "img",
        "command": "python train.py",
        "types": {t: {"count": n, "resources": dict(R)} for t, n in types.items()},
    }
    return {"spec": {**data, **(spec or {})}}


def jobs(data: dict, **settings) -> list[dict]:
    return [o for o in expand(data, **settings).objects if o["kind"] == "Job"]


@pytest.mark.parametrize(
    ("operator", "types"),
    [
        ("pytorch", {"Master": 1, "Worker": 2}),
        ("jax", {"Worker": 3}),
        ("mpi", {"Launcher": 1, "Worker": 2}),
    ],
)
def test_every_replica_runs_the_group_restart_led_by_the_entry_point(operator, types):
    for job in jobs(manifest(operator, **types), max_restarts=2, permanent_exit_codes=[3, 1]):
        spec = job["spec"]
        assert spec["backoffLimit"] == 2  # a container that died as a whole: made again
        rules = spec["podFailurePolicy"]["rules"]
        assert rules[0] == {
            "action": "Ignore",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
        }
        main = spec["template"]["spec"]["containers"][0]
        assert rules[1]["onExitCodes"] == {
            "containerName": main["name"],
            "operator": "In",
            "values": [regroup.GAVE_UP],
        }
        assert {"name": "lifeline", "containerPort": LIFELINE_PORT, "protocol": "TCP"} in main[
            "ports"
        ]
        script = main["command"][2]
        assert "class Lead(Replica)" in script and "exec python3 -S -c" in script
        # (the lead, port, budget, permanent codes, attempt names, deadline, linger, hosts)
        lead = script.rsplit('\' "$$1" ', 1)[1].split(" ", 1)[0]
        assert lead.startswith("exp-") and lead.endswith("-0.exp.default.svc.cluster.local")
        rules = """'[["aichor:permanentExitCodes", "fail", [], "In", [1, 3]]]'"""
        assert f"{LIFELINE_PORT} 2 {rules} '' 1800 12 '' " in script


def test_without_restarts_nothing_changes():
    plain = jobs(manifest())
    assert all(
        "class Lead" not in j["spec"]["template"]["spec"]["containers"][0]["command"][2]
        for j in plain
    )
    assert jobs(manifest(), max_restarts=0) == plain


CONTAINER = {"name": "pytorch", "image": "img", "command": ["python", "train.py"]}
REFUSED = [
    ("batchjob", manifest("batchjob", Worker=3), {}, "aichor:maxRestarts", "no group to restart"),
    (
        "kubeflow custom resource",
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "exp"},
            "spec": {
                "pytorchReplicaSpecs": {
                    t: {"template": {"spec": {"containers": [CONTAINER]}}}
                    for t in ("Master", "Worker")
                }
            },
        },
        {},
        "aichor:maxRestarts",
        "restarts as its own fields say (spec.runPolicy.backoffLimit, with restartPolicy",
    ),
    (
        "per-replica retries",
        manifest(spec={"restartPolicy": {"backoffLimit": 2}}),
        {},
        "spec.restartPolicy.backoffLimit",
        "retries one replica alone",
    ),
]


@pytest.mark.parametrize(
    ("data", "more", "path", "text"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED]
)
def test_refused(data, more, path, text):
    with pytest.raises(ManifestError) as error:
        expand(data, max_restarts=1, **more)
    assert any(p.path == path and text in p.message for p in error.value.problems), error.value


@pytest.mark.parametrize("codes", [[0], [256], [-1]])
def test_permanent_exit_codes_are_1_to_255(codes):
    with pytest.raises(ValidationError, match="1 to 255"):
        Settings(permanent_exit_codes=codes)


def entrypoint_jobset() -> dict:
    """JobSet's FailJobSet example, its containers running their image's entrypoint with
    args (as a server set's images do), not a command."""
    path = ROOT / "tests" / "jobset" / "failure-policy.failjobset-action.yaml"
    data = yaml.safe_load(path.read_text())
    for replicated in data["spec"]["replicatedJobs"]:
        container = replicated["template"]["spec"]["template"]["spec"]["containers"][0]
        container.pop("command")
        container.update(image="registry.example/server:1", args=["--port=8000"])
    return data


SERVER = "registry.example/server:1=/usr/bin/server --model 'a b'"


def test_an_image_entrypoint_restarts_as_a_group_once_the_stack_says_what_it_runs():
    with pytest.raises(ManifestError) as error:
        expand(entrypoint_jobset(), name="js")
    assert [p.path for p in error.value.problems] == [
        f"spec.replicatedJobs.{i}.template.spec.template.spec.containers" for i in (0, 1)
    ]
    assert all(
        "say what registry.example/server:1 runs in aichor:entrypoints" in p.message
        for p in error.value.problems
    )
    for job in jobs(entrypoint_jobset(), name="js", entrypoints=[SERVER]):
        main = job["spec"]["template"]["spec"]["containers"][0]
        assert "class Lead" in main["command"][2] and "args" not in main
        # what the group restart runs again: the image's entrypoint as told, then the args
        assert main["command"][-1] == "/usr/bin/server --model 'a b' --port=8000"


def test_validate_reads_what_an_image_runs_from_the_stack_config(tmp_path, capsys):
    path = tmp_path / "servers.yaml"
    path.write_text(yaml.safe_dump(entrypoint_jobset()))
    stack = tmp_path / "Pulumi.dev.yaml"
    stack.write_text(yaml.safe_dump({"config": {"aichor:entrypoints": [SERVER.split("=")[0]]}}))
    assert main(["validate", str(path), "--stack-config", str(stack)]) == 2
    assert "aichor:entrypoints: registry.example/server:1: give IMAGE=COMMAND" in (
        capsys.readouterr().err
    )
    assert main(["validate", str(path)]) == 2
    assert "say what registry.example/server:1 runs in aichor:entrypoints" in (
        capsys.readouterr().err
    )
    stack.write_text(yaml.safe_dump({"config": {"aichor:entrypoints": [SERVER]}}))
    assert main(["validate", str(path), "--stack-config", str(stack)]) == 0


def images(resource: dict) -> list[str]:
    replicas = next(v for k, v in resource["spec"].items() if k.endswith("ReplicaSpecs"))
    return sorted(
        {c["image"] for r in replicas.values() for c in r["template"]["spec"]["containers"]}
    )


def test_every_public_kubeflow_example_restarts_as_a_group_once_its_images_are_told():
    """The public examples whose containers run their image's entrypoint (13 of them:
    XGBoost, MPI, JAX, PyTorch), given a backoffLimit: refused, then valid objects once the
    stack says what each image runs, every Job's container running it under the restart."""
    refused = 0
    for path in KUBEFLOW_EXAMPLES:
        resource = runnable(path)[0]
        resource["spec"].setdefault("runPolicy", {})["backoffLimit"] = 2
        try:
            expand(resource)
            continue
        except ManifestError as error:
            if "aichor:entrypoints" not in str(error):
                continue
        refused += 1
        told = [f"{image}=/entrypoint --flag" for image in images(resource)]
        objects = expand(resource, entrypoints=told).objects
        for obj in objects:
            schemas.validate(obj)
        for job in (o for o in objects if o["kind"] == "Job"):
            command = job["spec"]["template"]["spec"]["containers"][0]["command"]
            assert "class Lead" in command[2] and command[-1].startswith("/entrypoint --flag")
    assert refused == 13


def test_what_the_stack_says_an_image_runs_changes_only_the_containers_that_restart():
    # no restart: the image's entrypoint runs as Kubernetes runs it, whatever the stack says
    data = entrypoint_jobset()
    del data["spec"]["failurePolicy"]
    told = jobs(data, name="js", entrypoints=[SERVER])
    assert told == jobs(data, name="js")
    assert all("command" not in j["spec"]["template"]["spec"]["containers"][0] for j in told)


@pytest.mark.parametrize(
    ("told", "said"),
    [
        ("registry.example/server:1=", "give IMAGE=COMMAND"),
        ("=python", "give IMAGE=COMMAND"),
        ("img=python 'unclosed", "No closing quotation"),
    ],
)
def test_an_entrypoint_the_stack_says_is_an_image_and_a_command(told, said):
    with pytest.raises(ManifestError) as error:
        from_config({"aichor:entrypoints": json.dumps([told])})
    assert error.value.problems[0].path == "aichor:entrypoints"
    assert said in error.value.problems[0].message


RESTARTABLE = sorted(set(types_by_operator) - {"batchjob", "jobset"})


@given(
    st.sampled_from(RESTARTABLE).flatmap(
        lambda op: types_by_operator[op].map(lambda types: (op, types))
    ),
    st.integers(1, 2**31 - 1),
    st.lists(st.integers(1, 255), max_size=5),
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_restarting_experiment_renders_valid_objects(case, budget, codes):
    operator, types = case
    data = {"spec": {"operator": operator, "image": "img", "command": "run", "types": types}}
    try:
        objects = expand(data, max_restarts=budget, permanent_exit_codes=codes).objects
    except ManifestError as error:  # a Job running part of its pods at a time; a Ray cluster
        allowed = ("at a time", "runs until destroyed")  # without a job
        assert all(any(a in p.message for a in allowed) for p in error.problems), error
        return
    for obj in objects:
        schemas.validate(obj)
    jobs = [o for o in objects if o["kind"] == "Job"]
    assert jobs and all(j["spec"]["backoffLimit"] == budget for j in jobs)


def test_a_rayjob_backoff_limit_restarts_the_cluster_and_the_job_together():
    """KubeRay retries a RayJob on a new cluster: here the head, the workers and the
    submitter restart in place, led by the submitter, the backoffLimit the budget."""
    text = (ROOT / "tests/kuberay/ray-job.batch-inference.yaml").read_text()
    rayjob = next(yaml.safe_load_all(text))  # (the ConfigMap beside it: not needed)
    rayjob["spec"]["backoffLimit"] = 3
    with pytest.raises(ManifestError, match=r"spec\.backoffLimit: retries the job on a new clus"):
        expand(rayjob)  # (the cluster would run on after the job, which the restart ends)
    rayjob["spec"]["shutdownAfterJobFinishes"] = True
    found = jobs(rayjob)
    assert {j["metadata"]["name"] for j in found} >= {
        "exp-head",
        "exp-submitter",
    }
    for job in found:
        assert job["spec"]["backoffLimit"] >= 3
        script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
        lead = script.rsplit('\' "$$1" ', 1)[1].split(" ", 1)[0]
        assert lead == "exp-submitter-0.exp.default.svc.cluster.local"
        assert f" {LIFELINE_PORT} 3 '[]' " in script
    with pytest.raises(
        ManifestError,
        match=re.escape("restarts as its own fields say (a RayJob's spec.backoffLimit)"),
    ):
        expand(rayjob, max_restarts=1)
    lost = convert(doors.validate(rayjob, "rayjob.yaml")).lost  # (a manifest cannot say it)
    assert any("spec.backoffLimit: every replica restarts together, at most 3" in x for x in lost)
