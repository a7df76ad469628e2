"""What a command's options give: the experiment (MANIFEST, else the stack's aichor:manifest),
the stack's settings, the experiment's name and stack; and their expansion."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import doors, planning
from ..experiment.model import Experiment
from ..experiment.trial import Ended
from ..problems import ManifestError, Problem
from ..settings import Settings, load_stack_file, told_entrypoint
from .process import collector_paused
from .report import print_problem, problem_json


@dataclass(frozen=True)
class Inputs:
    manifests: tuple[Experiment, ...]  # the file's (or directory's) experiments
    settings: Settings
    names: tuple[str, ...]  # each one's
    stack: str
    stack_file: str | None
    path: str = "-"  # where the experiments were read

    def grown(self, ended: Ended) -> Inputs:
        """The inputs read again, with the objectives of the trials that have `ended`: a
        sweep that learns with the trials they allow (`doors.load_all`)."""
        if self.path == "-":
            reason = (
                "a sweep that learns is read again as its trials end: give its file, not "
                "standard input"
            )
            raise ManifestError("<stdin>", [Problem("", reason)])
        manifests = doors.load_all(self.path, ended)
        names = tuple(m.name_in(self.stack) for m in manifests)
        return replace(self, manifests=manifests, names=names)

    @property
    def absolute(self) -> str:
        """Where the experiments were read, absolute: what this machine's runs of them are
        announced and kept by (none for standard input)."""
        return str(Path(self.path).resolve()) if self.path != "-" else ""

    @property
    def manifest(self) -> Experiment:
        """The experiment, for the commands that take one."""
        return self._one()[0]

    @property
    def name(self) -> str:
        return self._one()[1]

    def _one(self) -> tuple[Experiment, str]:
        if len(self.manifests) > 1:
            reason = (
                f"holds {len(self.manifests)} experiments ({', '.join(self.names)}): convert "
                "takes one; give its own file"
            )
            raise ManifestError(self.manifests[0].source, [Problem("", reason)])
        return self.manifests[0], self.names[0]

    def each(self) -> list[tuple[Experiment, str]]:
        """Each experiment and its name."""
        return list(zip(self.manifests, self.names, strict=True))


@collector_paused()  # (reading makes the objects that live until the command ends)
def inputs_of(args: argparse.Namespace) -> Inputs:
    """The manifest (MANIFEST, else the stack's aichor:manifest), the settings, the
    experiment's name and the stack the options give."""
    settings, stack = Settings.default(), "dev"
    if args.stack_config:
        settings, stack = load_stack_file(args.stack_config)
    if args.namespace:
        settings = settings.updated("--namespace", namespace=args.namespace)
    if told := getattr(args, "entrypoint", None):  # (run --local's, after the stack's)
        settings = _with_entrypoints(settings, told)
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
    manifests = doors.load_all(path)
    names = names_of(args, settings, manifests, stack)
    return Inputs(manifests, settings, names, stack, args.stack_config, path)


def _with_entrypoints(settings: Settings, told: list[str]) -> Settings:
    """The settings with `--entrypoint IMAGE=COMMAND` options after the stack's own."""
    for option in told:
        try:
            told_entrypoint(option)
        except ValueError as error:
            raise ManifestError("--entrypoint", [Problem("", str(error))]) from None
    return settings.updated("--entrypoint", entrypoints=[*settings.entrypoints, *told])


def names_of(
    args: argparse.Namespace, settings: Settings, manifests: tuple[Experiment, ...], stack: str
) -> tuple[str, ...]:
    """The experiment's name: --name, else the stack's, else the manifest's, else the stack;
    of several, each its own."""
    if len(manifests) == 1:
        return (args.name or settings.experiment_name or manifests[0].name_in(stack),)
    given = "--name" if args.name else "aichor:experimentName" if settings.experiment_name else ""
    if given:
        reason = (
            f"names one experiment, and {manifests[0].source} holds {len(manifests)}: leave "
            "it out (each is named by its own name)"
        )
        raise ManifestError("aichor-iac", [Problem(given, reason)])
    return tuple(m.name_in(stack) for m in manifests)


def _stack_manifest(stack_file: str | None, settings: Settings) -> Path | None:
    """The stack's aichor:manifest, relative to its Pulumi project (the directory holding
    Pulumi.yaml above the stack file, where `pulumi up` runs the program)."""
    if not stack_file or not settings.manifest:
        return None
    path = Path(settings.manifest)
    if path.is_absolute():
        return path
    if (directory := project_of(stack_file)) is not None:
        found = directory / path
        nearby = Path(os.path.relpath(found))  # as the user would write it, if short
        return found if nearby.parts[:1] == ("..",) else nearby
    return path  # no project around it: as given, from here


def project_of(stack_file: str) -> Path | None:
    """The stack's Pulumi project: the directory holding Pulumi.yaml above its stack file."""
    found = (d for d in Path(stack_file).resolve().parents if (d / "Pulumi.yaml").exists())
    return next(found, None)


def expand(inputs: Inputs, manifests: tuple[Experiment, ...] | None = None):
    """The experiments' resources (`manifests`, else the inputs'), as the stack creates them."""
    from ..engine import expand  # imports Pulumi: keep `validate` fast

    if manifests is None and len(inputs.manifests) == 1:
        return expand(inputs.manifest, inputs.settings, inputs.stack, inputs.name)
    return expand(manifests or inputs.manifests, inputs.settings, inputs.stack)


def show_warnings(inputs: Inputs, *blueprints: planning.Blueprint) -> list[dict[str, Any]]:
    """The experiments' warnings on stderr, each with the file it is about (the stack file
    for an `aichor:` key); as JSON for the commands whose document holds them."""
    found = []
    for manifest, name in inputs.each():
        blueprint = next((b for b in blueprints if b.manifest is manifest), None)
        blueprint = blueprint or planning.blueprint(manifest, inputs.settings, name)
        for warning in planning.warnings(blueprint):
            source = planning.about(warning, manifest.source, inputs.stack_file)
            if (said := problem_json(warning, source, "warning")) not in found:
                print_problem(warning, source, warning=True)  # (a stack key's: once, not
                found.append(said)  # for each of a sweep's trials)
    return found
