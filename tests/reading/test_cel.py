"""The CRDs' CEL rules compiled at vendor time (scripts/cel_compile.py → cel_rules.py, run on
aichor_iac/reading/cel.py) and held to cel-python: for every rule, at every place a CRD
declares it, values of the schema's types there (as the schema check lets through, CEL's
evaluation coming after it) give the same answer — holds, does not, or the same error."""

from __future__ import annotations

import importlib.util
import json
import re
import string

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aichor_iac.reading import cel, cel_rules, crd

# Strings a rule compares or converts, beside any short text
STRINGS = st.sampled_from(
    [
        "",
        "node",
        "InOrder",
        "AnyOrder",
        "abc",
        "a-b",
        "Upper",
        "1.5",
        "0",
        "-2",
        "1e3",
        " 1",
        "1_0",
        "inf",
        "nan",
        "ray.io/kuberay-operator",
        "kueue.x-k8s.io/multikueue",
        "trainer.kubeflow.org/trainjob-controller",
        "x" * 64,
        "s3://bucket/key",
        "http:/x",
        "b\n",
    ]
) | st.text(string.printable, max_size=8)
DEPTH = 4


def _script():
    spec = importlib.util.spec_from_file_location("cel_compile", ROOT / "scripts/cel_compile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _places() -> list[tuple[str, dict, str]]:
    """(rule, the schema node that declares it, where) for every shipped CRD's schema."""
    found = []

    def walk(node, where: str) -> None:
        if isinstance(node, dict):
            for rule in node.get("x-kubernetes-validations", []):
                if "oldSelf" not in rule["rule"]:
                    found.append((rule["rule"], node, where))
            for key, value in node.items():
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}.{i}")

    for path in sorted((ROOT / "aichor_iac/reading/crds").glob("*.json")):
        group, kind, _ = path.stem.split("_")
        for version in json.loads(path.read_text())["versions"]:
            schema = crd.schema(f"{group}/{version}", kind, path.stem.split("_")[2])
            if schema is not None:
                walk(schema.root, f"{kind} {version}")
    return found


PLACES = _places()


def values(node: dict, mentioned: set[str], depth: int = 0) -> st.SearchStrategy:
    """Values of a schema node's types: an object's required fields and those the rule names
    (CEL reads a field by its name), to DEPTH levels."""
    if "enum" in node:
        return st.sampled_from(node["enum"])
    kinds = node.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds or ["object"]
    return st.one_of(*[_of(kind, node, mentioned, depth) for kind in kinds])


def _of(kind: str, node: dict, mentioned: set[str], depth: int) -> st.SearchStrategy:
    if kind == "string":
        return STRINGS
    if kind == "integer":  # (within its format's and the schema's bounds, checked before)
        bound = crd.INT_BOUNDS.get(node.get("format", ""), 2**63 - 1)
        low, high = node.get("minimum", -bound - 1), node.get("maximum", bound)
        edges = st.sampled_from([low, high, bound])
        return (st.integers(-3, 70) | edges).filter(lambda n: low <= n <= high)
    if kind == "number":
        return st.floats(-5, 5) | st.integers(-3, 3)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        items = node.get("items") if depth < DEPTH else None
        return st.lists(values(items, mentioned, depth + 1), max_size=3) if items else st.just([])
    if depth >= DEPTH:
        return st.just({})
    properties = node.get("properties") or {}
    required = [key for key in node.get("required", []) if key in properties]
    optional = [key for key in properties if key in mentioned and key not in required]
    other = node.get("additionalProperties")
    if isinstance(other, dict) and not properties:
        return st.dictionaries(STRINGS, values(other, mentioned, depth + 1), max_size=2)
    return st.fixed_dictionaries(
        {key: values(properties[key], mentioned, depth + 1) for key in required},
        optional={key: values(properties[key], mentioned, depth + 1) for key in optional},
    )


def test_every_rule_of_a_shipped_crd_is_compiled_and_the_module_is_current():
    script = _script()
    assert sorted(cel_rules.RULES) == script.rules()
    assert {rule for rule, _, _ in PLACES} == set(cel_rules.RULES)
    assert (ROOT / "aichor_iac/reading/cel_rules.py").read_text() == script.module(), (
        "run python scripts/cel_compile.py"
    )


@pytest.mark.parametrize(("rule", "node", "where"), PLACES, ids=[w for _, _, w in PLACES])
def test_a_compiled_rule_answers_as_cel_python_does(rule, node, where):
    mentioned = set(re.findall(r"[A-Za-z_]\w*", rule))

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(values(node, mentioned))
    def same(value):
        decoded = crd._decoded(value)
        assert cel.holds(cel_rules.RULES[rule](decoded)) == crd._interpreted(rule, decoded)

    same()


@pytest.mark.parametrize(
    ("rule", "value", "answer"),
    [
        ("self.a.b == 1", {"a": {"b": 1}}, None),
        ("self.a.b == 1", {"a": {"b": 2}}, ""),
        ("self.a.b == 1", {"a": {}}, "no such member in mapping: 'b'"),
    ],
)
def test_a_rule_not_compiled_is_evaluated_by_cel_python(rule, value, answer):
    assert rule not in cel_rules.RULES
    assert crd._broken(rule, value) == answer


@pytest.mark.parametrize(
    ("compiled", "value", "answer"),
    [
        # (cel-python's answers, which the property test above holds each rule to)
        (cel.or_(cel.Failed("x"), True), None, None),
        (cel.and_(cel.Failed("x"), False), None, ""),
        (cel.and_(True, cel.Failed("x")), None, "x"),
        (cel.has(cel.field({}, "a"), "b"), None, ""),
        (cel.double("abc"), None, "return error for overflow"),
        (cel.compare(">=", "relation_ge", 1.5, 1), None, None),
        (cel.compare("==", "relation_eq", 3, ""), None, "found no matching overload"),
    ],
)
def test_the_operations_keep_cel_pythons_semantics(compiled, value, answer):
    found = cel.holds(compiled)
    assert found == answer or (answer and found and found.startswith(answer))
