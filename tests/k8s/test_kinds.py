"""`validate` builds every object from stand-ins of pulumi_kubernetes' types (k8s/kinds.py):
they must give exactly the objects the typed arguments give, and the same refusals, for every
input of the render corpus; and what kinds.py knows of pulumi_kubernetes must be true."""

from __future__ import annotations

import importlib
import json

import pytest
from render_corpus import cases, recorded

from aichor_iac import doors, planning
from aichor_iac.k8s import kinds, layout
from aichor_iac.k8s.context import Context
from aichor_iac.problems import ManifestError


def objects(text: str, settings, name: str) -> str:
    """The experiment's objects as canonical JSON, or the refusal, in the current mode."""
    try:
        blueprint = planning.blueprint(doors.parse(text, "case.yaml"), settings, name)
        children = layout.build(Context(blueprint), settings.create_namespace)
    except ManifestError as error:
        return f"error: {error}"
    return json.dumps([[c.kind, c.suffix, c.object] for c in children], sort_keys=True)


@pytest.mark.parametrize("case", sorted(recorded()))  # (every case: test_render_corpus.py)
def test_the_stand_ins_give_the_typed_objects(case):
    typed = objects(*cases()[case])
    with kinds.plain():
        assert objects(*cases()[case]) == typed


def test_a_stand_in_is_not_a_typed_argument():
    with kinds.plain():
        stand_in = kinds.ServiceSpecArgs(cluster_ip="None", publish_not_ready_addresses=True)
    typed = kinds.ServiceSpecArgs(cluster_ip="None", publish_not_ready_addresses=True)
    assert isinstance(stand_in, kinds.Plain) and not isinstance(typed, kinds.Plain)
    expected = {"clusterIP": "None", "publishNotReadyAddresses": True}
    assert kinds.as_json(stand_in) == kinds.as_json(typed) == expected


@pytest.mark.parametrize("name", sorted(kinds.GROUPS))
def test_kinds_knows_each_type_as_pulumi_kubernetes_names_it(name):
    from pulumi._types import input_type_py_to_pulumi_names

    module = importlib.import_module(f"pulumi_kubernetes.{kinds.GROUPS[name]}.v1")
    names = input_type_py_to_pulumi_names(getattr(module, name))
    irregular = {py: js for py, js in names.items() if kinds.camel(py) != js}
    assert irregular == kinds.IRREGULAR.get(name, {})


def test_an_unknown_type_is_an_attribute_error():
    with pytest.raises(AttributeError, match="NoSuchArgs"):
        kinds.NoSuchArgs  # noqa: B018
