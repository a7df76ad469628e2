"""The trials of a Katib sweep that depends on its results (issue 54), from the trials that
have ended: which are known, the values of those an algorithm that learns asks, and the early
stopping rule each runs under.

Trial k is known once trials 0 to k - p have all ended (p: parallelTrialCount). Its values
are asked from their results, trials k - p + 1 to k - 1 counted as running whenever they
ended; its rule is made from those of them that succeeded. Each trial is so the same whatever
the order trials end in, and whoever asks: a loop stopped and started again asks the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..experiment.trial import FAILED, SUCCEEDED, Ended, Result, Stopping
from ..pods import stopping
from . import learning


def known(
    count: int, parallel: int, names: Sequence[str], ended: Ended, max_failed: int | None = None
) -> int:
    """How many of the `count` trials are known: each once the trials it follows have ended,
    unless as many of them failed as `max_failed` (Katib's maxFailedTrialCount: the sweep has
    failed, and Katib creates no trial after)."""
    for k in range(parallel, count):
        before = [ended.get(names[i]) for i in range(k - parallel + 1)]
        if None in before:
            return k
        failed = sum(r.state == FAILED for r in before if r is not None)
        if max_failed is not None and failed and failed >= max_failed:
            return k
    return count


def asked(
    space: Sequence[learning.Dimension],
    sampler: tuple[str, dict[str, Any]],
    seed: int,
    maximize: bool,
    parallel: int,
    names: Sequence[str],
    ended: Ended,
    max_failed: int | None = None,
) -> list[dict[str, str]]:
    """The values of each known trial (of `names`), asked of `sampler` (its name, its
    arguments): a failed trial told as failed, an early stopped one with its objective
    (Katib's services are told of succeeded and early stopped trials)."""
    algorithm, arguments = sampler
    number = known(len(names), parallel, names, ended, max_failed)
    if algorithm == "cmaes":  # (its state, from generation to generation: asked again)
        told = [_told(ended[names[i]]) for i in range(number - parallel)]
        return learning.replayed(
            space, algorithm, arguments, seed, maximize, parallel, told, number
        )
    found: list[dict[str, str]] = []
    for k in range(number):
        history = []
        for i, values in enumerate(found):
            result = ended[names[i]] if i <= k - parallel else None
            objective = result.objective if result and result.state != FAILED else None
            history.append(learning.Told(tuple(values.items()), objective, result is not None))
        found.append(learning.suggest(space, algorithm, arguments, seed, maximize, k, history))
    return found


def _told(result: Result) -> learning.Told:
    """An ended trial as a sampler is told of it (its values: the sampler's own)."""
    return learning.Told((), result.objective if result.state != FAILED else None, True)


def rules(
    settings: tuple[int, int], parallel: int, names: Sequence[str], ended: Ended, number: int
) -> list[Stopping]:
    """The early stopping of each of the first `number` trials: Katib's median rule
    (`min_trials_required`, `start_step`) from the trials it follows that succeeded."""
    least, start = settings
    found = []
    for k in range(number):
        before = [ended[names[i]] for i in range(k - parallel + 1)]
        succeeded = [r.values for r in before if r.state == SUCCEEDED]
        found.append(Stopping(least, start, stopping.median_rule(succeeded, least, start)))
    return found
