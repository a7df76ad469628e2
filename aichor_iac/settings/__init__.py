"""Stack configuration (`aichor:*` keys of a `Pulumi.<stack>.yaml`), shared by `__main__.py`
and the offline CLI so both expand a manifest the same way.

`Pulumi.yaml` declares the same keys with type, default and description (tests/test_program.py
keeps the two in step); docs/config.md is generated from the concerns (`reference()`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from ..problems import ManifestError, Problem
from .concerns import (
    Concern,
    Failures,
    GangScheduler,
    Network,
    Placement,
    Platform,
    Progress,
    Scheduling,
    Security,
    Storage,
    Waiting,
    WaitMode,
    told_entrypoint,
)
from .keeping import HISTORY_SCHEMES, Keeping, history_url, service_url

__all__ = [
    "CONFIG_KEYS",
    "HISTORY_SCHEMES",
    "GangScheduler",
    "Settings",
    "WaitMode",
    "from_config",
    "from_pulumi_config",
    "history_url",
    "load_stack_file",
    "reference",
    "service_url",
    "told_entrypoint",
    "validated",
]


# The concerns in the order of the config reference (pydantic takes the fields of the last
# base first: Settings lists them in reverse).
CONCERNS: tuple[type[Concern], ...] = (
    Placement,
    Waiting,
    Failures,
    Platform,
    Progress,
    Keeping,
    Storage,
    Scheduling,
    Network,
    Security,
)


class Settings(
    Security,
    Network,
    Scheduling,
    Storage,
    Keeping,
    Progress,
    Platform,
    Failures,
    Waiting,
    Placement,
):
    """Everything about an experiment that is not in its manifest: the stack's `aichor:*`
    config, one concern per base class."""

    @classmethod
    def default(cls) -> Settings:
        """What a stack that sets nothing gets: `Settings()`, without building the validator
        (`validate` and `render` without a stack config need none)."""
        return cls.model_construct()

    def updated(self, source: str = "command line", **changes: Any) -> Settings:
        """A copy with `changes`, validated as the stack config is (`model_copy` is not)."""
        data = self.model_dump(by_alias=True)  # aliases: errors name the `aichor:` keys
        data.update({Settings.model_fields[k].alias or k: v for k, v in changes.items()})
        return validated(data, source)


def reference() -> str:
    """The config reference (docs/config.md): a table per concern, from the fields."""
    out = []
    for concern in CONCERNS:
        out += [f"## {concern.__doc__}", "", "| key | default | meaning |", "|---|---|---|"]
        for name, field in concern.model_fields.items():
            default = field.get_default(call_default_factory=True)
            text = default if isinstance(default, str) else json.dumps(default)
            shown = "unset" if default is None else f"`{text}`"
            out.append(f"| `{field.alias or to_camel(name)}` | {shown} | {field.description} |")
        out.append("")
    return "\n".join(out)


CONFIG_KEYS: tuple[str, ...] = tuple(f.alias or n for n, f in Settings.model_fields.items())


# The keys whose value is a list, which a single string may give
LISTS = ("imagePullSecrets", "egressCIDRs", "rdmaNetworks", "entrypoints")


def from_config(values: dict[str, Any], source: str = "stack config") -> Settings:
    """Settings from `aichor:*` config values (namespace prefix optional).

    Pulumi hands structured values (arrays) to programs as JSON text; both forms are accepted.
    """
    data: dict[str, Any] = {}
    for key, value in values.items():
        name = key.split(":", 1)[1] if key.startswith("aichor:") else key
        if ":" in name or value in ("", None):  # another provider's key, or unset
            continue
        if name in LISTS and isinstance(value, str):
            value = json.loads(value) if value.strip().startswith("[") else [value]
        data[name] = value
    return validated(data, source)


def validated(data: dict[str, Any], source: str) -> Settings:
    """Settings from plain values, or a ManifestError naming each bad `aichor:` key."""
    try:
        return Settings.model_validate(data)
    except ValidationError as error:
        raise ManifestError(
            source,
            [
                Problem("aichor:" + ".".join(str(p) for p in e["loc"]), _sentence(e))
                for e in error.errors()
            ],
        ) from None


def from_pulumi_config(config: Any) -> Settings:
    """Settings from the running stack's `pulumi.Config("aichor")`."""
    values = {key: config.get(key) for key in CONFIG_KEYS}
    return from_config({k: v for k, v in values.items() if v is not None}, "Pulumi config")


def load_stack_file(path: str | Path) -> tuple[Settings, str]:
    """Settings from a `Pulumi.<stack>.yaml` file, and the stack name its file name gives."""
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ManifestError(
            str(path), [Problem("", f"cannot read stack config: {error}")]
        ) from None
    config = document.get("config") or {}
    settings = from_config({k: v for k, v in config.items() if k.startswith("aichor:")}, str(path))
    stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml").removesuffix(".yml")
    return settings, stack


def _sentence(error: Mapping[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return f"unknown key; the aichor keys are {', '.join(CONFIG_KEYS)}"
    return error["msg"].removeprefix("Value error, ")
