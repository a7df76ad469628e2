"""A local run that grows (issue 54): a sweep that learns knows its first trials when the run
starts, and the later ones as the results of the earlier ones allow. Each time an experiment's
outcome is decided, the run asks its `Grow` for every experiment as now known; the new ones are
rendered with the others (the objects a sweep shares are its first trial's) and their objects
added to the running cluster, as the next `pulumi up` would create them. The run ends once every
experiment is decided and none comes of the last outcome."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from .parts import Outcome, Part
from .prepare import Gate, check_entrypoints, job_order, sweep_gates, with_secrets

# What a run that grows asks: every experiment as known now, from the outcomes so far
Grow = Callable[[dict[str, Outcome]], Sequence[Any]]


@dataclasses.dataclass
class Batch:
    """What a run gets at once: its objects, its experiments and what decides each, each
    Job's Jobs it is created after, each trial's gate (`prepare.sweep_gates`)."""

    objects: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    parts: list[Part] = dataclasses.field(default_factory=list)
    after: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    gates: dict[str, Gate] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.parts = [p if isinstance(p, Part) else Part(**p) for p in self.parts]  # (JSON)

    @property
    def jobs(self) -> list[str]:
        return [o["metadata"]["name"] for o in self.objects if o["kind"] == "Job"]


def rendered(
    manifests: list[Any], settings: Any, names: list[str], stack: str
) -> tuple[Batch, list[Any]]:
    """The experiments (`names`: theirs, in `stack`) as a run takes them, and their
    blueprints: their objects with the Secrets given beside them (`prepare.with_secrets`)."""
    from .. import engine, planning

    blueprints = [planning.blueprint(m, settings, n) for m, n in zip(manifests, names, strict=True)]
    if len(manifests) == 1:
        rendering = engine.expand(manifests[0], settings, name=names[0])
    else:
        rendering = engine.expand(manifests, settings, stack)
    objects = rendering.objects
    for manifest in manifests:
        objects = with_secrets(objects, manifest)
    parts = [Part.of(n, b.plan) for n, b in zip(names, blueprints, strict=True)]
    return Batch(objects, parts, job_order(rendering), sweep_gates(blueprints)), blueprints


class Growth:
    """The batches of a run that grows: each time an outcome is decided, the experiments
    `grow` knows now that the run has not, as a Batch of what they add (empty: none)."""

    def __init__(
        self,
        grow: Grow,
        settings: Any,
        stack: str,
        started: Batch,
        entrypoints: dict[str, list[str]],
        capped: Callable[[Any], Any] = lambda manifest: manifest,
    ) -> None:
        self.grow, self.settings, self.stack = grow, settings, stack
        self.entrypoints, self.capped = entrypoints, capped
        self.sent = {_key(o) for o in started.objects}
        self.names = {p.name for p in started.parts}

    def batch(self, outcomes: dict[str, Outcome]) -> Batch:
        manifests = [self.capped(m) for m in self.grow(outcomes)]
        names = [m.name_in(self.stack) for m in manifests]
        if set(names) <= self.names:
            return Batch()
        whole, _ = rendered(manifests, self.settings, names, self.stack)
        objects = [o for o in whole.objects if _key(o) not in self.sent]
        check_entrypoints(objects, self.entrypoints)
        new = Batch(objects, [p for p in whole.parts if p.name not in self.names])
        new.after = {job: whole.after.get(job, []) for job in new.jobs}
        added = {p.name for p in new.parts}
        new.gates = {name: gate for name, gate in whole.gates.items() if name in added}
        self.sent |= {_key(o) for o in objects}
        self.names |= added
        return new


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]
