"""What a command's options give: the experiment (MANIFEST, else the stack's aichor:manifest),
the stack's settings, the experiment's name and stack; and their expansion."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import doors, planning
from ..experiment.model import Experiment
from ..problems import ManifestError, Problem
from ..settings import Settings, load_stack_file
from .report import print_problem, problem_json


@dataclass(frozen=True)
class Inputs:
    manifest: Experiment
    settings: Settings
    name: str  # the experiment's
    stack: str
    stack_file: str | None


def inputs_of(args: argparse.Namespace) -> Inputs:
    """The manifest (MANIFEST, else the stack's aichor:manifest), the settings, the
    experiment's name and the stack the options give."""
    settings, stack = Settings.default(), "dev"
    if args.stack_config:
        settings, stack = load_stack_file(args.stack_config)
    if args.namespace:
        settings = settings.updated("--namespace", namespace=args.namespace)
    path = args.manifest
    configured = _stack_manifest(args.stack_config, settings)
    if path is None:
        if configured is None:
            reason = "give MANIFEST, or --stack-config with an aichor:manifest"
            raise ManifestError("aichor-iac", [Problem("MANIFEST", f"missing: {reason}")])
        path = str(configured)
    elif configured is not None and (path == "-" or Path(path).resolve() != configured.resolve()):
        reason = (
            f"{path} is used, not the stack's {settings.manifest} (what pulumi up would use): "
            "leave MANIFEST out to check the stack's"
        )
        print_problem(Problem("aichor:manifest", reason), args.stack_config, warning=True)
    manifest = doors.load(path)
    name = name_of(args, settings, manifest, stack)
    return Inputs(manifest, settings, name, stack, args.stack_config)


def name_of(args: argparse.Namespace, settings: Settings, manifest: Experiment, stack: str) -> str:
    """The experiment's name: --name, else the stack's, else the manifest's, else the stack."""
    return args.name or settings.experiment_name or manifest.name_in(stack)


def _stack_manifest(stack_file: str | None, settings: Settings) -> Path | None:
    """The stack's aichor:manifest, relative to its Pulumi project (the directory holding
    Pulumi.yaml above the stack file, where `pulumi up` runs the program)."""
    if not stack_file or not settings.manifest:
        return None
    path = Path(settings.manifest)
    if path.is_absolute():
        return path
    for directory in Path(stack_file).resolve().parents:
        if (directory / "Pulumi.yaml").exists():
            found = directory / path
            nearby = Path(os.path.relpath(found))  # as the user would write it, if short
            return found if nearby.parts[:1] == ("..",) else nearby
    return path  # no project around it: as given, from here


def expand(inputs: Inputs, manifest: Experiment | None = None, name: str | None = None):
    from ..engine import expand  # imports Pulumi: keep `validate` fast

    manifest = manifest or inputs.manifest
    return expand(manifest, inputs.settings, inputs.stack, name or inputs.name)


def show_warnings(
    inputs: Inputs, blueprint: planning.Blueprint | None = None
) -> list[dict[str, Any]]:
    """The experiment's warnings on stderr, each with the file it is about (the stack file
    for an `aichor:` key); as JSON for the commands whose document holds them."""
    blueprint = blueprint or planning.blueprint(inputs.manifest, inputs.settings, inputs.name)
    found = []
    for warning in planning.warnings(blueprint):
        source = planning.about(warning, inputs.manifest.source, inputs.stack_file)
        print_problem(warning, source, warning=True)
        found.append(problem_json(warning, source, "warning"))
    return found
