"""`pulumi up` with the provider's awaits (tests/pulumi_up.py): every framework under every
wait mode, with and without gang scheduling, and every example with its stack file, finishes,
in the order the README gives; reintroducing the deadlocks of `wait: complete` and of gang
scheduling fails with a "deadlock: X waits for Y" message instead of hanging."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES, KUBEFLOW_EXAMPLES, ROOT, expand, runnable
from pulumi_up import Deadlock, Model, up, waitfor_holds

from aichor_iac import engine, manifest, planning
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


def pulumi_up(data: dict, **settings) -> tuple[list[str], planning.Blueprint]:
    model = manifest.validate(data)
    chosen = Settings(**settings)
    blueprint = planning.blueprint(model, chosen, "exp")
    rendering = engine.expand(model, chosen, name="exp")
    return up(rendering, Model(blueprint.plan, blueprint.names.experiment)), blueprint


def data(case: str) -> dict:
    operator = case.split()[0]
    return {"spec": {"operator": operator, "image": "i", "command": "c", "types": TYPES[case]}}


@pytest.mark.parametrize("gang", ["none", "coscheduling", "volcano"])
@pytest.mark.parametrize("wait", ["none", "ready", "complete"])
@pytest.mark.parametrize("case", sorted(TYPES))
def test_pulumi_up_finishes(case, wait, gang):
    order, blueprint = pulumi_up(data(case), wait=wait, gang_scheduler=gang)
    jobs = [o.removeprefix("Job/exp-") for o in order if o.startswith("Job/")]
    assert sorted(jobs) == sorted(g.role for g in blueprint.plan.groups)
    awaited = set(blueprint.plan.completes)
    if wait == "complete" and gang == "none":  # nothing waits for a Job awaited to its end
        last = [j for j in jobs if j in awaited]
        assert jobs[-len(last) :] == last
    if gang != "none":  # a gang's Jobs are all created together: none waits for another
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
    order, blueprint = pulumi_up(cr, wait=wait, gang_scheduler=gang)
    jobs = [o.removeprefix("Job/exp-") for o in order if o.startswith("Job/")]
    assert sorted(jobs) == sorted(g.role for g in blueprint.plan.groups)


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
    model = manifest.load(path)
    chosen = Settings(wait=wait, gang_scheduler=gang)
    blueprint = planning.blueprint(model, chosen, "exp")
    order = up(expand(path, wait=wait, gang_scheduler=gang), Model(blueprint.plan, "exp"))
    jobs = [o.removeprefix("Job/exp-") for o in order if o.startswith("Job/")]
    assert sorted(jobs) == sorted(g.role for g in blueprint.plan.groups)
    assert blueprint.plan.completes == (() if "cluster" in path.stem else ("submitter",))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_with_its_stack_file(path):
    settings, _ = load_stack_file(ROOT / "stacks" / f"Pulumi.{path.stem}.yaml")
    model = manifest.load(path)
    name = settings.experiment_name or model.name or path.stem
    blueprint = planning.blueprint(model, settings, name)
    rendering = engine.expand(model, settings, name=name)
    order = up(rendering, Model(blueprint.plan, blueprint.names.experiment))
    assert len(order) == len([r for r in rendering.resources if r.is_kubernetes])


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
            "jsonpath={$[?@.ready==1 || @.succeeded==1]}; pods: head-0 pending)",
        ),
        (
            "mpi",
            {"gang_scheduler": "volcano", "wait": "ready"},
            "deadlock: Job/exp-launcher waits for Job/exp-worker (awaited until "
            "jsonpath={$[?@.ready==2 || @.succeeded==2]}; pods: worker-0 pending, "
            "worker-1 pending)",
        ),
    ],
)
def test_the_old_order_deadlocks_and_says_so(case, settings, expected, monkeypatch):
    monkeypatch.setattr(planning, "arrange", lambda plan, settings: plan)  # the order before
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
    monkeypatch.setattr(objects, "ready_or_finished", lambda n: f"jsonpath={{.status.ready}}={n}")
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
    rendering = engine.expand(manifest.validate(data("mpi")), Settings(), name="exp")
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
        manifest.validate(spec), Settings(peer_wait_seconds=peer_wait), name="exp"
    )
    head = next(r for r in rendering.resources if r.name == "exp-head")
    assert head.options["customTimeouts"] == {"create": f"{expected}s", "update": f"{expected}s"}
