"""Kubeflow custom resources in, plain objects out: `kubeflow.org/v1` PyTorchJob, TFJob,
XGBoostJob, JAXJob, PaddleJob and `kubeflow.org/v2beta1` MPIJob render to the same kind of
objects as an AIchor manifest, their pod templates kept, and each replica sees exactly its
operator's env (Training Operator release-1.9, MPI Operator v0.8), host names aside: the
tables run every replica's command and compare. The public examples of kubeflow/trainer and
kubeflow/mpi-operator (tests/kubeflow/, unchanged) render and pass the API server's schema and
rules."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import schemas
import yaml
from conftest import KUBEFLOW_EXAMPLES as EXAMPLES
from conftest import ROOT, by_name, expand, runnable, specs, wait_of
from kube import process_env

from aichor_iac import cli, doors, planning
from aichor_iac.convert import convert
from aichor_iac.k8s import progress, shell
from aichor_iac.problems import ManifestError
from aichor_iac.rules import limits
from aichor_iac.settings import Settings

PRINT_ENV = ["python3", "-c", "import json, os; print(json.dumps(dict(os.environ)))"]
# What aichor-iac adds beside the operator: the replica index (Kubernetes sets it too) and,
# for a followed entry point's peers, nothing the program reads.
OURS = {"JOB_COMPLETION_INDEX", "HOSTNAME", "PATH", "AICHOR_FOLLOW_INTERVAL"}
OURS |= {progress.ENV_URL, progress.ENV_CA, progress.ENV_TOKEN}  # (tests/k8s/test_progress_*)


KINDS = {  # kind -> (replica specs field, the operator's container)
    "PyTorchJob": ("pytorchReplicaSpecs", "pytorch"),
    "XGBoostJob": ("xgbReplicaSpecs", "xgboost"),
    "JAXJob": ("jaxReplicaSpecs", "jax"),
    "TFJob": ("tfReplicaSpecs", "tensorflow"),
    "PaddleJob": ("paddleReplicaSpecs", "paddle"),
    "MPIJob": ("mpiReplicaSpecs", None),  # the operator's container is the first
}


def custom_resource(
    kind: str, types: dict[str, int], command: list[str] | None = PRINT_ENV, **spec: Any
) -> dict[str, Any]:
    """A `kubeflow.org/v1` resource of `kind` named exp, each type of `types` with its count
    and a one-container template running `command` (None: the image's entrypoint)."""
    field, container_name = KINDS[kind]

    def replica(count: int) -> dict[str, Any]:
        name = container_name or "main"
        container: dict[str, Any] = {"name": name, "image": "pytorch/pytorch:2.3.1"}
        if command is not None:
            container["command"] = list(command)
        return {"replicas": count, "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": "kubeflow.org/v2beta1" if kind == "MPIJob" else "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": "exp"},
        "spec": {field: {t: replica(n) for t, n in types.items()}, **spec},
    }


def pytorchjob(
    master: int | None = 1, workers: int = 2, command: list[str] | None = PRINT_ENV, **spec: Any
) -> dict[str, Any]:
    types = {"Worker": workers} if master is None else {"Master": master, "Worker": workers}
    return custom_resource("PyTorchJob", types, command, **spec)


def envs(cr: dict[str, Any]) -> dict[tuple[str, int], dict[str, str]]:
    """The env each replica's command (or image's entrypoint, here `PRINT_ENV`) sees, run
    here as Kubernetes would start it, without what the process has from elsewhere; keyed by
    (role, replica), a replica's Job of its own named `<experiment>-<role>-<replica>`."""
    result = {}
    for job in (o for o in expand(cr).objects if o["kind"] == "Job"):
        role = job["metadata"]["labels"]["training.kubeflow.org/replica-type"]
        names = declared(job, KINDS[cr["kind"]][1]) - OURS
        indexed = job["spec"]["completionMode"] == "Indexed"
        for i in range(job["spec"]["completions"]):
            replica = i if indexed else int(job["metadata"]["name"].rsplit("-", 1)[1])
            env = process_env(
                job, i, extra_env={"AICHOR_FOLLOW_INTERVAL": "0.05"}, entrypoint=PRINT_ENV
            )
            result[(role, replica)] = {k: v for k, v in env.items() if k in names}
    return result


def declared(job: dict[str, Any], container: str | None) -> set[str]:
    """The variables a Job's container (None: the first) is given: its env, and those its
    command exports."""
    containers = job["spec"]["template"]["spec"]["containers"]
    main = next(c for c in containers if container in (None, c["name"]))
    names = {e["name"] for e in main.get("env", [])}
    return names | set(re.findall(r"export (\w+)=", " ".join(main.get("command", []))))


def host(role: str, index: int) -> str:
    return f"exp-{role}-{index}.exp.default.svc.cluster.local"


MASTER = host("master", 0)


def operator_env(rank: int, world: int, nnodes: int, nproc: str = "auto") -> dict[str, str]:
    """What release-1.9's setPodEnv gives a replica of a PyTorchJob with a Master."""
    return {
        "PYTHONUNBUFFERED": "1",
        "MASTER_PORT": "23456",
        "PET_MASTER_PORT": "23456",
        "MASTER_ADDR": MASTER,
        "PET_MASTER_ADDR": MASTER,
        "WORLD_SIZE": str(world),
        "RANK": str(rank),
        "PET_NODE_RANK": str(rank),
        "PET_NPROC_PER_NODE": nproc,
        "PET_NNODES": str(nnodes),
    }


