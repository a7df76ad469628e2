"""The API server's rules the OpenAPI schema omits (`aichor_iac.rules.limits`): every rule catches
what it is for, the objects we render keep all of them, the checked objects are exactly the
ones Pulumi registers, and what breaks a rule is refused before anything is created."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, ROOT

from aichor_iac import cli, doors, engine, planning
from aichor_iac.k8s import layout
from aichor_iac.k8s.context import Context
from aichor_iac.problems import ManifestError
from aichor_iac.rules import limits
from aichor_iac.settings import Settings, load_stack_file

EVERYTHING = Settings(create_namespace=True, gang_scheduler="coscheduling")


def children(path: Path, settings: Settings = EVERYTHING) -> list[layout.Child]:
    blueprint = planning.blueprint(doors.load(path), settings, path.stem)
    return layout.children(Context(blueprint), settings.create_namespace)


def one_of_each_kind() -> dict[str, dict[str, Any]]:
    """A rendered object of every kind we create (MPI: ConfigMap and Secret; TensorBoard: a
    Deployment and a volume)."""
    found: dict[str, dict[str, Any]] = {}
    for name in ("mpi-horovod", "pytorch-tensorboard"):
        for child in children(ROOT / "examples" / f"{name}.yaml"):
            found.setdefault(child.kind, child.object)
    return found


OBJECTS = one_of_each_kind()
POD = "spec.template.spec"
MAIN = f"{POD}.containers.0"
BIG = "x" * (200 * 1024)

# (kind, path, value, what the problem says). A path step that is a number is a list index.
CASES = [
    ("Namespace", "metadata.name", "Bad_NS", "is not a DNS label"),
    ("Job", "metadata.name", "j" * 64, "is not a DNS label"),
    ("Job", "spec.completions", 100, "pod host name"),  # with the 61-character name below
    ("Service", "metadata.name", "1st", "is not a DNS-1035 label"),
    ("ConfigMap", "metadata.name", "a/b", "is not a DNS subdomain"),
    ("Job", "metadata.labels.bad key", "x", "is not a label key"),
    ("Job", "metadata.labels.app.kubernetes.io/name", "v" * 64, "is not a label value"),
    ("Job", "spec.template.metadata.labels.-x", "x", "is not a label key"),
    ("Job", f"{POD}.nodeSelector.gpu", "A100 80GB", "is not a label value"),
    ("Service", "spec.selector.x y", "x", "is not a label key"),
    ("Service", "spec.selector.x", "x y", "is not a label value"),
    ("Job", "metadata.annotations.bad key", "x", "is not a label key"),
    ("Job", "metadata.annotations.big", "a" * (257 * 1024), "more than annotations hold"),
    ("Job", f"{MAIN}.name", "Main", "is not a DNS label"),
    ("Job", f"{MAIN}.image", "python:3.11 ", "is not an image reference"),
    ("Job", f"{MAIN}.env.0.name", "1X", "is not an environment variable name"),
    ("Job", f"{MAIN}.env.1.value", BIG, "more than one argument or environment entry"),
    ("Job", f"{MAIN}.envFrom", [{"secretRef": {"name": "Bad Name"}}], "is not a DNS subdomain"),
    (
        "Job",
        f"{MAIN}.env.0.valueFrom",
        {"configMapKeyRef": {"name": "$(x)", "key": "k"}},
        "is not a DNS subdomain",
    ),
    ("Job", f"{MAIN}.args", [BIG[:100_000]] * 25, "more than a Linux process starts with"),
    ("Job", f"{MAIN}.resources.requests.cpu", "lots", "is not a quantity"),
    ("Job", f"{MAIN}.resources.limits.nvidia.com/gpu", "0.5", "not a whole number of devices"),
    ("Job", f"{MAIN}.resources.requests.nvidia.com/gpu", "2", "requested exactly as it is"),
    ("Job", f"{MAIN}.ports.0.name", "a-port-name-too-long", "is not a port name"),
    ("Job", f"{MAIN}.ports.0.containerPort", 70000, "is not a whole number from 1 to 65,535"),
    ("Service", "spec.ports.0.port", 0, "is not a whole number from 1"),
    ("Job", f"{POD}.tolerations.0.key", "bad key", "is not a label key"),
    ("Job", f"{POD}.tolerations.0.value", "x", "with operator Exists has no value"),
    ("Job", f"{POD}.volumes.0.name", "Dshm", "is not a DNS label"),
    ("Job", f"{POD}.subdomain", "Bad", "is not a DNS label"),
    ("Job", "spec.parallelism", 0, "is not a whole number from 1 to 100,000"),
    ("Job", "spec.completions", 100_001, "is not a whole number from 1 to 100,000"),
    ("ConfigMap", "data.hostfile", "h" * (1024 * 1024 + 1), "more than 1 MiB"),
    ("ConfigMap", "data.a b", "x", "is not a data key"),
    ("Secret", "stringData.a/b", "x", "is not a data key"),
    ("Secret", "stringData.big", "x" * (1024 * 1024 + 1), "more than 1 MiB"),
    ("Secret", "data", {"big": "x" * (1024 * 1024 + 1)}, "more than 1 MiB"),
    ("NetworkPolicy", "spec.egress.0.to.0.ipBlock", {"cidr": "10.0.0.0/33"}, "is not a CIDR"),
    ("PersistentVolumeClaim", "spec.resources.requests.storage", "1 TB", "is not a quantity"),
    ("Deployment", "metadata.annotations.big", "a" * (1600 * 1024), "etcd stores as one object"),
    *[("PodGroup", f"spec.{f}", 2**31, "from 0 to 2,147,483,647") for f in limits.INT32_FIELDS],
    ("Job", f"{MAIN}.volumeMounts", [{"name": "nope", "mountPath": "/a"}], "which is not a volume"),
    # A custom resource's schedulingPolicy, in the gang's PodGroup.
    ("PodGroup", "spec.minResources", {"cpu": "4 cores"}, "is not a quantity"),
    ("PodGroup", "spec.minResources", {"a b": "1"}, "is not a resource name"),
    ("PodGroup", "spec.queue", "Team_A", "is not a DNS subdomain"),
    ("PodGroup", "spec.priorityClassName", "High!", "is not a DNS subdomain"),
]
TOLERATIONS = [  # the rules that need a toleration's fields together
    ({"value": "x"}, "without a key must have operator Exists"),
    ({"key": "k", "value": "bad value"}, "is not a label value"),
    ({"key": "k", "operator": "Exists", "tolerationSeconds": 5}, "needs effect NoExecute"),
]


MAPS = {
    "labels",
    "annotations",
    "nodeSelector",
    "selector",
    "requests",
    "limits",
    "data",
    "stringData",
}


def put(obj: dict[str, Any], path: str, value: Any) -> None:
    """Set `path` (dots between steps; after a map such as `labels` the rest is one key, which
    may hold dots), creating maps on the way."""
    steps = path.split(".")
    node: Any = obj
    while len(steps) > 1:
        step = steps.pop(0)
        node = node[int(step)] if isinstance(node, list) else node.setdefault(step, {})
        if step in MAPS:
            steps = [".".join(steps)]
    if isinstance(node, list):
        node[int(steps[0])] = value
    else:
        node[steps[0]] = value


def broken(kind: str, path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(OBJECTS[kind])
    if path == "spec.completions" and value == 100:
        obj["metadata"]["name"] = "j" * 61
    if path.startswith(f"{POD}.tolerations"):
        obj["spec"]["template"]["spec"]["tolerations"] = [{"key": "k", "operator": "Exists"}]
    if "resources.requests.nvidia.com/gpu" in path:
        put(obj, f"{MAIN}.resources.limits.nvidia.com/gpu", "1")
    put(obj, path, value)
    return obj


def test_every_kind_we_render_keeps_every_rule():
    assert {"Namespace", "Secret", "ConfigMap", "PersistentVolumeClaim", "NetworkPolicy"} <= set(
        OBJECTS
    )
    assert {"PodGroup", "Service", "Job", "Deployment"} <= set(OBJECTS)
    assert limits.check(list(OBJECTS.values())) == []


@pytest.mark.parametrize(("kind", "path", "value", "says"), CASES, ids=lambda c: str(c)[:40])
def test_each_rule_catches_what_it_is_for(kind, path, value, says):
    problems = limits.check([broken(kind, path, value)])
    assert any(says in p for p in problems), problems
    name = broken(kind, path, value)["metadata"]["name"]
    assert all(p.startswith(f"{kind}/{name}: ") for p in problems)


@pytest.mark.parametrize(("toleration", "says"), TOLERATIONS)
def test_toleration_rules(toleration, says):
    job = copy.deepcopy(OBJECTS["Job"])
    job["spec"]["template"]["spec"]["tolerations"] = [toleration]
    assert any(says in p for p in limits.check([job]))


def test_every_rule_has_a_case():
    hit = {
        id(rule)
        for kind, path, value, _ in CASES
        for rule, _, _ in limits.violations(broken(kind, path, value))
    }
    for toleration, _ in TOLERATIONS:
        job = copy.deepcopy(OBJECTS["Job"])
        job["spec"]["template"]["spec"]["tolerations"] = [toleration]
        hit |= {id(rule) for rule, _, _ in limits.violations(job)}
    missing = [f"{r.path} ({r.source})" for r in limits.RULES if id(r) not in hit]
    assert not missing


def test_a_path_names_list_items_by_their_name():
    job = broken("Job", f"{MAIN}.env.1.value", BIG)
    container = job["spec"]["template"]["spec"]["containers"][0]
    (problem,) = limits.check([job])
    assert f"spec.template.spec.containers[{container['name']}]: " in problem
    assert f"{container['env'][1]['name']} is 204,8" in problem


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_checked_objects_are_the_objects_pulumi_registers(example):
    """`Child.object` (what `limits` checks) is what the provider receives, key for key."""
    settings, stack = load_stack_file(ROOT / "stacks" / f"Pulumi.{example.stem}.yaml")
    model = doors.load(example)
    name = settings.experiment_name or model.name or stack
    rendered = engine.expand(model, settings, stack, name).objects
    checked = [c.object for c in children_for(model, settings, name)]
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    for obj in checked:
        if obj["kind"] == "Secret":  # values are generated by Pulumi, redacted when rendered
            obj["stringData"] = dict.fromkeys(obj["stringData"], engine.REDACTED)
    assert sorted(checked, key=key) == sorted(rendered, key=key)


def children_for(model, settings, name):
    blueprint = planning.blueprint(model, settings, name)
    return layout.build(Context(blueprint), settings.create_namespace)


@pytest.mark.parametrize(
    ("operator", "role", "count", "says"),
    [
        ("tf", "Worker", 3000, "TF_CONFIG is 1"),
        ("xgboost", "Worker", 8000, "WORKER_ADDRS is"),
        ("mpi", "Worker", 30000, "bytes of data (hostfile: 1,8"),
    ],
)
def test_host_lists_past_what_a_process_or_configmap_holds_are_refused(
    operator, role, count, says, tmp_path, capsys
):
    """The error names the replica type, the variable (or file) and both sizes; nothing is
    registered (the component checks before it registers anything)."""
    example = {"tf": "tf", "xgboost": "xgboost", "mpi": "mpi-horovod"}[operator]
    text = (ROOT / "examples" / f"{example}.yaml").read_text()
    path = tmp_path / "big.yaml"
    path.write_text(re.sub(rf"({role}:\n\s+count:) \d+", rf"\1 {count}", text))

    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert says in err
    assert f"spec.types.{role}: " in err or "ConfigMap/" in err
    with pytest.raises(ManifestError, match="more than"):
        engine.expand(doors.load(path), Settings(), name="big")


WORKER = "spec:\n  operator: batchjob\n  image: {image}\n  command: c\n  types:\n    Worker:\n      resources:\n        cpus: 1\n        ramRatio: 1\n{more}"


@pytest.mark.parametrize(
    ("image", "more", "says"),
    [
        ("'python 3.11'", "", "spec.image: "),
        ("'python:3.11\n'", "", "spec.image: "),
        (
            "i",
            "        extraSelectors: {'bad key': x}\n",
            "extraSelectors.bad key.[key]: 'bad key' is not a label key",
        ),
        (
            "i",
            "        extraSelectors: {pool: 'A100 80GB'}\n",
            "extraSelectors.pool: 'A100 80GB' is not a label value",
        ),
        (
            "i",
            f"        extraSelectors: {{pool: {'v' * 64}}}\n",
            "is not a label value (at most 63",
        ),
        (
            "i",
            "        accelerators: {gpu: {count: 1, product: 'Tesla T4'}}\n",
            "gpu.product: 'Tesla T4' is not",
        ),
        ("i", "        extraTolerations: [{value: x}]\n", "without a key needs operator: Exists"),
        ("i", "        extraTolerations: [{key: k, operator: Exists, value: x}]\n", "has no value"),
        (
            "i",
            "        extraTolerations: [{key: k, tolerationSeconds: 3}]\n",
            "needs effect: NoExecute",
        ),
        (
            "i",
            "        extraTolerations: [{key: 'a b', operator: Exists}]\n",
            "extraTolerations.0.key",
        ),
        ("i", "        extraTolerations: [{key: k, value: 'a b'}]\n", "extraTolerations.0.value"),
    ],
)
def test_fields_that_become_labels_and_tolerations_are_checked_where_written(
    image, more, says, tmp_path, capsys
):
    path = tmp_path / "x.yaml"
    path.write_text(WORKER.format(image=image, more=more))
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err, err


def test_fine_labels_and_tolerations_pass():
    more = (
        "        extraSelectors: {cloud.google.com/gke-nodepool: pool-1, tier: ''}\n"
        "        extraTolerations: [{operator: Exists}, {key: k, value: v, effect: NoSchedule},"
        " {key: k, operator: Exists, effect: NoExecute, tolerationSeconds: 30}]\n"
        "        accelerators: {gpu: {count: 1, product: NVIDIA-A100-SXM4-80GB}}\n"
    )
    model = doors.parse(WORKER.format(image="ghcr.io/x/y@sha256:abc", more=more))
    assert limits.check([c.object for c in children_for(model, Settings(), "x")]) == []
