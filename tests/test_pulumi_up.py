"""`pulumi up` with the provider's awaits (tests/pulumi_up.py): every framework under every
wait mode, with and without gang scheduling, and every example with its stack file, finishes,
in the order the README gives; reintroducing the deadlocks of `wait: complete` and of gang
scheduling fails with a "deadlock: X waits for Y" message instead of hanging."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES, ROOT
from pulumi_up import Deadlock, up

from aichor_iac import engine, manifest, planning
from aichor_iac.settings import Settings, load_stack_file

R = {"cpus": 1, "ramRatio": 1}
POOL = [{"name": "pool", "count": 2, "resources": R}]
TYPES = {
    "pytorch": {"Master": {"resources": R}, "Worker": {"count": 2, "resources": R}},
    "pytorch 0.2.3": {"worker": {"count": 3, "resources": R}},
    "xgboost": {"Master": {"resources": R}, "Worker": {"count": 2, "resources": R}},
    "jax": {"Worker": {"count": 3, "resources": R}},
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
    return up(rendering, blueprint.plan, blueprint.names.experiment), blueprint


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


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_with_its_stack_file(path):
    settings, _ = load_stack_file(ROOT / "stacks" / f"Pulumi.{path.stem}.yaml")
    model = manifest.load(path)
    name = settings.experiment_name or model.name or path.stem
    blueprint = planning.blueprint(model, settings, name)
    rendering = engine.expand(model, settings, name=name)
    order = up(rendering, blueprint.plan, blueprint.names.experiment)
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
            "jsonpath={.status.ready}=1; pods: head-0 pending)",
        ),
        (
            "mpi",
            {"gang_scheduler": "volcano", "wait": "ready"},
            "deadlock: Job/exp-launcher waits for Job/exp-worker (awaited until "
            "jsonpath={.status.ready}=2; pods: worker-0 pending, worker-1 pending)",
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

    planner = frameworks.PLANNERS["jobset"]
    monkeypatch.setitem(
        frameworks.PLANNERS,
        "jobset",
        lambda spec, names: replace(planner(spec, names), independent=False),
    )
    with pytest.raises(
        Deadlock,
        match=r"deadlock: pulumi up waits for Job/exp-a-0 \(awaited until jsonpath=\{\.status\.ready\}=3",
    ):
        pulumi_up(data("jobset parallelisms"), wait="ready")
