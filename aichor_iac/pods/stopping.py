"""Early stopping by Katib's median rule (issue 54), as a pure function of the trials' reports.

Katib's `medianstop` (kubeflow/katib 33c8ff4e5) is two parts, read here as they run:

- The rule, made for a trial when it is created, from the trials that have succeeded by then
  (`pkg/earlystopping/v1beta1/medianstop/service.py`, `get_median_value`): each one's
  average of its first `start_step` objective values; once at least `min_trials_required`
  have succeeded, the rule's value is the *mean* of those averages (Katib calls it the
  median). Until then, no rule.
- Its check, in the trial's metrics collector (`cmd/metricscollector/v1beta1/
  file-metricscollector/main.go`, `updateStopRules`): at each objective value the trial
  reports, the best so far stands for it; at the `start_step`-th value, and only then, the
  trial is stopped if that best is worse than the rule's value (above it when minimising,
  below when maximising).

Katib's defaults: `min_trials_required` 3, `start_step` 4.

The check runs in the trial's pod, as Katib's collector does: this module is also the script
that runs the primary container's command there (`main`, its source given to the pod's
`python3`: `sweeps.collect.with_stopping`), so it needs nothing but the standard library.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Sequence

MIN_TRIALS_REQUIRED, START_STEP = 3, 4  # (Katib's defaults)


def median_rule(
    succeeded: Sequence[Sequence[float]],
    min_trials_required: int = MIN_TRIALS_REQUIRED,
    start_step: int = START_STEP,
) -> float | None:
    """The rule's value for a new trial, from the objective values each trial that has
    succeeded reported, in order (None: too few have succeeded, or reported)."""
    # (a trial that reported no value is left out: Katib's service divides by zero there)
    averages = [sum(v[:start_step]) / len(v[:start_step]) for v in succeeded if v]
    if len(averages) < min_trials_required:
        return None
    return sum(averages) / len(averages)


def stopped_at(
    reported: Sequence[float], rule: float | None, maximize: bool, start_step: int = START_STEP
) -> int | None:
    """The number of the report (1, 2, …) at which the trial is early stopped by `rule`, or
    None if it is not: its best value by its `start_step`-th report, worse than the rule."""
    if rule is None or len(reported) < start_step:
        return None
    best = (max if maximize else min)(reported[:start_step])
    worse = best < rule if maximize else best > rule
    return start_step if worse else None


def metric_values(
    line: str, formats: Sequence[str], names: Collection[str]
) -> list[tuple[str, float]]:
    """Each metric of `names` and its value that Katib's StdOut collector finds in a line:
    each filter's matches, the name and the value trimmed, the values that are numbers."""
    found = []
    for form in formats:
        for match in re.finditer(form, line):
            name, value = match.group(1).strip(), match.group(2).strip()
            if name not in names:
                continue
            try:
                found.append((name, float(value)))
            except ValueError:  # (`loss=` with no number)
                continue
    return found


# A progress report's value of a metric, as the check prints it among the command's output (the
# objective of an OptimizationJob's trial is reported, not printed): the filter that reads it
REPORTED = "aichor-report: "
REPORTED_FORMAT = rf"^{REPORTED}([^=]+)=(\S+)$"


def main(argv: Sequence[str]) -> int:
    """In a trial's pod: its command (`argv` after the rule, JSON: `metric`, `formats`,
    `start_step`, `rule`, `maximize`, and `reported`: its values are in the progress reports,
    read from the experiment's receiver), its output (and errors, as Katib's collector reads
    both) passed on line by line; at the `start_step`-th value of the metric, the command
    is ended if the rule stops it, and the trial ends with 0 (it ended as its sweep asked:
    its sweep reads it as EarlyStopped from its lines). Else the command's exit status."""
    rule = json.loads(argv[0])
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # (a Python trial's lines as it prints them)
    out, both = subprocess.PIPE, subprocess.STDOUT
    child = subprocess.Popen(argv[1:], stdout=out, stderr=both, env=env, start_new_session=True)
    for number in (signal.SIGTERM, signal.SIGINT):  # (the pod's end: the command's)
        signal.signal(number, lambda got, _: _signal(child, got))
    watch = _Watch(rule, child)
    if rule.get("reported"):
        threading.Thread(target=watch.reports, daemon=True).start()
    assert child.stdout is not None
    for raw in iter(child.stdout.readline, b""):
        watch.line(raw)
    if rule.get("reported") and not watch.stopped:  # (the reports sent before it ended)
        watch.poll()
    if watch.stopped:
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            _signal(child, signal.SIGKILL)
        return 0
    code = child.wait()
    return code if code >= 0 else 128 - code


class _Watch:
    """A trial's lines passed on, and its rule checked at its `start_step`-th value."""

    def __init__(self, rule: dict, child: subprocess.Popen) -> None:
        self.rule, self.child = rule, child
        self.reported: list[float] = []
        self.stopped = False
        self.lock = threading.Lock()  # (the command's lines and the reports' come in turn)
        self.polling = threading.Lock()  # (one GET at a time: `seen` reports read so far)
        self.seen = 0

    def line(self, raw: bytes) -> None:
        """A line passed on, its values read until the rule has been checked."""
        rule = self.rule
        with self.lock:
            sys.stdout.buffer.write(raw)
            sys.stdout.buffer.flush()
            if self.stopped or len(self.reported) >= rule["start_step"]:
                return
            line = raw.decode("utf-8", "replace")
            self.reported += [v for _, v in metric_values(line, rule["formats"], (rule["metric"],))]
            at = stopped_at(self.reported, rule["rule"], rule["maximize"], rule["start_step"])
            if at is None:
                return
            best = (max if rule["maximize"] else min)(self.reported[:at])
            sys.stdout.write(
                f"aichor: early stopped at value {at} of {rule['metric']}: its best {best:g} "
                f"is worse than the median rule {rule['rule']:g}\n"
            )
            sys.stdout.flush()
            self.stopped = True
            _signal(self.child, signal.SIGTERM)

    def reports(self) -> None:
        """Each progress report's value of the metric, as a line, while the command runs."""
        while self.child.poll() is None and not self.stopped:
            self.poll()
            time.sleep(0.5)

    def poll(self) -> None:
        """The reports not read yet, from the receiver (a GET of Trainer's URL, with the
        experiment's token and CA): each one's value of the metric, as a line."""
        import ssl
        import urllib.request

        environ = os.environ
        if "KUBEFLOW_TRAINER_SERVER_URL" not in environ:
            return
        with self.polling:
            try:
                with open(environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]) as file:
                    auth = {"Authorization": f"Bearer {file.read().strip()}"}
                context = ssl.create_default_context(
                    cafile=environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"]
                )
                url = f"{environ['KUBEFLOW_TRAINER_SERVER_URL']}?since={self.seen}"
                request = urllib.request.Request(url, headers=auth)
                with urllib.request.urlopen(request, timeout=5, context=context) as answer:
                    items = json.load(answer)["items"]
            except (OSError, ValueError, KeyError):  # (the receiver not up yet: again)
                return
            self.seen += len(items)
            for item in items:
                for metric in (item.get("trainerStatus") or {}).get("metrics") or []:
                    if metric.get("name") == self.rule["metric"]:
                        self.line(f"{REPORTED}{metric['name']}={metric['value']}\n".encode())


def _signal(child: subprocess.Popen, number: int) -> None:
    """The command and every process it started (its session's group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, number)


if __name__ == "__main__":  # (in the trial's pod)
    sys.exit(main(sys.argv[1:]))
