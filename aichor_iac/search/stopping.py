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
"""

from __future__ import annotations

from collections.abc import Sequence

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
