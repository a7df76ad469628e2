"""What `preview --diff` says `pulumi up` does to each object (aichor_iac.review.changes): create,
update in place, replace where pulumi-kubernetes replaces (its forceNew fields, the fields
the API server refuses to change), delete."""

from __future__ import annotations

import copy

import pytest
from conftest import expand

from aichor_iac.review import changes

JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "exp-worker", "namespace": "ns", "labels": {"a": "1"}},
    "spec": {
        "completionMode": "Indexed",
        "completions": 2,
        "parallelism": 2,
        "template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}},
    },
}
SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "exp", "namespace": "ns"},
    "spec": {"clusterIP": "None", "ports": [{"name": "p", "port": 1}]},
}


def edited(obj: dict, path: str, value: object) -> dict:
    obj = copy.deepcopy(obj)
    *parents, last = path.split(".")
    here = obj
    for name in parents:
        here = here[int(name)] if isinstance(here, list) else here[name]
    if value is None:
        del here[last]
    else:
        here[last] = value
    return obj


@pytest.mark.parametrize(
    ("old", "path", "value", "op", "forced"),
    [
        (JOB, "metadata.labels.a", "2", "update", ()),
        (JOB, "spec.template.spec.containers.0.image", "i:2", "replace", ("spec.template",)),
        # an Indexed Job's completions change with its parallelism (elastic Indexed Jobs)
        (edited(JOB, "spec.parallelism", 3), "spec.completions", 3, "update", ()),
        (JOB, "spec.completions", 3, "replace", ("spec.completions",)),
        (
            edited(JOB, "spec.completionMode", None),
            "spec.completions",
            3,
            "replace",
            ("spec.completions",),
        ),
        (SERVICE, "spec.ports.0.port", 2, "update", ()),
        (SERVICE, "spec.clusterIP", "10.0.0.1", "replace", ("spec.clusterIP",)),
        (JOB, "metadata.labels.a", "1", "same", ()),
    ],
)
def test_an_objects_change(old, path, value, op, forced):
    new = edited(old, path, value)
    change = changes.compare(old, new)
    assert (change.op, change.replaced_by) == (op, forced)


def test_a_plan_creates_the_new_and_deletes_the_gone_newest_first():
    other = edited(SERVICE, "metadata.name", "other")
    third = edited(SERVICE, "metadata.name", "third")
    plan = changes.plan([SERVICE, other, third], [JOB, SERVICE])
    assert [(c.op, c.key[2]) for c in plan] == [
        ("create", "exp-worker"),
        ("same", "exp"),
        ("delete", "third"),
        ("delete", "other"),
    ]
    assert changes.counts(c.op for c in plan) == {"create": 1, "delete": 2, "same": 1}


def test_field_changes_name_each_leaf_and_match_named_items_by_name():
    new = edited(JOB, "spec.template.spec.containers.0.image", "i:2")
    new["spec"]["template"]["spec"]["containers"].insert(0, {"name": "d"})
    assert [(f.path, f.old, f.new) for f in changes.field_changes(JOB, new)] == [
        ("spec.template.spec.containers[c].image", "i:1", "i:2"),
        ("spec.template.spec.containers[d]", None, {"name": "d"}),
    ]
    # a variable added first is one change, not a shift of all the others
    env = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert [
        (f.path, f.new) for f in changes.field_changes(env, [{"name": "Z", "value": "0"}, *env])
    ] == [("[Z]", {"name": "Z", "value": "0"})]
    # items without distinct names: by position
    assert [f.path for f in changes.field_changes(["a", "b"], ["b", "a"])] == ["[0]", "[1]"]


def elastic(replicas: int) -> list[dict]:
    """A PyTorchJob with an elastic policy of 2..4 Workers, at `replicas`."""
    container = {"name": "pytorch", "image": "img", "command": ["torchrun", "train.py"]}
    worker = {"replicas": replicas, "template": {"spec": {"containers": [container]}}}
    policy = {"minReplicas": 2, "maxReplicas": 4}
    spec = {"elasticPolicy": policy, "pytorchReplicaSpecs": {"Worker": worker}}
    cr = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "exp"}}
    return expand({**cr, "spec": spec}).objects


@pytest.mark.parametrize("replicas", [2, 4])
def test_an_elastic_job_resized_within_its_bounds_updates_its_workers_in_place(replicas):
    """(Issue 69) A second `pulumi up` with `replicas` changed within minReplicas..maxReplicas
    updates the Worker Job (completions and parallelism together: its running members keep
    running); nothing else changes."""
    plan = changes.plan(elastic(3), elastic(replicas))
    changed = [(c.op, c.key[2]) for c in plan if c.op != "same"]
    assert changed == [("update", "exp-worker")]
