"""Where a problem of the JobSet a TrainJob becomes is in what the user wrote: a field of the
TrainJob's trainer (its image, command, args, env, resources per node), else the runtime's
template (a runtime given in the file, or the standard one named). Both the JobSet door's
problems and the API server's rules on the built Jobs (`Kept.placed`) come back here, never
naming a replicated Job or object of aichor-iac's own.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ...experiment.origin import Kept
from ...problems import Problem, line_for

# The trainer's fields, by the field of the node container each sets
TRAINER_FIELDS = {
    "image": "image",
    "command": "command",
    "args": "args",
    "env": "env",
    "resources": "resourcesPerNode",
}
# A field of a replicated Job's container in the built JobSet
CONTAINER_FIELD = re.compile(
    r"spec\.replicatedJobs\.\d+\.template\.spec\.template\.spec\.containers\.\d+\."
    r"(image|command|args|env|resources)\b"
)


def onto(runtime_lines: dict) -> dict:
    """A runtime's lines as the built JobSet's: its `spec.template.spec.…` is the JobSet's
    `spec.…`."""
    prefix = ("spec", "template", "spec")
    return {("spec", *p[3:]): n for p, n in runtime_lines.items() if tuple(p[:3]) == prefix}


def given(trainer: Any) -> dict[str, str]:
    """The node container's fields the TrainJob's trainer gives, and where (`spec.trainer.*`)."""
    names = trainer.model_fields_set if trainer else ()
    fields_set = {type(trainer).model_fields[name].alias for name in names}
    return {
        field: f"spec.trainer.{key}" for field, key in TRAINER_FIELDS.items() if key in fields_set
    }


def problem(found: Problem, trainer_fields: dict[str, str], lines: dict) -> Problem:
    """A problem of the built JobSet, at the TrainJob's trainer field it comes from, else at
    its runtime's path."""
    match = CONTAINER_FIELD.match(found.path)
    field = match.group(1) if match else None
    if field in trainer_fields:
        path = trainer_fields[field]
        return Problem(path, found.message, line_for(tuple(path.split(".")), lines))
    if found.path.startswith("spec."):
        return dataclasses.replace(found, path=f"runtime: spec.template.{found.path}")
    return found


def at_trainjob(
    templates: dict[str, Kept], trainers: set[str], trainer_fields: dict[str, str], runtime: str
) -> dict[str, Kept]:
    """The built JobSet's templates placed in the TrainJob: each at its runtime's replicated
    Job (`runtime` names the runtime; "" for one given in the file), the trainer's Jobs' node
    container fields at the trainer's."""
    where = f"runtime {runtime}: " if runtime else "runtime: "
    return {
        name: dataclasses.replace(
            one,
            path=f"{where}spec.template.{one.path}",
            given=trainer_fields if name in trainers else {},
        )
        for name, one in templates.items()
    }
