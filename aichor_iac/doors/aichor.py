"""The AIchor door: an AIchor experiment manifest (`kind: AIchorManifest`, apiVersion
0.2.1–0.2.3) as the neutral `Experiment`, every problem with its path and line; and the
manifest's JSON Schema for editors.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from ..experiment import rules
from ..experiment.groups import JOBSET_TYPE, OPERATORS, JobSetTypes, Model, types_model
from ..experiment.model import EnvVar, Experiment, Spec
from ..problems import ManifestError, Problem, line_for
from ..reading.errors import problem

KIND = "AIchorManifest"
# Operators of AIchor manifests that target another platform than Kubernetes: one clear refusal.
OTHER_PLATFORMS = {
    "vertexai": "Google Cloud's Vertex AI custom jobs (workerPoolSpecs)",
    "slurm": "a Slurm cluster (sbatch jobs)",
}


# The manifest as written: AIchor's envelope around the experiment's `spec`. (No docstring:
# pydantic would put it in the JSON Schema.)
class Manifest(Model):
    kind: Literal["AIchorManifest"] = "AIchorManifest"
    api_version: Literal["0.2.1", "0.2.2", "0.2.3"] = "0.2.2"
    name: str | None = Field(None, description="Experiment name (default: the stack name).")
    builder: dict[str, Any] | None = Field(None, description="Image build settings (ignored).")
    spec: Spec

    @field_validator("api_version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int | float) else value


def read(data: dict[str, Any], source: str, lines: dict) -> Experiment:
    """The experiment an AIchor manifest describes, or ManifestError naming every problem."""
    spec = data.get("spec")
    operator = spec.get("operator") if isinstance(spec, dict) else None
    if isinstance(operator, str) and operator in OTHER_PLATFORMS:
        raise ManifestError(
            source,
            [
                Problem(
                    "spec.operator",
                    f"'{operator}' targets {OTHER_PLATFORMS[operator]}, another platform: "
                    f"aichor-iac runs AIchor's Kubernetes operators ({', '.join(OPERATORS)}); "
                    "rewrite the experiment for one of them",
                    line_for(("spec", "operator"), lines),
                )
            ],
        )
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as error:
        problems = [problem(e, lines, Manifest, operator) for e in error.errors()]
        raise ManifestError(source, sorted(problems, key=lambda p: p.line or 0)) from None
    experiment = Experiment(name=manifest.name, spec=manifest.spec).read_from(source, lines)
    if found := rules.check(experiment.spec):
        raise experiment.error(found)
    return experiment


def json_schema() -> dict[str, Any]:
    """The manifest's JSON Schema, for editors (`aichor-iac schema`): `types` follows the
    operator (if/then per operator), type keys in either casing, `env` in either form."""
    schema = Manifest.model_json_schema(by_alias=True)
    defs = schema["$defs"]
    spec = defs["Spec"]
    spec["properties"]["types"] = {
        "type": "object",
        "description": spec["properties"]["types"].get("description", ""),
    }
    env = spec["properties"]["env"]
    spec["properties"]["env"] = {
        "anyOf": [
            {"type": "array", "items": env["items"]},
            {
                "type": "object",
                "propertyNames": {"pattern": EnvVar.model_fields["name"].metadata[0].pattern},
                "additionalProperties": {"type": ["string", "number", "boolean"]},
            },
        ],
        "description": env["description"],
    }
    spec["allOf"] = []
    for operator in OPERATORS:
        model = types_model(operator)
        sub = model.model_json_schema(by_alias=True, ref_template="#/$defs/{model}")
        defs.update(sub.pop("$defs", {}))
        properties = sub.get("properties", {})
        properties.update({k.lower(): v for k, v in list(properties.items())})
        if model is JobSetTypes:
            sub["propertyNames"] = {"pattern": "^" + JOBSET_TYPE.pattern.removesuffix("\\Z") + "$"}
        defs[model.__name__] = sub
        spec["allOf"].append(
            {
                "if": {"properties": {"operator": {"const": operator}}, "required": ["operator"]},
                "then": {"properties": {"types": {"$ref": f"#/$defs/{model.__name__}"}}},
            }
        )
    defs.pop("Types", None)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "AIchor experiment manifest (aichor-iac)"
    return schema
