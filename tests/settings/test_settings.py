"""The stack's settings (`aichor:*`): what an empty stack gets, what Pulumi.yaml declares, and
each bad value refused naming its key and the fix, before anything is rendered."""

from __future__ import annotations

import pytest
import yaml
from conftest import ROOT

from aichor_iac.problems import ManifestError
from aichor_iac.settings import CONFIG_KEYS, Settings, from_config


def test_the_default_settings_are_those_of_an_empty_stack_config():
    # (made without building the validator: `Settings.default`)
    default = Settings.default()
    assert default == Settings() == from_config({})
    assert default.model_dump() == Settings().model_dump()
    assert default.model_fields_set == Settings().model_fields_set == set()


def test_pulumi_yaml_declares_every_setting_with_type_default_and_description():
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["name"] == "aichor" and project["stackConfigDir"] == "stacks"
    assert project["runtime"]["options"]["virtualenv"] == ".venv"
    declared = project["config"]
    assert sorted(declared) == sorted(CONFIG_KEYS)  # project keys: aichor:<key> in stacks
    defaults = Settings()
    for key, spec in declared.items():
        assert spec["type"] in ("string", "integer", "boolean", "array") and spec["description"]
        name = key
        if name == "manifest":
            assert "default" not in spec  # required
            continue
        field = next(n for n, f in Settings.model_fields.items() if (f.alias or n) == name)
        if spec["type"] in ("integer", "boolean") and getattr(defaults, field) is None:
            assert "default" not in spec  # unset unless given
            continue
        assert spec["default"] == (
            getattr(defaults, field) if getattr(defaults, field) is not None else ""
        )


# A bad value per concern, and what its refusal says after `aichor:KEY: `
REFUSED = [
    ({"history": "s3://"}, "history", "'s3://': give the bucket's (container's) name after"),
    ({"history": "ftp://h/x"}, "history", "'ftp://h/x': give an absolute path, file://, s3://"),
    ({"mlflow": "http://u:p@mlflow"}, "mlflow", "a URL with credentials would be rendered"),
    ({"entrypoints": "img"}, "entrypoints", "img: give IMAGE=COMMAND"),
    ({"entrypoints": ["img=python 'a"]}, "entrypoints", "img=python 'a: No closing quotation"),
    ({"egressCIDRs": "x"}, "egressCIDRs", "'x' is not a CIDR such as 10.0.0.0/8"),
    ({"namespace": "Bad_NS"}, "namespace", "'Bad_NS' must be a DNS label"),
    ({"imagePullSecrets": "a/b"}, "imagePullSecrets", "'a/b' is not a Kubernetes name"),
    ({"runAsUser": -1}, "runAsUser", "Input should be greater than or equal to 0"),
    ({"wait": "sometimes"}, "wait", "Input should be 'none', 'ready' or 'complete'"),
    ({"nameSpace": "a"}, "nameSpace", "unknown key; the aichor keys are manifest, namespace"),
]


@pytest.mark.parametrize(("values", "key", "said"), REFUSED)
def test_a_bad_value_is_refused_naming_its_key_and_the_fix(values, key, said):
    with pytest.raises(ManifestError) as refused:
        from_config(values, "Pulumi.dev.yaml")
    assert str(refused.value).startswith(f"Pulumi.dev.yaml: aichor:{key}: {said}"), refused.value


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("a", ["a"]),  # (one value for a list key)
        ('["a", "b"]', ["a", "b"]),  # (Pulumi hands arrays to programs as JSON text)
        (["a", "b"], ["a", "b"]),
    ],
)
def test_a_list_key_takes_one_value_json_text_or_a_list(given, kept):
    assert from_config({"aichor:imagePullSecrets": given}).image_pull_secrets == kept


def test_another_providers_keys_and_unset_values_are_left_alone():
    settings = from_config({"kubernetes:context": "kind", "aichor:namespace": "", "wait": None})
    assert settings == Settings()
