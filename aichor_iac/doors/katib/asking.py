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

from ...experiment.trial import FAILED, SUCCEEDED, Ended, Stopping
from ...search import learning, stopping


def known(count: int, parallel: int, names: Sequence[str], ended: Ended) -> int:
    """How many of the `count` trials are known: each once the trials it follows have ended."""
    for k in range(parallel, count):
        if any(names[i] not in ended for i in range(k - parallel + 1)):
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
) -> list[dict[str, str]]:
    """The values of each known trial (of `names`), asked of `sampler` (its name, its
    arguments): a failed trial told as failed, an early stopped one with its objective
    (Katib's services are told of succeeded and early stopped trials)."""
    algorithm, arguments = sampler
    found: list[dict[str, str]] = []
    for k in range(known(len(names), parallel, names, ended)):
        history = []
        for i, values in enumerate(found):
            result = ended[names[i]] if i <= k - parallel else None
            objective = result.objective if result and result.state != FAILED else None
            history.append(learning.Told(tuple(values.items()), objective, result is not None))
        found.append(learning.suggest(space, algorithm, arguments, seed, maximize, k, history))
    return found


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
