"""`pulumi up` with the provider's awaits (tests/pulumi_up.py): every framework under every
wait mode, with and without gang scheduling, and every example with its stack file, finishes,
in the order docs/how-it-runs.md gives; reintroducing the deadlocks of `wait: complete` and of gang
scheduling fails with a "deadlock: X waits for Y" message instead of hanging."""

from __future__ import annotations

import re

import pytest
import yaml
from conftest import EXAMPLES, KUBEFLOW_EXAMPLES, ROOT, expand, runnable
from doc_snippets import fences
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kube import gang_of
from pulumi_up import Deadlock, Failed, Model, Trials, unarranged, up

from aichor_iac import doors, engine, planning
from aichor_iac.k8s.awaits import waitfor_holds
from aichor_iac.local.prepare import sweep_gates
from aichor_iac.planning import blueprints
from aichor_iac.settings import Settings, load_stack_file

R = {"cpus": 1, "ramRatio": 1}
POOL = [{"name": "pool", "count": 2, "resources": R}]
TYPES = {
    "pytorch": {"Master": {"resources": R}, "Worker": {"count": 2, "resources": R}},
    "pytorch 0.2.3": {"worker": {"count": 3, "resources": R}},
    "xgboost": {"Master": {"resources": R}, "Worker": {"count": 2, "resources": R}},
    "jax": {"Worker": {"count": 3, "resources": R}},
    "paddle": {"Master": {"resources": R}, "Worker": {"count": 2, "resources": R}},
    "tf": {
        "Chief": {"resources": R},
        "PS": {"resources": R},
        "Worker": {"count": 2, "resources": R},
        "Evaluator": {"resources": R},
    },
    "mpi": {"Launcher": {"resources": R}, "Worker": {"count": 2, "resources": R}},
    "ray": {"Head": {"resources": R}, "Workers": POOL, "Job": {"resources": R}},
    "kuberay": {"Head": {"resources": R}, "Workers": POOL},
    "jobset": {"a": {"count": 2, "completions": 2, "resources": R}, "b": {"resources": R}},
    "jobset parallelisms": {
        "a": {"count": 2, "completions": 3, "parallelisms": 1, "resources": R},
        "b": {"completions": 4, "parallelisms": 2, "resources": R},
    },
    "batchjob": {"Worker": {"count": 3, "resources": R}},
}


# How the experiment is scheduled: alone, in a gang (coscheduling, Volcano), or queued by Kueue
# (in a queue that admits exactly the pods the experiment runs at once).
SCHEDULING: dict[str, dict[str, str]] = {
    "none": {},
    "coscheduling": {"gang_scheduler": "coscheduling"},
    "volcano": {"gang_scheduler": "volcano"},
    "kueue": {"kueue_queue": "ml"},
}


def model_of(blueprint: planning.Blueprint) -> Model:
    """The cluster model of the experiment, Kueue's quota sized for its pods at once."""
    quota = blueprint.plan.at_once if blueprint.settings.kueue_queue else None
    return Model(blueprint.plan, blueprint.names.experiment, kueue_quota=quota)


def pulumi_up(data: dict, **settings) -> tuple[list[str], planning.Blueprint]:
    model = doors.validate(data)
    chosen = Settings(**settings)
    blueprint = planning.blueprint(model, chosen, "exp")
    rendering = engine.expand(model, chosen, name="exp")
    return up(rendering, model_of(blueprint)), blueprint


def data(case: str) -> dict:
    operator = case.split()[0]
    return {"spec": {"operator": operator, "image": "i", "command": "c", "types": TYPES[case]}}


# The experiments that restart as a group (aichor:maxRestarts; the others refuse it)
REGROUPS = ("pytorch", "pytorch 0.2.3", "xgboost", "jax", "paddle", "tf", "mpi")