@pytest.mark.parametrize(
    "cr, expected",
    [
        (
            pytorchjob(1, 2),
            {
                ("master", 0): operator_env(0, 3, 3),
                ("worker", 0): operator_env(1, 3, 3),
                ("worker", 1): operator_env(2, 3, 3),
            },
        ),
        (  # an integer nprocPerNode multiplies the world size (processes, not pods)
            pytorchjob(1, 1, nprocPerNode="4"),
            {
                ("master", 0): operator_env(0, 8, 2, "4"),
                ("worker", 0): operator_env(1, 8, 2, "4"),
            },
        ),
        (  # workers alone: no master, so no MASTER_* nor ranks (torchrun --standalone, say)
            pytorchjob(None, 2),
            {
                ("worker", i): {
                    "PYTHONUNBUFFERED": "1",
                    "PET_NPROC_PER_NODE": "auto",
                    "PET_NNODES": "2",
                }
                for i in range(2)
            },
        ),
        (  # elastic: the c10d rendezvous on worker 0's port, nnodes as min:max
            pytorchjob(
                None,
                2,
                elasticPolicy={
                    "minReplicas": 1,
                    "maxReplicas": 3,
                    "maxRestarts": 100,
                    "rdzvId": "run-1",
                    "rdzvConf": [{"key": "timeout", "value": "900"}, {"key": "a", "value": "b"}],
                },
            ),
            {
                ("worker", i): {
                    "PYTHONUNBUFFERED": "1",
                    "PET_RDZV_ENDPOINT": f"{host('worker', 0)}:23456",
                    "PET_RDZV_BACKEND": "c10d",
                    "PET_NNODES": "1:3",
                    "PET_MAX_RESTARTS": "100",
                    "PET_NPROC_PER_NODE": "auto",
                    "PET_RDZV_ID": "run-1",
                    "PET_RDZV_CONF": "timeout=900,a=b",
                }
                for i in range(2)
            },
        ),
        (  # elastic defaults: min = max = the workers' count; nProcPerNode of the policy
            pytorchjob(None, 3, elasticPolicy={"nProcPerNode": 2, "standalone": True}),
            {
                ("worker", i): {
                    "PYTHONUNBUFFERED": "1",
                    "PET_RDZV_ENDPOINT": f"{host('worker', 0)}:23456",
                    "PET_RDZV_BACKEND": "c10d",
                    "PET_NNODES": "3:3",
                    "PET_NPROC_PER_NODE": "2",
                    "PET_STANDALONE": "",
                }
                for i in range(3)
            },
        ),
    ],
    ids=["master-workers", "nproc", "workers", "elastic", "elastic-defaults"],
)
def test_each_replica_sees_the_training_operators_env(cr: dict, expected: dict) -> None:
    assert envs(cr) == expected


def xgboost_env(rank: int, workers: int) -> dict[str, str]:
    env = {
        "MASTER_PORT": "9999",
        "MASTER_ADDR": MASTER,
        "WORLD_SIZE": str(workers + 1),
        "RANK": str(rank),
        "PYTHONUNBUFFERED": "1",
    }
    if workers:
        hosts = ",".join(host("worker", i) for i in range(workers))
        env.update({"WORKER_PORT": "9999", "WORKER_ADDRS": hosts})
    return env


def tf_config(role: str, index: int) -> str:
    cluster = TF_CLUSTER
    for name, value in TF_HOSTS.items():
        cluster = cluster.replace(name, value)
    return (
        f'{{"cluster":{cluster},"task":{{"type":"{role}","index":{index}}},"environment":"cloud"}}'
    )


TF_CLUSTER = '{"chief":["CHIEF:2222"],"evaluator":["EVAL:2222"],"ps":["PS:2222"],"worker":["W0:2222","W1:2222"]}'
TF_HOSTS = {
    "CHIEF": host("chief", 0),
    "EVAL": host("evaluator", 0),
    "PS": host("ps", 0),
    "W0": host("worker", 0),
    "W1": host("worker", 1),
}
PADDLE = {"PYTHONUNBUFFERED": "1", "PADDLE_JOB_ID": "exp", "PADDLE_NNODES": "3"}


@pytest.mark.parametrize(
    "cr, expected",
    [
        (
            custom_resource("XGBoostJob", {"Master": 1, "Worker": 2}),
            {
                ("master", 0): xgboost_env(0, 2),
                ("worker", 0): xgboost_env(1, 2),
                ("worker", 1): xgboost_env(2, 2),
            },
        ),
        (custom_resource("XGBoostJob", {"Master": 1}), {("master", 0): xgboost_env(0, 0)}),
        (
            custom_resource("JAXJob", {"Worker": 3}),
            {
                ("worker", i): {
                    "PYTHONUNBUFFERED": "1",
                    "COORDINATOR_PORT": "6666",
                    "COORDINATOR_ADDRESS": host("worker", 0),
                    "NUM_PROCESSES": "3",
                    "PROCESS_ID": str(i),
                }
                for i in range(3)
            },
        ),
        (  # every type in the cluster, the evaluator too, keys sorted as Go writes them
            custom_resource("TFJob", {"Chief": 1, "PS": 1, "Worker": 2, "Evaluator": 1}),
            {
                ("chief", 0): {"TF_CONFIG": tf_config("chief", 0)},
                ("ps", 0): {"TF_CONFIG": tf_config("ps", 0)},
                ("worker", 0): {"TF_CONFIG": tf_config("worker", 0)},
                ("worker", 1): {"TF_CONFIG": tf_config("worker", 1)},
                ("evaluator", 0): {"TF_CONFIG": tf_config("evaluator", 0)},
            },
        ),
        (custom_resource("TFJob", {"Worker": 1}), {("worker", 0): {}}),  # not distributed
        (  # collective: worker 0 publishes its own IP, the others get its host
            custom_resource("PaddleJob", {"Worker": 3}),
            {
                ("worker", 0): {
                    **PADDLE,
                    "POD_IP_DUMMY": "10.0.0.1",
                    "PADDLE_MASTER": "10.0.0.1:36543",
                },
                **{
                    ("worker", i): {**PADDLE, "PADDLE_MASTER": f"{host('worker', 0)}:36543"}
                    for i in (1, 2)
                },
            },
        ),
        (  # parameter servers: master 0 is rank 0
            custom_resource("PaddleJob", {"Master": 1, "Worker": 2}),
            {
                ("master", 0): {
                    **PADDLE,
                    "POD_IP_DUMMY": "10.0.0.1",
                    "PADDLE_MASTER": "10.0.0.1:36543",
                    "PADDLE_SERVER_NUM": "1",
                },
                **{
                    ("worker", i): {
                        **PADDLE,
                        "PADDLE_MASTER": f"{MASTER}:36543",
                        "PADDLE_TRAINER_NUM": "1",
                    }
                    for i in (0, 1)
                },
            },
        ),
    ],
    ids=["xgboost", "xgboost-master", "jax", "tf", "tf-single", "paddle", "paddle-ps"],
)
def test_every_kind_gives_the_training_operators_env(cr: dict, expected: dict) -> None:
    assert envs(cr) == expected


