"""JobSet custom resources in, plain Jobs out: a `jobset.x-k8s.io/v1alpha2` JobSet renders as
the JobSet controller (v0.12.0) would make its Jobs — names, host names, labels and
annotations, the headless Service — with its startup order, dependencies and success policy as
Pulumi's order and awaits. The public examples of kubernetes-sigs/jobset v0.12.0
(tests/jobset/, unchanged) render valid objects or are refused for the reasons
docs/coming-from/jobset.md lists."""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path
from typing import Any

import pytest
import schemas
import yaml
from conftest import ROOT, expand
from pulumi_up import Model, up

from aichor_iac import doors, planning
from aichor_iac.convert import convert
from aichor_iac.local import LocalRunFailed, run_experiment
from aichor_iac.problems import ManifestError
from aichor_iac.rules import limits
from aichor_iac.settings import Settings

EXAMPLES = sorted((ROOT / "tests" / "jobset").glob("*.yaml"))
PREFIX = "jobset.sigs.k8s.io/"


def job(name: str, command: str = "true", **spec: Any) -> dict[str, Any]:
    """A replicated Job `name`: one Job of one pod running `command`, unless `spec` says."""
    pod = {
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", command]}]
        }
    }
    return {"name": name, "template": {"spec": {**spec, "template": pod}}}


def jobset(*rjobs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {"replicatedJobs": list(rjobs), **spec},
    }


def jobs(data: Any, **settings: Any) -> dict[str, dict[str, Any]]:
    objects = expand(data, name="js", **settings).objects
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "Job"}


def pod(job_object: dict[str, Any]) -> dict[str, Any]:
    return job_object["spec"]["template"]


def refusals(data: Any) -> dict[str, str]:
    with pytest.raises(ManifestError) as error:
        expand(data)
    return {p.path: p.message for p in error.value.problems}


