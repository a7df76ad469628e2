"""Property tests: for any valid manifest of every operator, every object is valid
Kubernetes (strict), every derived host name is a DNS label, rendering is deterministic and
the totals match the manifest."""

from __future__ import annotations

import schemas
import yaml
from conftest import expand
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aichor_iac.review import output
from aichor_iac.rules.limits import DNS_1035 as DNS_LABEL

resources = st.fixed_dictionaries(
    {"cpus": st.sampled_from([0.25, 1, 2, 7.5, 64])},
    optional={
        "shmSizeGB": st.sampled_from([0, 1, 16]),
        "cpuLimitRatio": st.sampled_from([1, 1.5, 4]),
        "accelerators": st.sampled_from(
            [
                {"gpu": {"count": 1, "product": "NVIDIA-A100-SXM4-80GB"}},
                {"gpu": {"count": 2, "type": "mig-3g.40gb"}},
            ]
        ),
    },
).map(lambda r: {**r, "ramRatio": 2})
count = st.integers(min_value=1, max_value=6)
group = st.builds(lambda n, r: {"count": n, "resources": r}, count, resources)

types_by_operator = {
    "pytorch": st.one_of(
        st.fixed_dictionaries({"Master": group.map(lambda g: {**g, "count": 1}), "Worker": group}),
        st.fixed_dictionaries({"worker": group}),
    ),
    "xgboost": st.fixed_dictionaries(
        {"Master": group.map(lambda g: {**g, "count": 1}), "Worker": group}
    ),
    "jax": st.fixed_dictionaries({"Worker": group}),
    "paddle": st.fixed_dictionaries({"Worker": group}, optional={"Master": group}),
    "tf": st.fixed_dictionaries(
        {"Worker": group},
        optional={
            "Chief": group.map(lambda g: {**g, "count": 1}),
            "PS": group,
            "Evaluator": group.map(lambda g: {**g, "count": 1}),
        },
    ),
    "mpi": st.fixed_dictionaries(
        {"Launcher": group.map(lambda g: {**g, "count": 1}), "Worker": group}
    ),
}
pools = st.lists(
    st.builds(
        lambda name, g: {"name": name, **g},
        st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True).filter(
            lambda n: n not in ("head", "job", "submitter")
        ),
        group,
    ),
    min_size=1,
    max_size=3,
    unique_by=lambda pool: pool["name"],
)
single = group.map(lambda g: {**g, "count": 1})
types_by_operator["ray"] = st.fixed_dictionaries({"Head": single, "Workers": pools, "Job": single})
types_by_operator["kuberay"] = st.fixed_dictionaries({"Head": single, "Workers": pools})
types_by_operator["batchjob"] = st.fixed_dictionaries({"Worker": group})
types_by_operator["jobset"] = st.dictionaries(
    st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True),
    st.builds(
        lambda g, completions, parallelisms: {
            **g,
            "count": min(g["count"], 3),
            "completions": completions,
            "parallelisms": parallelisms,
        },
        group,
        st.integers(1, 4),
        st.integers(1, 4),
    ),
    min_size=1,
    max_size=3,
)


def pods(data: dict) -> int:
    """Replicas the manifest asks for (kuberay adds its submitter; a jobset type has `count`
    Jobs of `completions` pods)."""
    types = data["spec"]["types"]
    counts = [g["count"] * g.get("completions", 1) for g in types.values() if isinstance(g, dict)]
    counts += [pool["count"] for pool in types.get("Workers", [])]
    return sum(counts) + (data["spec"]["operator"] == "kuberay")


manifests = st.sampled_from(sorted(types_by_operator)).flatmap(
    lambda op: st.builds(
        lambda types, name: (
            name,
            {"spec": {"operator": op, "image": "img", "command": "run", "types": types}},
        ),
        types_by_operator[op],
        st.text(alphabet="abcXYZ-_.09", min_size=1, max_size=80),
    )
)


@given(manifests)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_manifest_renders_valid_deterministic_objects(case):
    name, data = case
    rendering = expand(data, name=name)
    objects = rendering.objects
    assert output.to_yaml(objects) == output.to_yaml(expand(data, name=name).objects)
    for obj in objects:
        schemas.validate(obj)
    jobs = [o for o in objects if o["kind"] == "Job"]
    for job in jobs:
        last = f"{job['metadata']['name']}-{job['spec']['completions'] - 1}"
        assert DNS_LABEL.match(last) and len(last) <= 63
    assert rendering.outputs["pods"] == pods(data) == sum(j["spec"]["completions"] for j in jobs)


# Any text a user can put in a manifest (commands, env values, labels), nested as objects nest
texts = st.text(min_size=1, max_size=12)
documents = st.recursive(
    st.one_of(st.text(), st.integers(), st.booleans(), st.none()),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=10,
)


@given(st.dictionaries(texts, documents, max_size=4))
@settings(max_examples=500, deadline=None)
def test_rendered_yaml_reads_back_as_the_objects(obj):
    """`render`'s YAML (libyaml's emitter where PyYAML has it, else PyYAML's) is the objects:
    `kubectl apply -f` of it creates what the program registers, whatever the strings hold."""
    assert yaml.safe_load(output.to_yaml([obj])) == obj