def test_the_users_env_comes_first_and_the_port_is_the_users() -> None:
    cr = pytorchjob(1, 1)
    for replica in cr["spec"]["pytorchReplicaSpecs"].values():
        main = replica["template"]["spec"]["containers"][0]
        main["env"] = [{"name": "LOGLEVEL", "value": "DEBUG"}, {"name": "WORLD_SIZE", "value": "9"}]
        main["ports"] = [{"name": "pytorchjob-port", "containerPort": 29500}]
    seen = envs(cr)
    assert seen[("worker", 0)]["LOGLEVEL"] == "DEBUG"
    assert seen[("worker", 0)]["WORLD_SIZE"] == "2"  # appended after the user's, as the operator
    assert seen[("worker", 0)]["MASTER_PORT"] == "29500"


def test_commands_keep_exec_semantics_and_kubernetes_references() -> None:
    """The wrapper runs the container's argv exactly: no word splitting, no shell, and
    Kubernetes' `$(VAR)` references expanded (unknown ones, and `$$`, left as Kubernetes
    leaves them)."""
    script = "import json, sys; print(json.dumps(sys.argv[1:]))"
    argv = ["python3", "-c", script, "a b; echo hi", "$(MASTER_ADDR)", "$(NOPE)", "$$(RANK)", "'"]
    jobs = by_name(expand(pytorchjob(1, 1, command=argv)).objects)
    worker = jobs["Job/exp-worker"]
    assert shell.WAIT_BEGIN in worker["spec"]["template"]["spec"]["containers"][0]["command"][2]
    from kube import run_container

    result = run_container(worker, 0, extra_env={"AICHOR_FOLLOW_INTERVAL": "0.05"})
    printed = json.loads(result.stdout.strip().splitlines()[-1])
    assert printed == ["a b; echo hi", MASTER, "$(NOPE)", "$(RANK)", "'"]