def test_jobs_host_names_and_service_are_the_controllers() -> None:
    """Each replicated Job is `replicas` Indexed Jobs `<jobset>-<rjob>-<j>` of `completions`
    pods (`parallelism` at once), whose pod i is the host `<jobset>-<rjob>-<j>-<i>` in the
    headless Service named by the subdomain; restartPolicy OnFailure and backoffLimit 6 by
    default (the webhook's and Kubernetes')."""
    data = jobset(
        job("leader"),
        {**job("workers", completions=3, parallelism=2, backoffLimit=0), "replicas": 2},
        network={"subdomain": "net"},
    )
    objects = expand(data, name="js").objects
    (service,) = [o for o in objects if o["kind"] == "Service"]
    assert service["metadata"]["name"] == "net" and service["spec"]["clusterIP"] == "None"
    found = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Job"}
    assert list(found) == ["js-leader-0", "js-workers-0", "js-workers-1"]
    workers = found["js-workers-1"]["spec"]
    assert (workers["completions"], workers["parallelism"], workers["backoffLimit"]) == (3, 2, 0)
    assert workers["completionMode"] == "Indexed"
    assert workers["template"]["spec"]["subdomain"] == "net"
    assert workers["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert found["js-leader-0"]["spec"]["backoffLimit"] == 6
    # what a worker's command reaches: the leader's host in that Service
    assert planning.blueprint(doors.validate(data), name="js").names.host("leader-0", 0) == (
        "js-leader-0-0.net.default.svc.cluster.local"
    )
    for obj in objects:
        schemas.validate(obj)
    assert limits.check(objects) == []


def test_the_controllers_labels_and_annotations() -> None:
    """labelAndAnnotateObject's labels (the same as annotations) on every pod: indexes within
    the replicated Job, the JobSet and the group; the Job's key; the coordinator's host."""
    data = jobset(
        {**job("a"), "replicas": 2},
        {**job("b"), "groupName": "g"},
        {**job("c"), "replicas": 2, "groupName": "g"},
        coordinator={"replicatedJob": "c", "jobIndex": 1, "podIndex": 0},
    )
    found = jobs(data)
    expected = {
        # job: (replicatedjob-replicas, job-index, job-global-index, group, group-replicas,
        #       job-group-index)
        "js-a-1": ("2", "1", "1", "default", "2", "1"),
        "js-b-0": ("1", "0", "2", "g", "3", "0"),
        "js-c-1": ("2", "1", "4", "g", "3", "2"),
    }
    for name, values in expected.items():
        labels = pod(found[name])["metadata"]["labels"]
        keys = (
            "replicatedjob-replicas",
            "job-index",
            "job-global-index",
            "group-name",
            "group-replicas",
            "job-group-index",
        )
        assert tuple(labels[PREFIX + k] for k in keys) == values, name
        assert labels[PREFIX + "jobset-name"] == "js"
        assert labels[PREFIX + "global-replicas"] == "5"
        assert labels[PREFIX + "restart-attempt"] == "0"
        key = hashlib.sha1(f"default/{name}".encode()).hexdigest()
        assert labels[PREFIX + "job-key"] == key
        assert labels[PREFIX + "coordinator"] == "js-c-1-0.js"
        annotations = pod(found[name])["metadata"]["annotations"]
        assert {k: v for k, v in annotations.items() if k.startswith(PREFIX)} == {
            k: v for k, v in labels.items() if k.startswith(PREFIX)
        }


def test_pods_see_only_kubernetes_env() -> None:
    """The JobSet controller sets no env: a pod sees its own and JOB_COMPLETION_INDEX (as
    Kubernetes gives an Indexed Job's pods); its command runs unchanged. (Beside it, ours:
    Trainer's progress variables, with aichor:progress, tests/k8s/test_progress_objects.py.)"""
    found = jobs(jobset(job("a", "echo hi", completions=2)), progress=False)
    container = pod(found["js-a-0"])["spec"]["containers"][0]
    assert [e["name"] for e in container["env"]] == ["JOB_COMPLETION_INDEX"]
    assert container["command"] == ["sh", "-c", "echo hi"]


def awaits_of(found: dict[str, dict[str, Any]]) -> dict[str, str]:
    out = {}
    for name, obj in found.items():
        annotations = obj["metadata"]["annotations"]
        out[name] = annotations.get("pulumi.com/waitFor") or (
            "nothing" if annotations.get("pulumi.com/skipAwait") else "completion"
        )
    return out


def dependencies(data: Any, **settings: Any) -> dict[str, list[str]]:
    """Each Job's Jobs it is created after (its Pulumi dependencies)."""
    rendering = expand(data, name="js", **settings)
    names = {r.urn: r.inputs["metadata"]["name"] for r in rendering.resources if r.kind == "Job"}
    return {
        names[r.urn]: sorted(names[d] for d in r.dependencies if d in names)
        for r in rendering.resources
        if r.urn in names
    }


@pytest.mark.parametrize("wait", ["none", "ready", "complete"])
def test_depends_on_is_pulumis_order(wait: str) -> None:
    """dependsOn Complete: the dependents are created once the Jobs have completed (the
    provider's Job await); Ready: once every pod that runs at once is Ready."""
    data = jobset(
        {**job("init"), "replicas": 2},
        {**job("launcher"), "dependsOn": [{"name": "init", "status": "Complete"}]},
        {
            **job("workers", completions=4, parallelism=2),
            "dependsOn": [{"name": "launcher", "status": "Ready"}],
        },
    )
    assert dependencies(data, wait=wait) == {
        "js-init-0": [],
        "js-init-1": [],
        "js-launcher-0": ["js-init-0", "js-init-1"],
        "js-workers-0": ["js-launcher-0"],
    }
    awaited = awaits_of(jobs(data, wait=wait))
    assert awaited["js-init-0"] == "completion"
    assert awaited["js-launcher-0"] == "jsonpath={$[?@.ready==1 || @.succeeded==1]}"
    assert awaited["js-workers-0"] == ("completion" if wait == "complete" else "nothing")


def test_in_order_startup_waits_for_each_replicated_job_to_be_ready() -> None:
    data = jobset(
        job("driver"),
        {**job("workers", completions=4, parallelism=2), "replicas": 2},
        job("last"),
        startupPolicy={"startupPolicyOrder": "InOrder"},
    )
    assert dependencies(data) == {
        "js-driver-0": [],
        "js-workers-0": ["js-driver-0"],
        "js-workers-1": ["js-driver-0"],
        "js-last-0": ["js-driver-0", "js-workers-0", "js-workers-1"],
    }
    awaited = awaits_of(jobs(data))
    # a Job running 2 of its 4 pods at once is Ready with those 2 (JobSet's count)
    assert awaited["js-workers-1"] == "jsonpath={$[?@.ready==2 || @.succeeded==4]}"
    assert awaited["js-driver-0"] == "jsonpath={$[?@.ready==1 || @.succeeded==1]}"


def test_a_success_policy_that_ends_early_makes_the_others_follow() -> None:
    """successPolicy Any of a one-pod driver: the driver is the entry point; every other Job
    follows it (stops, and succeeds, once it has ended), as the controller deletes the active
    Jobs of a finished JobSet; only the driver must complete."""
    data = jobset(
        {**job("workers", "sleep 1000", completions=2), "replicas": 2},
        job("driver", "sleep 1"),
        successPolicy={"operator": "Any", "targetReplicatedJobs": ["driver"]},
    )
    plan = planning.blueprint(doors.validate(data), name="js").plan
    assert plan.entry_point == "driver-0" and plan.completes == ("driver-0",)
    host = "js-driver-0-0.js.default.svc.cluster.local"
    assert {g.role: g.follows for g in plan.groups} == {
        "workers-0": host,
        "workers-1": host,
        "driver-0": None,
    }


@pytest.mark.parametrize(
    ("data", "path", "message"),
    [
        (
            jobset(
                job("a"), {**job("b"), "dependsOn": [{"name": "c", "status": "Ready"}]}, job("c")
            ),
            "spec.replicatedJobs.1.dependsOn.0.name",
            "depends on earlier ones only",
        ),
        (
            jobset(
                job("a"),
                {**job("b"), "dependsOn": [{"name": "a", "status": "Ready"}]},
                startupPolicy={"startupPolicyOrder": "InOrder"},
            ),
            "spec.replicatedJobs.1.dependsOn.0",
            "mutually exclusive",
        ),
        (
            jobset(
                job("a"),
                {**job("b"), "dependsOn": [{"name": "a", "status": "Ready"}]},
                {**job("c"), "dependsOn": [{"name": "a", "status": "Complete"}]},
            ),
            "spec.replicatedJobs.2.dependsOn.0.status",
            "give the same status",
        ),
        (
            jobset(job("a"), successPolicy={"operator": "All", "targetReplicatedJobs": ["x"]}),
            "spec.successPolicy.targetReplicatedJobs",
            "'x' is not a replicated Job",
        ),
        (
            jobset(
                job("a", completions=2),
                job("b"),
                successPolicy={"operator": "Any", "targetReplicatedJobs": ["a"]},
            ),
            "spec.successPolicy.targetReplicatedJobs",
            "one replicated Job of replicas 1 and completions 1",
        ),
        (
            jobset(job("a"), managedBy="kueue.x-k8s.io/multikueue"),
            "spec.managedBy",
            "would run this",
        ),
        (
            jobset(job("a"), failurePolicy={"rules": [{"action": "RestartJob"}]}),
            "spec.failurePolicy.rules.0.action",
            "restarts one Job alone",
        ),
        (
            jobset(
                job("a"),
                failurePolicy={
                    "rules": [{"action": "FailJobSet", "onJobFailureMessagePatterns": ["OOM"]}]
                },
            ),
            "spec.failurePolicy.rules.0.onJobFailureMessagePatterns",
            "match by reasons",
        ),
        (
            jobset(job("a", completions=4), failurePolicy={"maxRestarts": 3}),
            "spec.failurePolicy.maxRestarts",
            "runs 1 of its 4 pods at a time",
        ),
        (
            jobset(job("a", completionMode="NonIndexed")),
            "spec.replicatedJobs.0.template.spec.completionMode",
            "Indexed",
        ),
        (
            jobset(job("a", parallelism=2)),
            "spec.replicatedJobs.0.template.spec.completions",
            "required",
        ),
        (
            jobset(job("a", suspend=True)),
            "spec.replicatedJobs.0.template.spec.suspend",
            "JobSet's suspend",
        ),
        (
            jobset(job("a", backoffLimit="x")),
            "spec.replicatedJobs.0.template.spec.backoffLimit",
            "must be of type integer",
        ),
        (
            jobset(job("a", unknown=1)),
            "spec.replicatedJobs.0.template.spec.unknown",
            "unknown field",
        ),
        (jobset(job("Bad_Name")), "spec.replicatedJobs.0.name", "names its Jobs"),
        (jobset(job("a"), network={"subdomain": "No"}), "spec.network.subdomain", "a DNS label"),
        (jobset(job("a"), unknown=1), "spec.unknown", ""),
        (jobset(job("a"), job("a")), "spec.replicatedJobs.1.name", "Duplicate value"),
        (
            jobset(job("a"), coordinator={"replicatedJob": "b"}),
            "spec.coordinator.replicatedJob",
            "'b' is not a replicated Job",
        ),
        (
            jobset(job("a"), coordinator={"replicatedJob": "a", "jobIndex": 1}),
            "spec.coordinator.jobIndex",
            "has 1 Job(s)",
        ),
        (
            jobset(
                job("a", completions=2, parallelism=2),
                coordinator={"replicatedJob": "a", "podIndex": 2},
            ),
            "spec.coordinator.podIndex",
            "have 2 pod(s)",
        ),
        (
            jobset(
                job("a"),
                failurePolicy={"rules": [{"action": "FailJobSet", "targetReplicatedJobs": ["z"]}]},
            ),
            "spec.failurePolicy.rules.0.targetReplicatedJobs",
            "'z' is not a replicated Job",
        ),
        (
            {**jobset(job("a")), "metadata": {"name": "js", "annotations": "not a map"}},
            "metadata.annotations",
            "",
        ),
        (
            {
                **jobset({**job("a", completions=10**4), "replicas": 999}),
                "metadata": {"name": "a" * 56},
            },
            "metadata.name",
            "would exceed 63 characters",
        ),
    ],
)
def test_bad_jobsets_are_refused_at_the_field(
    data: dict[str, Any], path: str, message: str
) -> None:
    found = refusals(data)
    assert path in found and message in found[path], found


def test_a_job_template_with_restart_always_is_refused() -> None:
    data = jobset(job("a"))
    data["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"] = (
        "Always"
    )
    found = refusals(data)
    assert (
        "OnFailure or Never"
        in found["spec.replicatedJobs.0.template.spec.template.spec.restartPolicy"]
    )
    named = jobset(job("a"))
    named["spec"]["replicatedJobs"][0]["template"]["metadata"] = {"name": "x"}
    assert "spec.replicatedJobs.0.template.metadata.name" in refusals(named)  # (Jobs are named)


def test_each_job_has_its_templates_and_the_controllers_labels_and_annotations() -> None:
    """As the controller labels a Job (`labelAndAnnotateObject` on the Job too): the Job
    template's labels and annotations, then JobSet's; aichor-iac's own win over a user's."""
    data = jobset(job("a", parallelism=2, completions=2))
    data["spec"]["replicatedJobs"][0]["template"]["metadata"] = {
        "labels": {"team": "x", "app.kubernetes.io/instance": "mine"},
        "annotations": {"note": "y"},
    }
    metadata = jobs(data)["js-a-0"]["metadata"]
    assert metadata["labels"]["team"] == "x"
    assert metadata["labels"]["app.kubernetes.io/instance"] == "js"
    assert metadata["labels"]["jobset.sigs.k8s.io/jobset-name"] == "js"
    assert metadata["annotations"]["note"] == "y"
    assert metadata["annotations"]["jobset.sigs.k8s.io/job-index"] == "0"


def test_the_job_controllers_own_fields_are_kept() -> None:
    """A Job template's pod failure policy, deadline and success policy are Kubernetes' Job
    controller's: each Job gets them as written."""
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    data = jobset(job("a", podFailurePolicy=policy, activeDeadlineSeconds=600))
    data["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"] = (
        "Never"
    )
    spec = jobs(data)["js-a-0"]["spec"]
    assert spec["podFailurePolicy"] == policy and spec["activeDeadlineSeconds"] == 600


def test_suspend_and_ttl_reach_every_job() -> None:
    found = jobs(jobset({**job("a"), "replicas": 2}, suspend=True, ttlSecondsAfterFinished=60))
    for obj in found.values():
        assert obj["spec"]["suspend"] is True and obj["spec"]["ttlSecondsAfterFinished"] == 60


# The public examples refused, and the fields their refusals name (docs/coming-from/jobset.md).
REFUSED = {
    "failure-policy.restartjob-action": {"spec.failurePolicy.rules.1.action"},
    "failure-policy.restartjobandignoremaxrestarts-action": {"spec.failurePolicy.rules.1.action"},
    "in-place-restart.jobset-main-container-mode": {
        "spec.replicatedJobs.0.template.spec.template.spec.containers.0.image",
    },
    "in-place-restart.jobset-sidecar-container-mode": {
        "spec.replicatedJobs.0.template.spec.template.spec.initContainers.0.image"
    },
    "simple.success-policy": {"spec.successPolicy.targetReplicatedJobs"},
}


def test_the_examples_are_jobsets() -> None:
    assert len(EXAMPLES) == 25
    assert REFUSED.keys() <= {p.stem for p in EXAMPLES}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_public_examples_render_valid_objects_or_are_refused_as_documented(path: Path) -> None:
    """Each example renders objects valid for the API server (strict schema and its rules),
    one Job per replica of each replicated Job with JobSet's names; or it is refused at
    exactly the fields REFUSED lists."""
    if path.stem in REFUSED:
        assert set(refusals(path)) == REFUSED[path.stem]
        return
    objects = expand(path).objects
    for obj in objects:
        schemas.validate(obj)
    assert limits.check(objects) == []
    resource = yaml.safe_load(path.read_text())
    name = "exp"  # (the stack's experiment name in these tests)
    expected = [
        f"{name}-{r['name']}-{j}"
        for r in resource["spec"]["replicatedJobs"]
        for j in range(r.get("replicas", 1))
    ]
    assert sorted(o["metadata"]["name"] for o in objects if o["kind"] == "Job") == sorted(expected)


def test_the_docs_list_exactly_the_refused_examples() -> None:
    text = (ROOT / "docs" / "coming-from" / "jobset.md").read_text()
    listed = re.findall(
        r"^\| `([a-z.-]+)` \|", text.split("## The examples that need a change")[1], re.M
    )
    assert sorted(listed) == sorted(REFUSED)


@pytest.mark.parametrize("wait", ["none", "ready", "complete"])
@pytest.mark.parametrize(
    "path", [p for p in EXAMPLES if p.stem not in REFUSED], ids=lambda p: p.stem
)
def test_every_example_pulumi_up_finishes(path: Path, wait: str) -> None:
    """Under every wait mode, `pulumi up` (the await model) creates every Job and ends."""
    model = doors.load(path)
    blueprint = planning.blueprint(model, Settings(wait=wait), "exp")
    order = up(expand(path, wait=wait), Model(blueprint.plan, "exp"))
    assert sorted(o for o in order if o.startswith("Job/")) == sorted(
        f"Job/exp-{g.role}" for g in blueprint.plan.groups
    )


def started(lines: list[tuple[float, str, str]], pod_name: str, text: str) -> float:
    return next(t for t, p, line in lines if p == pod_name and text in line)


def run_locally(
    data: dict[str, Any], tmp_path: Path
) -> tuple[int, list[tuple[float, str, str]], float]:
    """The exit status of a local run, its lines (when, pod, line), when it ended."""
    path = tmp_path / "jobset.yaml"
    path.write_text(yaml.safe_dump(data))
    lines: list[tuple[float, str, str]] = []
    begin = time.monotonic()
    try:
        run_experiment(
            doors.load(path),
            name="js",
            timeout=120,
            on_line=lambda p, line: lines.append((time.monotonic(), p, line)),
        )
        code = 0
    except LocalRunFailed as failed:
        code = failed.status
    assert time.monotonic() - begin < 100
    return code, lines, time.monotonic()


def test_real_depends_on_runs_in_pulumis_order(tmp_path: Path) -> None:
    """On the local cluster: the launcher starts once the initializer has completed, the
    workers once the launcher is Ready (its pod runs)."""
    data = jobset(
        job("init", "sleep 2; echo wrote"),
        {
            **job("launcher", "echo launched; sleep 6"),
            "dependsOn": [{"name": "init", "status": "Complete"}],
        },
        {
            **job("workers", "echo working", completions=2),
            "dependsOn": [{"name": "launcher", "status": "Ready"}],
        },
    )
    code, lines, _ = run_locally(data, tmp_path)
    assert code == 0, lines
    wrote = started(lines, "js-init-0-0", "wrote")
    assert started(lines, "js-launcher-0-0", "launched") > wrote
    launched = started(lines, "js-launcher-0-0", "launched")
    for i in (0, 1):
        assert started(lines, f"js-workers-0-{i}", "working") > launched


def test_real_in_order_startup_and_success_policy_any(tmp_path: Path) -> None:
    """InOrder: the workers start once the driver's pod is Ready; successPolicy Any of the
    driver: once it ends, the workers (sleeping 1000 s) stop within seconds and the JobSet
    succeeds."""
    data = jobset(
        job("driver", "echo driving; sleep 8; echo done"),
        {**job("workers", "echo working; sleep 1000", completions=2, parallelism=2), "replicas": 2},
        startupPolicy={"startupPolicyOrder": "InOrder"},
        successPolicy={"operator": "Any", "targetReplicatedJobs": ["driver"]},
    )
    code, lines, ended = run_locally(data, tmp_path)
    assert code == 0, lines
    driving = started(lines, "js-driver-0-0", "driving")
    for j in (0, 1):
        for i in (0, 1):
            assert started(lines, f"js-workers-{j}-{i}", "working") > driving
    assert ended - started(lines, "js-driver-0-0", "done") < 15


@pytest.mark.parametrize(
    "path", [p for p in EXAMPLES if p.stem not in REFUSED], ids=lambda p: p.stem
)
def test_convert_gives_an_aichor_jobset_listing_what_it_loses(path: Path) -> None:
    """`convert`: AIchor's jobset with the same Jobs and pods (count, completions,
    parallelisms), and the policies and labels it cannot say listed."""
    resource = doors.load(path)
    conversion = convert(resource)
    converted = doors.validate(conversion.manifest, "converted.yaml")
    assert converted.spec.operator == "jobset"

    def shape(data: Any) -> dict[str, tuple[int, int]]:
        return {
            n: (j["spec"]["completions"], j["spec"]["parallelism"]) for n, j in jobs(data).items()
        }

    assert shape(conversion.manifest) == shape(path)
    assert "labels: the JobSet controller's jobset.sigs.k8s.io/*" in conversion.lost
    for i, rjob in enumerate(resource.spec.origin.jobset.replicated_jobs):
        assert bool(rjob.depends_on) == (
            f"spec.replicatedJobs.{i}.dependsOn: created at once" in conversion.lost
        )


@pytest.mark.parametrize("queue", [None, "other", "team-a"])
@pytest.mark.parametrize("kind", ["JobSet", "PyTorchJob", "TrainJob"])
def test_a_kueue_label_is_the_stacks_queue_or_a_warning(queue: str | None, kind: str) -> None:
    """A resource labelled for a Kueue queue queues its Jobs only through aichor:kueueQueue:
    when that names another queue, or none, a warning says so."""
    label = {"kueue.x-k8s.io/queue-name": "team-a"}
    data = {
        "JobSet": jobset(job("a")),
        "PyTorchJob": yaml.safe_load(PYTORCHJOB.read_text()),
        "TrainJob": yaml.safe_load((ROOT / "tests/trainer/yaml.01-multi-node.yaml").read_text()),
    }[kind]
    data["metadata"] = {**data["metadata"], "labels": label}
    warnings = expand(data, **({"kueue_queue": queue} if queue else {})).warnings
    warned = [w for w in warnings if "kueue.x-k8s.io/queue-name" in w]
    assert len(warned) == (queue != "team-a"), warnings
    assert all("set aichor:kueueQueue: team-a" in w for w in warned)


PYTORCHJOB = sorted((ROOT / "tests" / "kubeflow").glob("pytorch-*.yaml"))[0]


def test_exclusive_placement_keeps_a_topology_domain_per_job() -> None:
    """`exclusive-topology` on the JobSet: every pod of each Job (the webhook's leader terms on
    every pod) shares its Job's domain and keeps other JobSet Jobs of priority 0 out of it."""
    rjob = job("a", parallelism=2, completions=2)
    rjob["replicas"] = 2
    data = jobset(rjob)
    data["metadata"]["annotations"] = {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
    }
    found = jobs(data)
    for name in ("js-a-0", "js-a-1"):
        template = pod(found[name])
        key = template["metadata"]["labels"]["jobset.sigs.k8s.io/job-key"]
        assert template["metadata"]["labels"]["jobset.sigs.k8s.io/priority"] == "0"
        assert (
            template["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"]
            == "cloud.google.com/gke-nodepool"
        )
        affinity = template["spec"]["affinity"]
        (together,) = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert together["labelSelector"]["matchExpressions"] == [
            {"key": "jobset.sigs.k8s.io/job-key", "operator": "In", "values": [key]}
        ]
        assert together["topologyKey"] == "cloud.google.com/gke-nodepool"
        (apart,) = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert apart["labelSelector"]["matchExpressions"] == [
            {"key": "jobset.sigs.k8s.io/job-key", "operator": "Exists"},
            {"key": "jobset.sigs.k8s.io/job-key", "operator": "NotIn", "values": [key]},
            {"key": "jobset.sigs.k8s.io/priority", "operator": "In", "values": ["0"]},
        ]
    for obj in expand(data, name="js").objects:
        schemas.validate(obj)


def test_the_node_selector_strategy_uses_the_labelled_nodes() -> None:
    """`node-selector` beside the topology (on the replicated Job): each Job's pods go to the
    nodes labelled `<namespace>_<job>` (hack/label_nodes) and tolerate their taint; no
    affinity."""
    rjob = job("a")
    rjob["template"]["metadata"] = {
        "annotations": {
            "alpha.jobset.sigs.k8s.io/exclusive-topology": "pool",
            "alpha.jobset.sigs.k8s.io/node-selector": "true",
        }
    }
    spec = pod(jobs(jobset(rjob), namespace="team")["js-a-0"])["spec"]
    assert spec["nodeSelector"] == {"alpha.jobset.sigs.k8s.io/namespaced-job": "team_js-a-0"}
    assert {
        "key": "alpha.jobset.sigs.k8s.io/no-schedule",
        "operator": "Exists",
        "effect": "NoSchedule",
    } in spec["tolerations"]
    assert "affinity" not in spec


def test_an_exclusive_topology_must_be_a_label_key() -> None:
    data = jobset(job("a"))
    data["metadata"]["annotations"] = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "no spaces"}
    assert (
        "label key"
        in refusals(data)["metadata.annotations.alpha.jobset.sigs.k8s.io/exclusive-topology"]
    )
