"""A stack's lifetime under the real engine (tests/stack_model.py `Stack`): the shared volume and
its data survive `pulumi destroy` and the next `pulumi up` finds them again (with the provider's
`upsertExistingObjects`, which the program asks for); a namespace the stack created is kept
with the volume; `deleteSharedVolume` leaves nothing; renaming the experiment on a live stack
starts a new run in the same namespace and keeps the old volume."""

from __future__ import annotations

import pytest
from conftest import expand, pytorch_manifest
from stack_model import AlreadyExists, Stack

VOLUME = {"storage": {"sharedVolume": {"mountPoint": "/mnt/shared", "sizeGB": 10}}}
CLAIM = ("PersistentVolumeClaim", "team", "exp-shared")
NAMESPACE = ("Namespace", "", "team")


def rendering(name: str = "exp", volume: bool = True, **settings):
    spec = VOLUME if volume else {}
    return expand(pytorch_manifest(**spec), name=name, namespace="team", **settings)


def objects(run) -> int:
    return len([r for r in run.resources if r.is_kubernetes])


@pytest.mark.parametrize("create_namespace", [False, True])
def test_destroy_keeps_the_volume_and_the_next_up_finds_its_data(create_namespace):
    run = rendering(create_namespace=create_namespace)
    stack = Stack(upsert=True)
    stack.up(run)
    stack.cluster[CLAIM]["data"] = "checkpoint-42"
    stack.destroy()
    assert set(stack.cluster) == {CLAIM, *([NAMESPACE] if create_namespace else [])}
    stack.up(run)
    assert stack.cluster[CLAIM] == {"data": "checkpoint-42"}
    assert len(stack.cluster) == objects(run)


def test_without_upsert_the_next_up_stops_on_the_kept_volume():
    run = rendering()
    stack = Stack()
    stack.up(run)
    stack.destroy()
    with pytest.raises(AlreadyExists, match="PersistentVolumeClaim team/exp-shared already"):
        stack.up(run)


def test_a_namespace_the_stack_deleted_took_the_kept_volume_with_it():
    # The behaviour before: the stack's namespace went on destroy, the "kept" claim with it.
    run = rendering(create_namespace=True)
    next(r for r in run.resources if r.kind == "Namespace").options.pop("retainOnDelete")
    stack = Stack(upsert=True)
    stack.up(run)
    stack.destroy()
    assert stack.cluster == {}


@pytest.mark.parametrize("volume", [False, True])
def test_nothing_kept_nothing_left_and_up_again_needs_no_upsert(volume):
    run = rendering(volume=volume, create_namespace=True, delete_shared_volume=True)
    stack = Stack()
    stack.up(run)
    stack.destroy()
    assert stack.cluster == {}
    stack.up(run)
    assert len(stack.cluster) == objects(run)


@pytest.mark.parametrize("upsert", [False, True])
def test_renaming_the_experiment_starts_a_new_run_in_the_same_namespace(upsert):
    stack = Stack(upsert=upsert)
    stack.up(rendering("old", create_namespace=True))
    new = rendering("new", create_namespace=True)
    stack.up(new)
    assert {k[2] for k in stack.cluster if k[0] == "Job"} == {"new-master", "new-worker"}
    assert NAMESPACE in stack.cluster
    # The old volume is kept (retained) beside the new one: attach it to copy its data.
    claims = {k[2] for k in stack.cluster if k[0] == "PersistentVolumeClaim"}
    assert claims == {"old-shared", "new-shared"}
    assert len(stack.cluster) == objects(new) + 1


@pytest.mark.parametrize(
    ("upsert", "outcome"),
    [(False, "Namespace team already exists"), (True, "the new run deleted with the namespace")],
)
def test_a_namespace_named_for_the_experiment_breaks_a_rename(upsert, outcome):
    # The naming before: the Namespace's resource name (so its URN) held the experiment's.
    old, new = rendering("old", create_namespace=True), rendering("new", create_namespace=True)
    for run, name in ((old, "old"), (new, "new")):
        namespace = next(r for r in run.resources if r.kind == "Namespace")
        namespace.urn = namespace.urn.replace("namespace-team", f"{name}-namespace")
        namespace.options.pop("retainOnDelete")
    stack = Stack(upsert=upsert)
    stack.up(old)
    if not upsert:
        with pytest.raises(AlreadyExists, match=outcome):
            stack.up(new)
        return
    stack.up(new)  # adopts the namespace, then deletes it as the old resource: all is gone
    assert not [k for k in stack.cluster if k[0] == "Job"], outcome


def test_the_namespace_resource_is_the_same_whatever_the_experiment_is_called():
    def urn(name):
        run = rendering(name, create_namespace=True)
        return next(r.urn for r in run.resources if r.kind == "Namespace")

    assert urn("old") == urn("new")