@pytest.mark.parametrize("gang", sorted(SCHEDULING))
@pytest.mark.parametrize("wait", ["none", "ready", "complete"])
@pytest.mark.parametrize(
    ("case", "restarts"), [(c, r) for c in sorted(TYPES) for r in (0, 2) if not r or c in REGROUPS]
)
def test_pulumi_up_finishes(case, wait, gang, restarts):
    more = {"max_restarts": restarts} if restarts else {}
    order, blueprint = pulumi_up(data(case), wait=wait, **SCHEDULING[gang], **more)
    jobs = [o.removeprefix("Job/exp-") for o in order if o.startswith("Job/")]
    assert sorted(jobs) == sorted(g.role for g in blueprint.plan.groups)
    awaited = set(blueprint.plan.completes)
    if wait == "complete" and gang == "none":  # nothing waits for a Job awaited to its end
        last = [j for j in jobs if j in awaited]
        assert jobs[-len(last) :] == last
    if gang in ("coscheduling", "volcano"):  # a gang's Jobs are all created together
        assert all(not g.after for g in blueprint.plan.groups)


@pytest.mark.parametrize(
    "wait, gang", [("none", "none"), ("ready", "none"), ("complete", "none"), ("ready", "volcano")]
)
@pytest.mark.parametrize("path", KUBEFLOW_EXAMPLES, ids=lambda p: p.stem)
def test_every_kubeflow_example_finishes(path, wait, gang):
    """The public Kubeflow examples (tests/kubeflow/) under every wait mode: no await of a
    custom resource's objects holds `pulumi up` for ever (MPIJob's WaitForWorkersReady gate
    included)."""
    cr, _ = runnable(path)
    order, _ = pulumi_up(cr, wait=wait, gang_scheduler=gang)
    assert created_jobs(order) == rendered_jobs(cr, wait=wait, gang_scheduler=gang)


def elastic_jobs() -> list[tuple[str, dict]]:
    """The elastic PyTorchJobs: the public ones (tests/kubeflow/) and docs/frameworks/pytorch.md's."""
    found = [(p.stem, runnable(p)[0]) for p in KUBEFLOW_EXAMPLES if "elastic" in p.stem]
    page = fences(ROOT / "docs/frameworks/pytorch.md")
    (text,) = [f.text for f in page if f.title == "elastic/pytorchjob.yaml"]
    return [*found, ("docs elastic", yaml.safe_load(text))]


def elastic_up(cr: dict, losing: int = 0, **settings) -> tuple[list[str], Model]:
    """`pulumi up` of an elastic job whose first `losing` Workers lose their node once each."""
    chosen = Settings(**settings)
    blueprint = planning.blueprint(doors.validate(cr), chosen, "exp")
    model = Model(blueprint.plan, blueprint.names.experiment, losing=losing, losers=("worker",))
    order = up(engine.expand(doors.validate(cr), chosen, name="exp"), model)
    for _ in range(100):  # (what runs on after `up`: all of it, when nothing waits for it)
        if not model.step(False):
            break
    return order, model


ELASTIC = elastic_jobs()


@pytest.mark.parametrize("gang", sorted(SCHEDULING))
@pytest.mark.parametrize("wait", ["none", "ready", "complete"])
@pytest.mark.parametrize(("name", "cr"), ELASTIC, ids=[n for n, _ in ELASTIC])
def test_an_elastic_job_losing_a_member_finishes_under_every_wait(name, cr, wait, gang):
    """A member's lost node restarts its container in place (OnFailure), the others wait for
    it (torchrun's re-rendezvous) and `pulumi up` finishes: the restart is not the Job's
    failure. Every Worker ends succeeded."""
    order, model = elastic_up(cr, losing=1, wait=wait, **SCHEDULING[gang])
    assert created_jobs(order) == rendered_jobs(cr, wait=wait, **SCHEDULING[gang])
    assert model.lost == 1 and sum(p.restarts for p in model.pods.values()) == 1
    assert all(p.state == "succeeded" for p in model.pods.values())


