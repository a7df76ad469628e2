"""What `run --local` shows as the run goes: each pod's lines (a colour per pod on a terminal;
a JSON line each with `--output json`), each progress report of an experiment's receiver (in
a few words; JSON, `{"experiment", "trainerStatus"}`), and on a terminal a live table of the
Jobs' pods by state with a bar per experiment that reported. It keeps each trial's entry pod's
lines (its metrics) and each experiment's last report (its result's)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape

from ..experiment.state import TrainerStatus
from ..k8s.progress import CONTAINER
from ..local.parts import trial_state
from ..local.progress import progress
from ..observe.progress import reported, summary
from ..sweeps.results import TrialRun, ended

if TYPE_CHECKING:
    from ..experiment.model import Experiment
    from ..local.parts import Outcome
    from .inputs import Inputs

COLOURS = ["cyan", "magenta", "green", "yellow", "blue", "red"]


class RunOutput:
    def __init__(
        self, out: Console, as_json: bool, entries: dict[str, str], receivers: dict[str, str]
    ) -> None:
        self.out, self.as_json = out, as_json
        self.entries, self.receivers = entries, receivers  # pod -> trial; container -> exp.
        self.kept: dict[str, list[str]] = {}  # each trial's entry pod's lines
        self.reports: dict[str, TrainerStatus] = {}  # each experiment's last report
        self.states: dict[str, str] = {}  # each pod's, as the run last said
        self.colours: dict[str, str] = {}
        self.lock = threading.Lock()
        # On a terminal, the live table stays below the output; piped, the lines alone
        self.shown = out.is_terminal and not as_json
        self.live = Live(progress({}), console=out, transient=True, auto_refresh=False)

    def follow(self, entries: dict[str, str], trials: set[str]) -> None:
        """More experiments (a growing run's): their entry pods (pod -> experiment), whose
        lines are kept for `trials`, and whose receivers report."""
        self.entries |= {pod: name for pod, name in entries.items() if name in trials}
        self.receivers |= {f"{pod}/{CONTAINER}": name for pod, name in entries.items()}

    def showing(self) -> contextlib.AbstractContextManager[Any]:
        return self.live if self.shown else contextlib.nullcontext()

    def line(self, pod: str, text: str) -> None:
        """A line a pod printed (pods print from threads of their own: one whole at a time)."""
        if pod in self.entries:
            self.kept.setdefault(pod, []).append(text)
        if pod in self.receivers and (status := reported(text)) is not None:
            self.reports[self.receivers[pod]] = status
            self._refresh()
            if self.as_json:
                return self._json({"experiment": self.receivers[pod], "trainerStatus": status})
            text = summary(status)
        if self.as_json:
            return self._json({"pod": pod, "line": text})
        colour = self.colours.setdefault(pod, COLOURS[len(self.colours) % len(COLOURS)])
        self.out.print(f"[{colour}]{escape(pod)}[/] {escape(text)}", soft_wrap=True)

    def moved(self, states: Mapping[str, str]) -> None:
        """The pods' states changed."""
        self.states = dict(states)
        self._refresh()

    def trial_lines(self) -> dict[str, list[str]]:
        """Each trial's entry pod's lines (by whichever of its two names printed)."""
        lines: dict[str, list[str]] = {}
        for pod, name in self.entries.items():
            lines[name] = lines.get(name) or self.kept.get(pod, [])
        return lines

    def _refresh(self) -> None:
        if self.shown:
            self.live.update(progress(self.states, self.reports), refresh=True)

    def _json(self, document: dict[str, Any]) -> None:
        with self.lock:
            print(json.dumps(document, ensure_ascii=False), flush=True)


class Asked:
    """The experiments of a run whose sweeps depend on their results (`local.growth`): told
    the outcomes so far, the inputs read again with the trials that have ended (from their
    entry pods' lines and last reports, as the sweep's table reads them), and every
    experiment they now give, the new ones' pods followed as the others'."""

    def __init__(
        self, inputs: Inputs, shown: RunOutput, entry_pods: Callable[[Inputs], dict[str, str]]
    ) -> None:
        self.inputs, self.shown, self.entry_pods = inputs, shown, entry_pods

    def __call__(self, outcomes: dict[str, Outcome]) -> tuple[Experiment, ...]:
        lines, reports = self.shown.trial_lines(), self.shown.reports
        trials = [
            TrialRun(n, m.trial, trial_state(outcomes[n], True), lines.get(n, []), reports.get(n))
            for m, n in self.inputs.each()
            if m.trial is not None and n in outcomes
        ]
        self.inputs = self.inputs.grown(ended(trials))
        names = {n for m, n in self.inputs.each() if m.trial is not None}
        self.shown.follow(self.entry_pods(self.inputs), names)
        return self.inputs.manifests