def test_the_pod_template_is_kept() -> None:
    cr = pytorchjob(1, 1)
    pod = cr["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    pod["metadata"] = {"labels": {"team": "nlp"}, "annotations": {"note": "x"}}
    pod["spec"].update(
        {
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}}],
            "initContainers": [{"name": "fetch", "image": "busybox", "command": ["true"]}],
            "nodeSelector": {"pool": "a100"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"podAntiAffinity": {}},
            "securityContext": {"runAsUser": 1000, "fsGroup": 1000},
            "serviceAccountName": "trainer",
        }
    )
    main = pod["spec"]["containers"][0]
    main.update(
        {
            "resources": {"limits": {"nvidia.com/gpu": 2, "memory": "16Gi"}},
            "envFrom": [{"configMapRef": {"name": "settings"}}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            "securityContext": {"privileged": False},
        }
    )
    pod["spec"]["containers"].append({"name": "sidecar", "image": "fluentd"})
    rendered = by_name(expand(cr).objects)["Job/exp-worker"]["spec"]["template"]
    assert rendered["metadata"]["labels"]["team"] == "nlp"
    assert rendered["metadata"]["annotations"] == {"note": "x"}
    spec = rendered["spec"]
    for key in ("initContainers", "nodeSelector", "tolerations", "affinity"):
        assert spec[key] == pod["spec"][key], key
    # (then ours: the progress receiver's CA and token at Trainer's path)
    assert spec["volumes"][:1] == pod["spec"]["volumes"]
    assert [v["name"] for v in spec["volumes"][1:]] == [progress.TRAINER_FILES.name]
    assert spec["securityContext"] == pod["spec"]["securityContext"]
    assert spec["serviceAccountName"] == "trainer"
    assert spec["containers"][1] == {"name": "sidecar", "image": "fluentd"}
    out = spec["containers"][0]
    for key in ("resources", "envFrom", "securityContext"):
        assert out[key] == main[key], key
    assert out["volumeMounts"][:1] == main["volumeMounts"]
    assert spec["subdomain"] == "exp" and spec["restartPolicy"] == "OnFailure"


# Without runPolicy.backoffLimit the operator restarts a replica alone, for ever (OnFailure in
# place, ExitCode by a new pod on a signal's code), a Never one not at all.
ONE_BY_ONE = [
    ("OnFailure", "OnFailure", limits.INT32, None),
    ("Never", "Never", 0, ["Ignore"]),
    ("ExitCode", "Never", limits.INT32, ["Ignore", "FailJob"]),
]


@pytest.mark.parametrize("policy, pod_restart, backoff, failure_rules", ONE_BY_ONE)
def test_restart_policies_without_a_backoff_limit(policy, pod_restart, backoff, failure_rules):
    cr = pytorchjob(1, 1)
    for replica in cr["spec"]["pytorchReplicaSpecs"].values():
        replica["restartPolicy"] = policy
    job = by_name(expand(cr).objects)["Job/exp-master"]["spec"]
    assert job["template"]["spec"]["restartPolicy"] == pod_restart
    assert job["backoffLimit"] == backoff
    rules = job.get("podFailurePolicy", {}).get("rules")
    assert (rules and [r["action"] for r in rules]) == (failure_rules or None)
    assert "class Lead" not in json.dumps(job)
    if policy == "ExitCode":  # the program's own failures (1-127) end it, signals are retried
        codes = rules[1]["onExitCodes"]
        assert codes["containerName"] == "pytorch" and codes["values"] == list(range(1, 128))


def regroup_arguments(job: dict) -> list[str]:
    """The group restart's arguments in a Job's command: lead, port, budget, rules, …"""
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "class Lead(Replica)" in script
    return shlex.split(script.rsplit('\' "$$1" ', 1)[1])


EXIT_CODE_RULE = ["fail", "In", list(range(1, 128))]
# With it, every replica restarts as a group when one fails, at most backoffLimit times: the
# pods restart nothing alone; a Never type's failure, or ExitCode's 1-127, fails at once.
AS_A_GROUP = [
    ({"Master": "OnFailure", "Worker": "OnFailure"}, []),
    (
        {"Master": "ExitCode", "Worker": "ExitCode"},
        [["exp-master", *EXIT_CODE_RULE], ["exp-worker", *EXIT_CODE_RULE]],
    ),
    ({"Master": "Never", "Worker": "OnFailure"}, [["exp-master", "fail", None, []]]),
]


@pytest.mark.parametrize("policies, rules", AS_A_GROUP)
def test_a_backoff_limit_restarts_the_whole_group(policies, rules):
    cr = pytorchjob(1, 2, runPolicy={"backoffLimit": 3})
    for type_name, policy in policies.items():
        cr["spec"]["pytorchReplicaSpecs"][type_name]["restartPolicy"] = policy
    for job in (o for o in expand(cr).objects if o["kind"] == "Job"):
        spec = job["spec"]
        assert spec["template"]["spec"]["restartPolicy"] == "Never"
        assert spec["backoffLimit"] == 3  # (a pod lost as a whole is made again)
        actions = [r["action"] for r in spec["podFailurePolicy"]["rules"]]
        assert actions == ["Ignore", "FailJob"]  # disruptions free; a replica that gave up
        args = regroup_arguments(job)
        assert args[0] == "exp-master-0.exp.default.svc.cluster.local" and args[2] == "3"
        given = [[jobs[0], action, op, codes] for _, action, jobs, op, codes in json.loads(args[3])]
        assert given == rules


def test_an_elastic_policy_restarts_its_members_in_place_within_the_backoff_limit():
    """Elastic: torchrun's agents re-form their rendezvous around a member restarted alone, so
    no group restart (it would stop the members that train on); each restarts in place, the
    Job's backoffLimit counting the restarts as the operator's does; the image's entrypoint
    needs no command to be re-run."""
    policy = {"minReplicas": 2, "maxReplicas": 3, "maxRestarts": 3}
    cr = pytorchjob(None, 3, None, runPolicy={"backoffLimit": 3}, elasticPolicy=policy)
    cr["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "OnFailure"
    (job,) = [o for o in expand(cr).objects if o["kind"] == "Job"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert job["spec"]["backoffLimit"] == 3 and "podFailurePolicy" not in job["spec"]
    assert "class Lead" not in json.dumps(job)


@pytest.mark.parametrize(
    "policies",
    [{"Master": "Never", "Worker": "Never"}, {"Master": "OnFailure", "Worker": "OnFailure"}],
)
def test_no_group_restart_without_a_budget(policies):
    """Every type Never (the operator counts no restart), or a backoffLimit of 0."""
    limit = 3 if "Never" in policies.values() else 0
    cr = pytorchjob(1, 1, runPolicy={"backoffLimit": limit})
    for type_name, policy in policies.items():
        cr["spec"]["pytorchReplicaSpecs"][type_name]["restartPolicy"] = policy
    jobs = [o for o in expand(cr).objects if o["kind"] == "Job"]
    assert all(j["spec"]["backoffLimit"] == 0 for j in jobs)
    assert "class Lead" not in json.dumps(jobs)


def test_a_group_restart_refuses_the_image_s_entrypoint():
    cr = pytorchjob(1, 1, command=None, runPolicy={"backoffLimit": 2})
    with pytest.raises(ManifestError) as error:
        expand(cr)
    problem = error.value.problems[0]
    assert problem.path == "spec.pytorchReplicaSpecs.Master.template.spec.containers"
    assert "spec.runPolicy.backoffLimit" in problem.message and "command" in problem.message


@pytest.mark.parametrize("wait", ["ready", "complete"])
def test_a_suspended_resource_is_not_awaited(wait: str) -> None:
    """Its Jobs run no pod until resumed: `pulumi up` waits for none of them, even the gates
    of MPIJob's WaitForWorkersReady (it would wait out every timeout otherwise)."""
    cr = mpijob(2, None, launcherCreationPolicy="WaitForWorkersReady", runPolicy={"suspend": True})
    jobs = [o for o in expand(cr, wait=wait).objects if o["kind"] == "Job"]
    assert all(j["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true" for j in jobs)
    assert all(j["spec"]["suspend"] is True for j in jobs)


def test_run_policy() -> None:
    run = {"ttlSecondsAfterFinished": 600, "activeDeadlineSeconds": 3600, "suspend": True}
    jobs = [o for o in expand(pytorchjob(1, 1, runPolicy=run)).objects if o["kind"] == "Job"]
    for job in jobs:
        assert job["spec"]["ttlSecondsAfterFinished"] == 600
        assert job["spec"]["activeDeadlineSeconds"] == 3600
        assert job["spec"]["suspend"] is True
    # no backoffLimit: the operator restarts OnFailure replicas for ever, Never ones not at all
    assert jobs[0]["spec"]["backoffLimit"] == limits.INT32


# Replica types whose env differs per replica in ways Kubernetes cannot compute from an
# index (RANK = index + 1 beside a master, rank 0's own address), and types where it can.
COMMANDLESS = [
    ("PyTorchJob", {"Master": 1, "Worker": 3}, ["worker"]),
    ("PyTorchJob", {"Worker": 3}, []),
    ("XGBoostJob", {"Master": 1, "Worker": 2}, ["worker"]),
    ("PaddleJob", {"Worker": 3}, ["worker"]),
    ("PaddleJob", {"Master": 2, "Worker": 2}, ["master"]),
    ("JAXJob", {"Worker": 3}, []),
    ("TFJob", {"Chief": 1, "Worker": 2, "PS": 1}, []),
]


@pytest.mark.parametrize("kind, types, apart", COMMANDLESS)
def test_a_container_without_command_sees_the_operators_env(kind, types, apart) -> None:
    """A container that runs its image's entrypoint sees exactly the env it would see with a
    command (the operator's, replica by replica): an Indexed Job where every value is the
    completion index or constant, else (`apart`) one Job per replica with literal values,
    each pod with its replica's host name; the entrypoint is not wrapped."""
    commandless = custom_resource(kind, types, command=None)
    assert envs(commandless) == envs(custom_resource(kind, types))
    jobs = [o for o in expand(commandless).objects if o["kind"] == "Job"]
    for job in jobs:
        role = job["metadata"]["labels"]["app.kubernetes.io/component"]
        pod = job["spec"]["template"]["spec"]
        assert "command" not in pod["containers"][0] and "args" not in pod["containers"][0]
        if role in apart:
            assert (job["spec"]["completionMode"], job["spec"]["completions"]) == ("NonIndexed", 1)
            assert pod["hostname"] == job["metadata"]["name"]
        else:
            assert job["spec"]["completionMode"] == "Indexed" and "hostname" not in pod
    per_replica = sorted(
        j["metadata"]["name"] for j in jobs if "hostname" in j["spec"]["template"]["spec"]
    )
    expected = [f"exp-{role}-{i}" for role in apart for i in range(types[role.capitalize()])]
    assert per_replica == sorted(expected)
    assert limits.check(jobs) == []


def test_a_job_per_replica_is_bounded() -> None:
    """Each of those Jobs is a resource of the stack: past `MAX_JOBS` in all, the error names
    the replicas and the way to one Indexed Job."""
    with pytest.raises(ManifestError) as error:
        expand(custom_resource("PyTorchJob", {"Master": 1, "Worker": 5000}, command=None))
    assert (
        "spec.pytorchReplicaSpecs.Worker.replicas: 5,000 replicas whose image's entrypoint "
        "needs RANK, PET_NODE_RANK per replica: a Job each, and at most 1,000 Jobs in all"
    ) in str(error.value)
    assert expand(custom_resource("PyTorchJob", {"Master": 1, "Worker": 5000})).objects


def test_jobs_after_a_group_of_replica_jobs_wait_for_each() -> None:
    """Ordering holds per replica: a group created after one whose replicas have a Job each
    depends on every one of those Jobs, and each is awaited until its one pod is Ready."""
    cr = custom_resource("PaddleJob", {"Master": 2, "Worker": 1}, command=None)
    rendering = expand(cr, wait="ready")
    jobs = {o["metadata"]["name"]: o for o in rendering.objects if o["kind"] == "Job"}
    assert sorted(jobs) == ["exp-master-0", "exp-master-1", "exp-worker"]
    ready = "jsonpath={$[?@.ready==1 || @.succeeded==1]}"
    assert all(
        jobs[f"exp-master-{i}"]["metadata"]["annotations"]["pulumi.com/waitFor"] == ready
        for i in range(2)
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"kind": "MXJob"}, "kind: kubeflow.org/v1 MXJob is not a custom resource aichor-iac"),
        ({"spec": {"pytorchReplicaSpecs": {}}}, "PyTorchJob needs a Master or Worker with"),
        ({"spec.Chief": {}}, "spec.pytorchReplicaSpecs.Chief: PyTorchJob has no Chief"),
        ({"spec.Master.replicas": 2}, "spec.pytorchReplicaSpecs.Master.replicas: must be 1"),
        ({"spec.Worker.restartPolicy": "Always"}, "Worker.restartPolicy: Always restarts"),
        (
            {"spec.Worker.template": {"spec": {}}},
            "template.spec.containers: Required value",
        ),
        ({"spec.runPolicy": {"schedulingPolicy": {"queue": "q"}}}, "set aichor:gangScheduler"),
        (
            {"spec.runPolicy": {"schedulingPolicy": {"minAvailable": 0}}},
            "schedulingPolicy.minAvailable: Input should be greater than or equal to 1",
        ),
        ({"spec.runPolicy": {"backofLimit": 1}}, "did you mean 'backoffLimit'?"),
    ],
)
def test_what_cannot_be_honoured_is_a_clear_error(change: dict, message: str) -> None:
    cr = pytorchjob(1, 1)
    specs = cr["spec"]["pytorchReplicaSpecs"]
    for key, value in change.items():
        if key.startswith("spec.") and key.count(".") == 1 and key[5:] in ("Chief", "Master"):
            specs[key[5:]] = value or specs["Worker"]
        elif key.startswith("spec.Master.") or key.startswith("spec.Worker."):
            _, type_name, field = key.split(".")
            specs[type_name][field] = value
        elif key.startswith("spec."):
            cr["spec"][key[5:]] = value
        else:
            cr[key] = value
    with pytest.raises(ManifestError) as error:
        expand(cr)
    assert message in str(error.value)


@pytest.mark.parametrize(
    "cr, message",
    [
        (custom_resource("XGBoostJob", {"Worker": 2}), "XGBoostJob needs a Master with replicas"),
        (custom_resource("TFJob", {"PS": 2}), "TFJob needs a Chief or Worker with replicas"),
        (
            custom_resource("TFJob", {"Worker": 2}, successPolicy="AllWorkers"),
            "spec.successPolicy: AllWorkers",
        ),
        (
            custom_resource("TFJob", {"Worker": 2}, enableDynamicWorker=True),
            "spec.enableDynamicWorker: a sparse TF_CONFIG",
        ),
        (
            custom_resource("PaddleJob", {"Worker": 2}, elasticPolicy={"minReplicas": 1}),
            "spec.elasticPolicy: elastic PaddlePaddle jobs",
        ),
        (
            custom_resource("JAXJob", {"Worker": 2}, jaxReplicaSpecs={"Chief": {}}),
            "JAXJob has no Chief; its replica types are Worker",
        ),
        (
            pytorchjob(None, 2, nprocPerNode="2", elasticPolicy={"nProcPerNode": 2}),
            "spec.elasticPolicy.nProcPerNode: must not be used with nprocPerNode",
        ),
        (
            {**pytorchjob(), "metadata": {"name": "My_Job"}},
            "metadata.name: must be a DNS-1035 label",
        ),
    ],
    ids=[
        "xgb-master",
        "tf-entry",
        "tf-success",
        "tf-dynamic",
        "paddle-elastic",
        "jax-type",
        "nproc-twice",
        "name",
    ],
)
def test_each_kinds_rules(cr: dict, message: str) -> None:
    with pytest.raises(ManifestError) as error:
        expand(cr)
    assert message in str(error.value)


def _without_image(cr: dict) -> dict:
    del cr["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"]
    return cr


def _with(cr: dict, **spec: Any) -> dict:
    cr["spec"].update(spec)
    return cr


@pytest.mark.parametrize(
    "cr, message",
    [
        (
            custom_resource("MPIJob", {"Launcher": 1, "Master": 1, "Worker": 2}),
            "test.yaml:18: spec.mpiReplicaSpecs.Master: MPIJob has no Master; its replica "
            "types are Launcher, Worker",
        ),
        (
            _without_image(custom_resource("PyTorchJob", {"Master": 1, "Worker": 2})),
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers.0.image: missing: every "
            "container needs an image",
        ),
        (
            _with(custom_resource("PyTorchJob", {"Worker": 2}), cleanPodPolicy="None"),
            'spec.cleanPodPolicy: unknown field "spec.cleanPodPolicy" (PyTorchJob\'s schema, '
            "v1.9.4): it is under spec.runPolicy since kubeflow.org/v1 (v1beta2 had it here): "
            "move it to spec.runPolicy.cleanPodPolicy",
        ),
        (
            _with(custom_resource("TFJob", {"Worker": 2}), backoffLimit=3),
            "it is under spec.runPolicy since kubeflow.org/v1",
        ),
    ],
    ids=["mpi-master", "no-image", "v1beta2-cleanPodPolicy", "v1beta2-backoffLimit"],
)
def test_what_the_operator_or_api_server_refuses_is_refused_naming_the_field(
    cr: dict, message: str
) -> None:
    with pytest.raises(ManifestError) as error:
        expand(cr)
    assert message in str(error.value)


def test_the_operators_container_is_required() -> None:
    cr = custom_resource("JAXJob", {"Worker": 2})
    cr["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main"
    with pytest.raises(ManifestError) as error:
        expand(cr)
    assert "containers: needs a container named jax" in str(error.value)


# The examples that need a documented fix (docs/coming-from/kubeflow.md).
FIXES = {"xgboost-smoke-dist-xgboostjob_v1alpha1_rabit_test": {"v1alpha1 template"}}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_public_examples_render_valid_objects(path: Path) -> None:
    """Each example renders as it is, or is refused with errors whose documented fixes make
    it render (`runnable`); the fixes needed are exactly those the docs list."""
    cr, fixes = runnable(path)
    assert fixes == FIXES.get(path.stem, set())
    objects = expand(cr).objects
    for obj in objects:
        schemas.validate(obj)
    assert limits.check(objects) == []
    jobs = [o for o in objects if o["kind"] == "Job"]
    pods: dict[str, int] = {}  # replica type -> pods of its Jobs
    for job in jobs:
        role = job["metadata"]["labels"]["app.kubernetes.io/component"]
        pods[role] = pods.get(role, 0) + job["spec"]["completions"]
    assert pods == {t.lower(): r.get("replicas", 1) for t, r in specs(cr).items()}
    distributed = sum(j["spec"]["completions"] for j in jobs) > 1
    for job in jobs:
        names = declared(job, KINDS[cr["kind"]][1])
        assert names >= (EXAMPLE_ENV[cr["kind"]] if distributed else {"JOB_COMPLETION_INDEX"})


# What every replica of each kind gets (the env tables above check the values).
EXAMPLE_ENV = {
    "PyTorchJob": {"PYTHONUNBUFFERED", "PET_NNODES"},
    "XGBoostJob": {"MASTER_ADDR", "RANK", "WORLD_SIZE"},
    "JAXJob": {"COORDINATOR_ADDRESS", "PROCESS_ID"},
    "TFJob": {"TF_CONFIG"},
    "PaddleJob": {"PADDLE_MASTER", "PADDLE_NNODES"},
    "MPIJob": {"K_MPI_JOB_ROLE"},
}


def test_rendering_is_deterministic() -> None:
    path = EXAMPLES[0]
    first = subprocess.run(
        [str(ROOT / ".venv/bin/aichor-iac"), "render", str(path)], capture_output=True, text=True
    )
    again = subprocess.run(
        [str(ROOT / ".venv/bin/aichor-iac"), "render", str(path)], capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout == again.stdout and re.search(r"kind: Job", first.stdout)


def test_no_network_policy_unless_asked() -> None:
    """The Training Operator adds no NetworkPolicy (its examples download their data): a
    custom resource gets one only when the stack asks for it. Unasked, the progress
    receiver's own closes its port alone, and only on the entry point's pods."""
    policies = [o for o in expand(pytorchjob()).objects if o["kind"] == "NetworkPolicy"]
    assert [p["metadata"]["name"] for p in policies] == ["exp-progress"]
    assert policies[0]["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "master"
    )
    assert not [
        o for o in expand(pytorchjob(), progress=False).objects if o["kind"] == "NetworkPolicy"
    ]
    asked = expand(pytorchjob(), network_policy=True).objects
    assert [o["kind"] for o in asked].count("NetworkPolicy") == 1


def mpijob(workers: int = 2, worker_command: list[str] | None = None, **spec: Any) -> dict:
    cr = custom_resource("MPIJob", {"Launcher": 1, "Worker": workers}, **spec)
    cr["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"] = (
        worker_command
    )
    if worker_command is None:
        del cr["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"]
    return cr


OMPI = {
    "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
    "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
    "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
}


@pytest.mark.parametrize(
    "implementation, launcher_env",
    [
        ("OpenMPI", {**OMPI, "OMPI_MCA_orte_set_default_slots": "4"}),
        (
            "Intel",
            {
                "I_MPI_HYDRA_HOST_FILE": "/etc/mpi/hostfile",
                "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": "-o ConnectionAttempts=10",
                "I_MPI_PERHOST": "4",
            },
        ),
        (
            "MPICH",
            {
                "HYDRA_HOST_FILE": "/etc/mpi/hostfile",
                "HYDRA_LAUNCH_EXTRA_ARGS": "-o ConnectionAttempts=10",
            },
        ),
    ],
)
def test_mpijob_replicas_see_the_mpi_operators_env(implementation: str, launcher_env: dict):
    cr = mpijob(2, PRINT_ENV, slotsPerWorker=4, mpiImplementation=implementation)
    gpu_off = {"NVIDIA_VISIBLE_DEVICES": "", "NVIDIA_DRIVER_CAPABILITIES": ""}
    assert envs(cr) == {
        ("launcher", 0): {"K_MPI_JOB_ROLE": "launcher", **launcher_env, **gpu_off},
        ("worker", 0): {"K_MPI_JOB_ROLE": "worker"},
        ("worker", 1): {"K_MPI_JOB_ROLE": "worker"},
    }


def test_mpijob_files_keys_and_the_default_worker_command():
    """The hostfile and discover_hosts.sh on the launcher at /etc/mpi, the key pair at
    sshAuthMountPath (default mode for a non-root path, as the operator), sshd -De for a
    worker without a command, the launcher's short name in the workers' DNS search path."""
    cr = mpijob(2, None, sshAuthMountPath="/home/mpiuser/.ssh")
    objects = by_name(expand(cr).objects)
    config = objects["ConfigMap/exp-config"]["data"]
    workers = [host("worker", i) for i in range(2)]
    assert config["hostfile"] == "".join(f"{w} slots=1\n" for w in workers)
    assert config["discover_hosts.sh"] == "#!/bin/sh\n" + "".join(f"echo {w}\n" for w in workers)
    launcher = objects["Job/exp-launcher"]["spec"]["template"]["spec"]
    worker = objects["Job/exp-worker"]["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in launcher["containers"][0]["volumeMounts"]}
    assert mounts == {
        "ssh-auth": "/home/mpiuser/.ssh",
        "mpi-job-config": "/etc/mpi",
        progress.TRAINER_FILES.name: progress.MOUNT_PATH,  # (ours: Trainer's CA and token)
    }
    volumes = {v["name"]: v["projected"] for v in launcher["volumes"]}
    assert volumes["ssh-auth"]["defaultMode"] == 0o644
    files = [i["path"] for i in volumes["ssh-auth"]["sources"][0]["secret"]["items"]]
    assert files == ["id_rsa", "id_rsa.pub", "authorized_keys"]
    modes = {
        i["path"]: i["mode"] for i in volumes["mpi-job-config"]["sources"][0]["configMap"]["items"]
    }
    assert modes == {"hostfile": 0o444, "discover_hosts.sh": 0o555}
    assert worker["containers"][0]["command"][-1] == "/usr/sbin/sshd -De"
    assert worker["dnsConfig"] == {"searches": ["exp.default.svc.cluster.local"]}
    # the launcher starts once every worker resolves (their SSH port is the image's)
    wait = wait_of(launcher)
    assert f'aichor_wait "{host("worker", "$$i")}" ""' in wait and ":22" not in wait


def test_mpijob_launcher_as_worker_and_creation_policy():
    cr = mpijob(2, None, runLauncherAsWorker=True, launcherCreationPolicy="WaitForWorkersReady")
    objects = expand(cr).objects
    named = by_name(objects)
    hostfile = named["ConfigMap/exp-config"]["data"]["hostfile"].splitlines()
    assert hostfile[0] == f"{host('launcher', 0)} slots=1" and len(hostfile) == 3
    launcher_env = {
        e["name"]
        for e in named["Job/exp-launcher"]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert "NVIDIA_VISIBLE_DEVICES" not in launcher_env  # it runs ranks: it may have GPUs
    # WaitForWorkersReady: the launcher's Job is created once every worker is Ready
    worker = named["Job/exp-worker"]["metadata"]["annotations"]
    assert worker["pulumi.com/waitFor"] == "jsonpath={$[?@.ready==2 || @.succeeded==2]}"
    kinds = [f"{o['kind']}/{o['metadata']['name']}" for o in objects]
    assert kinds.index("Job/exp-worker") < kinds.index("Job/exp-launcher")


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_convert_gives_a_valid_manifest_or_says_why_not(path: Path) -> None:
    """Every public example converts to a manifest that is valid and renders the same Jobs,
    or is refused with the reason (an entrypoint it cannot know)."""
    cr, _ = runnable(path)
    resource = doors.validate(cr, "cr.yaml")
    try:
        conversion = convert(resource)
    except ManifestError as error:
        assert "the image's entrypoint is not known here" in str(error)
        return
    converted = doors.validate(conversion.manifest, "converted.yaml")
    jobs = [o["metadata"]["name"] for o in expand(cr).objects if o["kind"] == "Job"]
    again = [
        o["metadata"]["name"] for o in expand(conversion.manifest).objects if o["kind"] == "Job"
    ]
    assert sorted(jobs) == sorted(again) and converted.spec.operator == resource.spec.operator


def test_convert_carries_resources_placement_env_and_says_what_is_lost() -> None:
    cr = pytorchjob(
        1, 2, command=["python3", "train.py", "--lr", "0.1"], runPolicy={"backoffLimit": 2}
    )
    for replica in cr["spec"]["pytorchReplicaSpecs"].values():
        pod = replica["template"]["spec"]
        pod["nodeSelector"] = {"pool": "a100"}
        pod["tolerations"] = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
        pod["volumes"] = [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}]
        pod["serviceAccountName"] = "trainer"
        pod["containers"][0].update(
            {
                "resources": {
                    "requests": {"cpu": "4", "memory": "16Gi"},
                    "limits": {"cpu": "8", "nvidia.com/gpu": 2},
                },
                "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
                "env": [
                    {"name": "LR", "value": "0.1"},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "t"}}},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                ],
            }
        )
    conversion = convert(doors.validate(cr, "cr.yaml"))
    spec = conversion.manifest["spec"]
    assert spec["command"] == "python3 train.py --lr 0.1"
    assert "restartPolicy" not in spec  # (the whole group's restart: the stack's setting)
    assert spec["types"]["Worker"] == {
        "count": 2,
        "resources": {
            "cpus": 4,
            "memory": 16,
            "cpuLimitRatio": 2,
            "accelerators": {"gpu": {"count": 2}},
            "extraSelectors": {"pool": "a100"},
            "extraTolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "shmSizeGB": 8,
        },
    }
    assert spec["env"] == [
        {"name": "LR", "value": "0.1"},
        {"name": "TOKEN", "secretKeyRef": {"name": "hf", "key": "t"}},
    ]
    lost = "\n".join(conversion.lost)
    assert "spec.pytorchReplicaSpecs.Worker.template.spec.serviceAccountName" in lost
    assert "containers.0.env.2: NODE from fieldRef" in lost
    assert "PET_NPROC_PER_NODE" not in lost
    assert "spec.runPolicy.backoffLimit: every replica restarts together, at most 2" in lost
    assert "set the stack's aichor:maxRestarts: 2" in lost
    doors.validate(conversion.manifest)


@pytest.mark.parametrize(
    "run, master, worker, said",
    [
        ({}, "OnFailure", "OnFailure", "restartPolicy: replicas are not restarted in place"),
        (
            {"backoffLimit": 1},
            "ExitCode",
            "ExitCode",
            "Worker.restartPolicy: ExitCode: a failure of Worker on exit codes In 1-127 fails "
            "the experiment at once",
        ),
        (
            {"backoffLimit": 1},
            "Never",
            "OnFailure",
            "Master.restartPolicy: Never: a failure of Master fails the experiment at once",
        ),
    ],
)
def test_convert_says_how_replicas_restart(run, master, worker, said):
    cr = pytorchjob(1, 1, command=["python3", "train.py"], runPolicy=run)
    cr["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] = master
    cr["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = worker
    assert said in "\n".join(convert(doors.validate(cr, "cr.yaml")).lost)


def test_convert_on_the_command_line(tmp_path: Path) -> None:
    cli = str(ROOT / ".venv/bin/aichor-iac")
    result = subprocess.run(
        [cli, "convert", str(ROOT / "tests/kubeflow/mpi-pi.yaml")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# ") and "spec.sshAuthMountPath" in result.stdout
    path = tmp_path / "pi.yaml"
    path.write_text(result.stdout)
    validated = subprocess.run([cli, "validate", str(path)], capture_output=True, text=True)
    assert validated.returncode == 0, validated.stderr
    refused = subprocess.run(
        [cli, "convert", str(ROOT / "examples/pytorch.yaml")], capture_output=True, text=True
    )
    assert refused.returncode == 2 and "already an AIchor manifest" in refused.stderr


@pytest.mark.parametrize(
    ("scheduler", "expected"),
    [
        (  # Volcano: the queue ("default" unless given) and the priority class
            "volcano",
            {
                "minMember": 2,
                "queue": "team-a",
                "priorityClassName": "high",
                "minResources": {"cpu": "4"},
            },
        ),
        (  # scheduler-plugins: the timeout
            "coscheduling",
            {"minMember": 2, "scheduleTimeoutSeconds": 60, "minResources": {"cpu": "4"}},
        ),
    ],
)
def test_scheduling_policy_fills_the_gangs_pod_group(scheduler: str, expected: dict) -> None:
    # As release-1.9's ReconcileJobs fills the PodGroup when gang scheduling is on.
    policy = {
        "minAvailable": 2,
        "queue": "team-a",
        "priorityClass": "high",
        "minResources": {"cpu": "4"},
        "scheduleTimeoutSeconds": 60,
    }
    cr = pytorchjob(1, 2, runPolicy={"schedulingPolicy": policy})
    group = next(o for o in expand(cr, gang_scheduler=scheduler).objects if o["kind"] == "PodGroup")
    assert group["spec"] == expected
    plain = next(
        o
        for o in expand(pytorchjob(1, 2), gang_scheduler="volcano").objects
        if o["kind"] == "PodGroup"
    )
    assert plain["spec"] == {"minMember": 3}  # (no policy: every pod, as the operator)
    cr["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] = 4
    with pytest.raises(ManifestError, match="minAvailable: is more than the 3 pods of the gang"):
        expand(cr, gang_scheduler=scheduler)


def test_a_mount_where_the_operator_mounts_its_keys_is_refused() -> None:
    # The API server refuses two mounts at one path: the user's at /root/.ssh and the MPI
    # Operator's key pair at sshAuthMountPath (its default) are caught before anything exists.
    cr = custom_resource("MPIJob", {"Launcher": 1, "Worker": 1})
    for replica in specs(cr).values():
        pod = replica["template"]["spec"]
        pod["volumes"] = [{"name": "mine", "emptyDir": {}}]
        pod["containers"][0]["volumeMounts"] = [{"name": "mine", "mountPath": "/root/.ssh"}]
    with pytest.raises(ManifestError, match=r"mounts two volumes at '/root/\.ssh'"):
        expand(cr)


@pytest.mark.parametrize(
    ("argv", "stack", "experiment"),
    [
        ([], None, "tfjob-dev"),  # the CLI's default stack
        (["--stack-config", "STACK"], "Pulumi.team-a.yaml", "tfjob-team-a"),
        (["--name", "mine"], None, "mine"),
    ],
)
def test_a_generate_name_is_completed_by_the_stack_name(tmp_path, capsys, argv, stack, experiment):
    cr = pytorchjob()
    cr["metadata"] = {"generateName": "tfjob-"}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cr))
    if stack:
        (tmp_path / stack).write_text("config: {}\n")
        argv = [a.replace("STACK", str(tmp_path / stack)) for a in argv]
    assert cli.main(["render", str(path), *argv]) == 0
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(capsys.readouterr().out)]
    assert f"{experiment}-master" in names and f"{experiment}-worker" in names


@pytest.mark.parametrize(
    ("metadata", "error"),
    [
        ({}, "metadata.name: required; add it (or generateName)"),
        ({"generateName": "TF_"}, "metadata.generateName: must begin a DNS-1035 label"),
        ({"generateName": "t" * 59}, "at most 58 characters (the stack's name follows it)"),
        ({"name": "Exp"}, "metadata.name: must be a DNS-1035 label, as the operator's webhook"),
    ],
)
def test_a_name_or_generate_name_is_held_to_the_webhook_rules(metadata, error):
    cr = pytorchjob()
    cr["metadata"] = metadata
    with pytest.raises(ManifestError, match=re.escape(error)):
        doors.validate(cr)


# A HorizontalPodAutoscaler metric (autoscaling/v2 MetricSpec), as the operator passes it on
CPU_METRIC = {
    "type": "Resource",
    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
}


def test_an_elastic_policy_with_metrics_runs_its_workers_at_their_replicas() -> None:
    cr = pytorchjob(
        1, 3, elasticPolicy={"minReplicas": 1, "maxReplicas": 8, "metrics": [CPU_METRIC]}
    )
    experiment = doors.validate(cr, "cr.yaml")
    blueprint = planning.blueprint(experiment, Settings(), "exp")
    (warning,) = [w for w in planning.warnings(blueprint) if "HorizontalPodAutoscaler" in w.message]
    assert warning.path == "spec.elasticPolicy.metrics" and "replicas (3)" in warning.message
    without = pytorchjob(1, 3, elasticPolicy={"minReplicas": 1, "maxReplicas": 8})
    assert expand(cr).objects == expand(without).objects  # the pods as the operator's