def test_a_lost_member_fails_up_where_its_job_does_not_restart_it_in_place():
    """The same loss in a job without an elasticPolicy whose Workers do not restart
    (`restartPolicy: Never`): the pod fails, so does its Job, and so does `up`."""
    _, cr = ELASTIC[-1]
    plain = yaml.safe_load(yaml.safe_dump(cr))
    del plain["spec"]["elasticPolicy"]
    plain["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "Never"
    with pytest.raises(Failed, match="Job/exp-worker failed"):
        elastic_up(plain, losing=1, wait="complete")


def test_an_elastic_job_s_restarts_past_its_backoff_limit_fail_it():
    """runPolicy.backoffLimit counts the members' restarts (the Job's backoffLimit, which with
    OnFailure counts its containers' restarts): two lost members past a limit of 1 fail `up`."""
    _, cr = ELASTIC[-1]
    limited = yaml.safe_load(yaml.safe_dump(cr))
    limited["spec"]["runPolicy"] = {"backoffLimit": 1}
    elastic_up(limited, losing=1, wait="complete")
    with pytest.raises(Failed, match="Job/exp-worker failed"):
        elastic_up(limited, losing=2, wait="complete")


@pytest.mark.parametrize("replicas", [2, 3])
@pytest.mark.parametrize("wait", ["none", "ready"])
def test_a_second_up_resizes_an_elastic_job_in_place(replicas, wait):
    """`replicas` changed within min..max by a second `pulumi up`: the Worker Job is updated
    (same URN, completions and parallelism together), its running members keep running, the
    index past the new size is removed and a new one made, and the update's await holds."""
    _, cr = ELASTIC[-1]
    resized = yaml.safe_load(yaml.safe_dump(cr))
    resized["spec"]["elasticPolicy"]["minReplicas"] = 2
    cr = yaml.safe_load(yaml.safe_dump(resized))
    cr["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 5 - replicas  # (3 -> 2, 2 -> 3)
    resized["spec"]["elasticPolicy"]["maxReplicas"] = cr["spec"]["elasticPolicy"]["maxReplicas"] = 3
    resized["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = replicas
    chosen = Settings(wait=wait)
    first = engine.expand(doors.validate(cr), chosen, name="exp")
    blueprint = planning.blueprint(doors.validate(cr), chosen, "exp")
    model = Model(blueprint.plan, blueprint.names.experiment)
    up(first, model)  # (its members running, or still on their way)
    before = {key: (p, p.state) for key, p in model.pods.items()}
    second = engine.expand(doors.validate(resized), chosen, name="exp")
    kept = {r.urn for r in first.resources if r.inputs in [o.inputs for o in second.resources]}
    (changed,) = [r for r in second.resources if r.is_kubernetes and r.urn not in kept]
    assert changed.kind == "Job" and changed.urn in {r.urn for r in first.resources}
    up(second, model, before=kept)
    assert sorted(i for _, i in model.pods) == list(range(replicas))
    for key, (pod, state) in before.items():
        if key[1] < replicas:  # the same pod, not made again
            assert model.pods[key] is pod and (state != "running" or pod.state != "pending")


def created_jobs(order: list[str]) -> list[str]:
    return sorted(o.removeprefix("Job/") for o in order if o.startswith("Job/"))


def rendered_jobs(data: dict, **settings) -> list[str]:
    objects = expand(data, **settings).objects
    return sorted(o["metadata"]["name"] for o in objects if o["kind"] == "Job")


def commandless(kind: str, types: dict[str, int]) -> dict:
    """A Kubeflow resource whose containers run their image's entrypoint (no command)."""
    field, container = {
        "PyTorchJob": ("pytorchReplicaSpecs", "pytorch"),
        "XGBoostJob": ("xgbReplicaSpecs", "xgboost"),
        "PaddleJob": ("paddleReplicaSpecs", "paddle"),
    }[kind]
    pod = {"spec": {"containers": [{"name": container, "image": "my/image:1"}]}}
    specs = {t: {"replicas": n, "template": pod} for t, n in types.items()}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": "exp"},
        "spec": {field: specs},
    }


@pytest.mark.parametrize("gang", sorted(SCHEDULING))
@pytest.mark.parametrize("wait", ["none", "ready", "complete"])
@pytest.mark.parametrize(
    "kind, types",
    [
        ("PyTorchJob", {"Master": 1, "Worker": 3}),
        ("XGBoostJob", {"Master": 1, "Worker": 2}),
        ("PaddleJob", {"Worker": 3}),
        ("PaddleJob", {"Master": 2, "Worker": 2}),
    ],
)
def test_replicas_with_a_job_each_finish(kind, types, wait, gang):
    """Groups whose replicas have a Job each (an image's entrypoint with per-replica env)
    finish under every wait mode and scheduling: each replica's Job is created, awaited and
    admitted on its own, in the group's order."""
    cr = commandless(kind, types)
    order, _ = pulumi_up(cr, wait=wait, **SCHEDULING[gang])
    jobs = created_jobs(order)
    assert jobs == rendered_jobs(cr, wait=wait, **SCHEDULING[gang])
    assert len(jobs) > len(types)


KUBERAY_SAMPLES = [
    ROOT / "tests" / "kuberay" / f"{name}.yaml"
    for name in ("ray-job.sample", "ray-job.shutdown", "ray-cluster.sample", "ray-cluster.complete")
]


@pytest.mark.parametrize(
    "wait, gang", [("none", "none"), ("ready", "none"), ("complete", "none"), ("ready", "volcano")]
)
@pytest.mark.parametrize("path", KUBERAY_SAMPLES, ids=lambda p: p.stem)
def test_kuberay_samples_finish(path, wait, gang):
    """KubeRay samples under every wait mode: a RayJob's `up` ends, and so does a RayCluster's,
    whose nodes run until destroyed (nothing of it is awaited to complete)."""
    model = doors.load(path)
    chosen = Settings(wait=wait, gang_scheduler=gang)
    blueprint = planning.blueprint(model, chosen, "exp")
    order = up(expand(path, wait=wait, gang_scheduler=gang), Model(blueprint.plan, "exp"))
    jobs = [o.removeprefix("Job/exp-") for o in order if o.startswith("Job/")]
    assert sorted(jobs) == sorted(g.role for g in blueprint.plan.groups)
    assert blueprint.plan.completes == (() if "cluster" in path.stem else ("submitter",))


def stack_settings(path, wait: str | None = None, scheduling: str = "none") -> Settings:
    """An example's stack file, with `aichor:wait` and the scheduling of `SCHEDULING` set."""
    settings, _ = load_stack_file(ROOT / "stacks" / f"Pulumi.{path.stem}.yaml")
    chosen = {"wait": wait} if wait else {}
    return settings.model_copy(update={**chosen, **SCHEDULING[scheduling]})


# Progress reports off, on, and on with both stores (issue 67): a bucket and a tracking server
# that no pod can reach (nothing waits for a store)
KEEPING = {
    "": {"progress": False},
    "progress": {"progress": True},
    "kept": {
        "progress": True,
        "history": "s3://runs/x",
        "mlflow": "http://127.0.0.1:9",
        "egress_cidrs": ["0.0.0.0/0"],  # (past an AIchor manifest's NetworkPolicy)
    },
}


@pytest.mark.parametrize("keeping", sorted(KEEPING))
@pytest.mark.parametrize("scheduling", sorted(SCHEDULING))
@pytest.mark.parametrize("wait", [None, "none", "ready", "complete"])
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_finishes_under_every_wait_and_scheduling(path, wait, scheduling, keeping):
    """Every example with its stack file (None: its own `aichor:wait`), alone, in either gang
    or queued by Kueue, with progress reports or without (nothing waits for the receiver),
    with both stores or without: `pulumi up` creates every object and ends."""
    settings = stack_settings(path, wait, scheduling).model_copy(update=KEEPING[keeping])
    model = doors.load(path)
    name = settings.experiment_name or model.name or path.stem
    blueprint = planning.blueprint(model, settings, name)
    rendering = engine.expand(model, settings, name=name)
    order = up(rendering, model_of(blueprint))
    assert len(order) == len([r for r in rendering.resources if r.is_kubernetes])


@pytest.mark.parametrize(
    ("scheduling", "size", "labelled"),
    [
        ("volcano", 9, ["heavy-0", "shard-0", "shard-1", "shard-2", "shard-3"]),
        ("coscheduling", 1, ["heavy-0"]),
    ],
)
def test_the_jobset_gang_is_what_runs_at_once(scheduling, size, labelled):
    """examples/jobset.yaml runs 41 pods, at most 1 + 4 x 2 = 9 at once: Volcano's gang is
    those 9 (it counts succeeded pods, so the later shards still schedule); coscheduling,
    which counts only pods that have not ended, gangs the heavy Job alone and says so."""
    path = ROOT / "examples" / "jobset.yaml"
    settings = stack_settings(path, scheduling=scheduling)
    blueprint = planning.blueprint(doors.load(path), settings, "shards")
    rendering = engine.expand(doors.load(path), settings, name="shards")
    (group,) = [r for r in rendering.resources if r.kind == "PodGroup"]
    assert group.inputs["spec"]["minMember"] == size
    gang = {
        r.inputs["metadata"]["name"].removeprefix("shards-")
        for r in rendering.resources
        if r.kind == "Job" and gang_of(r.inputs) == "shards"
    }
    assert sorted(gang) == labelled
    warnings = [w.message for w in planning.warnings(blueprint)]
    assert any("scheduled one by one" in w for w in warnings) is (scheduling == "coscheduling")


@pytest.mark.parametrize(
    ("case", "settings", "expected"),
    [
        (
            "pytorch",
            {"wait": "complete"},
            "deadlock: Job/exp-worker waits for Job/exp-master (awaited until completion",
        ),
        (
            "tf",
            {"wait": "complete"},
            "deadlock: Job/exp-ps waits for Job/exp-chief (awaited until completion",
        ),
        (
            "ray",
            {"gang_scheduler": "coscheduling"},
            "deadlock: Job/exp-pool waits for Job/exp-head (awaited until "
            "jsonpath={$[?@.ready==1 || @.succeeded==1]}; pods: head-0 pending (unschedulable: "
            "PodGroup exp has 1 of 4 pods))",
        ),
        (
            "mpi",
            {"gang_scheduler": "volcano", "wait": "ready"},
            "deadlock: Job/exp-launcher waits for Job/exp-worker (awaited until "
            "jsonpath={$[?@.ready==2 || @.succeeded==2]}; pods: worker-0 pending "
            "(unschedulable: PodGroup exp has 2 of 3 pods), worker-1 pending (unschedulable: "
            "PodGroup exp has 2 of 3 pods))",
        ),
    ],
)
def test_the_old_order_deadlocks_and_says_so(case, settings, expected, monkeypatch):
    monkeypatch.setattr(blueprints, "arrange", unarranged)  # the order before
    with pytest.raises(Deadlock) as caught:
        pulumi_up(data(case), **settings)
    assert expected in str(caught.value).splitlines()[0] or expected in str(caught.value)


def test_waiting_for_every_pod_of_a_parallelism_limited_job_never_ends(monkeypatch):
    # What `wait: ready` did to jobset before: await .status.ready = completions, which a Job
    # running `parallelisms` pods at a time never reaches.
    from dataclasses import replace

    from aichor_iac import frameworks
    from aichor_iac.k8s import objects

    planner = frameworks.PLANNERS["jobset"]
    monkeypatch.setitem(
        frameworks.PLANNERS,
        "jobset",
        lambda spec, names: replace(planner(spec, names), independent=False),
    )
    monkeypatch.setattr(
        objects,
        "ready_or_finished",
        lambda n, finished=None: f"jsonpath={{.status.ready}}={finished or n}",
    )
    with pytest.raises(
        Deadlock,
        match=r"deadlock: pulumi up waits for Job/exp-a-0 \(awaited until jsonpath=\{\.status",
    ):
        pulumi_up(data("jobset parallelisms"), wait="ready")


JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {}}


@pytest.mark.parametrize(
    ("expression", "status", "holds"),
    [
        # The readiness gate: every pod Ready, or every pod finished.
        ("jsonpath={$[?@.ready==2 || @.succeeded==2]}", {"active": 2, "ready": 2}, True),
        ("jsonpath={$[?@.ready==2 || @.succeeded==2]}", {"active": 2, "ready": 1}, False),
        ("jsonpath={$[?@.ready==2 || @.succeeded==2]}", {"succeeded": 2}, True),
        ("jsonpath={$[?@.ready==2 || @.succeeded==2]}", {"succeeded": 1, "failed": 1}, False),
        ("jsonpath={$[?@.ready==2 || @.succeeded==2]}", {}, False),
        # The provider's own rules: a value compares as printed, `{.path}` alone is presence.
        ("jsonpath={.status.ready}=2", {"ready": 2}, True),
        ("jsonpath={.status.ready}=2", {"ready": 1}, False),
        ("jsonpath={.status.ready}", {"ready": 0}, True),
        ("jsonpath={.status.ready}", {}, False),
        # The changelog's examples (4.24.0).
        (
            "jsonpath={.status.conditions[?(@.type=='Failed'||@.type=='Complete')].status}=True",
            {"conditions": [{"type": "Complete", "status": "True"}]},
            True,
        ),
        ("jsonpath={.status[?@ == 'Running' || @ == 'Succeeded' ]}", {"phase": "Running"}, True),
        ("jsonpath={.status[?@ == 'Running' || @ == 'Succeeded' ]}", {"phase": "Pending"}, False),
    ],
)
def test_wait_for_is_evaluated_as_the_provider_does(expression, status, holds):
    assert waitfor_holds(expression, {**JOB, "status": status}) is holds


def test_a_gated_job_that_has_finished_is_not_awaited_again():
    # `pulumi refresh` marks a running gated Job unfinished (the provider's Job read check);
    # the next `pulumi up` re-awaits it, and an in-place update of a finished stack does too:
    # its waitFor must hold for a finished Job, not wait its timeout for Ready pods.
    rendering = engine.expand(doors.validate(data("mpi")), Settings(), name="exp")
    gate = next(r for r in rendering.resources if r.kind == "Job" and "waitFor" in str(r.inputs))
    expression = gate.inputs["metadata"]["annotations"]["pulumi.com/waitFor"]
    assert waitfor_holds(expression, {**gate.inputs, "status": {"succeeded": 2}})
    assert not waitfor_holds(expression, {**gate.inputs, "status": {"failed": 2}})


@pytest.mark.parametrize(
    ("timeout", "peer_wait", "expected"),
    [(None, 1800, 1800), (7200, 1800, 1800), (600, 1800, 600), (None, 60, 60)],
)
def test_a_gate_gives_up_when_the_replicas_waiting_for_it_do(timeout, peer_wait, expected):
    # A waitFor never sees a failed Job: the gate's bound is how long `up` hangs after the
    # head (or MPI's workers) failed, so it is peerWaitSeconds, or the run's shorter timeout.
    spec = data("ray")
    if timeout:
        spec["spec"]["timeout"] = f"{timeout}s"
    rendering = engine.expand(
        doors.validate(spec), Settings(peer_wait_seconds=peer_wait), name="exp"
    )
    head = next(r for r in rendering.resources if r.name == "exp-head")
    assert head.options["customTimeouts"] == {"create": f"{expected}s", "update": f"{expected}s"}


def _every_pod(plan, settings):  # the gang before: every pod the experiment will ever run
    if settings.gang_scheduler == "none":
        return None
    return planning.Gang(settings.gang_scheduler, tuple(g.role for g in plan.groups), plan.pods)


def _every_group(plan, settings):  # the pods at once, but of every group, under coscheduling
    if settings.gang_scheduler == "none":
        return None
    roles = tuple(g.role for g in plan.groups)
    return planning.Gang(settings.gang_scheduler, roles, plan.at_once)


@pytest.mark.parametrize(
    ("gang", "scheduling", "expected"),
    [
        (
            _every_pod,
            "volcano",
            "deadlock: pulumi up waits for Job/shards-heavy-0 (awaited until completion; "
            "pods: heavy-0-0 pending (unschedulable: PodGroup shards has 9 of 41 pods))",
        ),
        (
            _every_pod,
            "coscheduling",
            "deadlock: pulumi up waits for Job/shards-heavy-0 (awaited until completion; "
            "pods: heavy-0-0 pending (unschedulable: PodGroup shards has 9 of 41 pods))",
        ),
        (
            _every_group,
            "coscheduling",
            "shard-0-2 pending (unschedulable: PodGroup shards has 8 of 9 pods)",
        ),
    ],
)
def test_a_gang_larger_than_what_runs_at_once_deadlocks_and_says_why(
    gang, scheduling, expected, monkeypatch
):
    """The jobset example's gangs before: all 41 pods (none ever starts), and all 9 pods at
    once under coscheduling, which stops counting a shard once it has ended (the later shards
    never start)."""
    monkeypatch.setattr(blueprints, "gang", gang)
    path = ROOT / "examples" / "jobset.yaml"
    settings = stack_settings(path, "complete", scheduling)
    model = doors.load(path)
    blueprint = planning.blueprint(model, settings, "shards")
    with pytest.raises(Deadlock) as caught:
        up(engine.expand(model, settings, name="shards"), model_of(blueprint))
    assert expected in str(caught.value)


shard = st.fixed_dictionaries(
    {
        "count": st.integers(1, 3),
        "completions": st.integers(1, 6),
        "parallelisms": st.integers(1, 6),
        "resources": st.just(R),
    }
)
shapes = st.one_of(
    st.dictionaries(st.sampled_from(["a", "b", "c"]), shard, min_size=1, max_size=3).map(
        lambda types: ("jobset", types)
    ),
    st.integers(1, 6).map(lambda n: ("batchjob", {"Worker": {"count": n, "resources": R}})),
)


@given(
    shape=shapes,
    scheduling=st.sampled_from(["coscheduling", "volcano", "kueue"]),
    wait=st.sampled_from(["none", "ready", "complete"]),
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_gang_is_satisfied_by_the_pods_that_exist_at_once(shape, scheduling, wait):
    """Whatever the Jobs' counts, completions and parallelism: the gang (minMember) is the
    pods of its groups that exist at once, no more than the experiment runs at once, and every
    pod of the experiment runs to its end, `pulumi up` or not waiting for it."""
    operator, types = shape
    spec = {"spec": {"operator": operator, "image": "i", "command": "c", "types": types}}
    model = doors.validate(spec)
    chosen = Settings(wait=wait, **SCHEDULING[scheduling])
    blueprint = planning.blueprint(model, chosen, "exp")
    rendering = engine.expand(model, chosen, name="exp")
    cluster = model_of(blueprint)
    up(rendering, cluster)
    while cluster.step(False):  # what `up` did not wait for
        pass
    assert {p.state for p in cluster.pods.values()} == {"succeeded"}
    assert len(cluster.pods) == blueprint.plan.pods
    if gang := blueprint.gang:
        members = [g for g in blueprint.plan.groups if g.role in gang.roles]
        assert gang.size == sum(g.at_once for g in members) <= blueprint.plan.at_once
        groups = [r for r in rendering.resources if r.kind == "PodGroup"]
        assert [g.inputs["spec"]["minMember"] for g in groups] == ([gang.size] if members else [])


SWEEP = ROOT / "tests" / "katib" / "pytorchjob-mnist.yaml"  # (3 at once, failing at 3 failed)


def sweep_of(trials: int) -> tuple:
    data = yaml.safe_load(SWEEP.read_text())
    data["spec"]["maxTrialCount"] = trials
    return doors.parse_all(yaml.safe_dump(data), SWEEP.name)


@pytest.mark.parametrize("wait", ["none", "ready", "complete"])
@pytest.mark.parametrize("failing", [(40, 90), (40, 90, 150)])
def test_a_200_trial_sweep_with_a_failure_limit_runs_as_the_engine_runs_it(wait, failing):
    """200 trials of a Katib sweep (parallelTrialCount 3, maxFailedTrialCount 3), under each
    `aichor:wait`, each trial's PyTorchJob in the cluster model: never more than 3 trials run
    at once; with 2 trials failing, every trial is created and `up` ends; with a third, `up`
    fails at the first trial that counts all three, and creates none after it."""
    trials = sweep_of(200)
    settings = Settings(wait=wait)
    rendering = engine.expand(list(trials), settings)
    named = [planning.blueprint(t, settings, t.name) for t in trials]
    failed = {trials[i].name for i in failing}
    cluster = Trials({b.names.experiment: Model(b.plan, b.names.experiment) for b in named})
    for name in failed:
        cluster.models[name].failing = True
    gates = sweep_gates(named)

    def created() -> set[int]:
        return {t.trial.index for t in trials if f"{t.name}-master" in cluster.jobs}

    if len(failing) < 3:
        up(rendering, cluster, gates)
        assert created() == set(range(200))
    else:
        refused = next(t for t in trials if max(failing) in t.trial.counted)
        failed_jobs = ", ".join(f"{trials[i].name}-master" for i in failing)
        with pytest.raises(Failed) as caught:
            up(rendering, cluster, gates)
        said = rf"sweep failed \({failed_jobs}\): \w+/{refused.name}\S* is not created"
        assert re.fullmatch(said, str(caught.value))
        assert max(created()) < refused.trial.index
    assert cluster.running <= 3
