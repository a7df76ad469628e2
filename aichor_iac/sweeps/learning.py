"""The next trial of a search that learns, as a pure function (issue 54): of the search space,
the algorithm and its settings, the seed, the trial's number, and the history (each earlier
trial's values, with its objective once it has ended). No controller keeps a sampler's state
between trials, as Kubeflow Trainer's OptimizationJob design has it: any run of the loop, on any
machine, rebuilds the history from the cluster and asks again, and gets the same trial.

Optuna's samplers, as Katib's optuna service builds them (kubeflow/katib 33c8ff4e5
`pkg/suggestion/v1beta1/optuna/base_service.py`): `tpe` and `multivariate-tpe` are its
`TPESampler` with the constant liar (running trials count as bad ones, so that trials asked
together spread out), the second modelling the parameters jointly; `gp` is Optuna's
`GPSampler` (a Gaussian process with log expected improvement, where Katib's
`bayesianoptimization` runs scikit-optimize, no longer maintained). Each is stateless: it fits
its model to the history at each ask. Trial k's sampler is seeded with the seed and k, so that
the random trials it starts with differ, and the same search asks the same. `cmaes` (Optuna's
`CmaEsSampler`) keeps a state from one generation to the next: `replayed` asks its trials
again from the start, in order, each after the results it was asked after.

Optuna is the `search` extra's (`pip install 'aichor-iac[search]'`): imported when a trial is
asked for, never by a render of fixed trials.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.samplers import BaseSampler

ALGORITHMS = ("tpe", "multivariate-tpe", "gp", "cmaes")
INSTALL = "pip install 'aichor-iac[search]'"


@dataclass(frozen=True)
class Dimension:
    """One parameter as the samplers read it (a door converts its own): an int or a float
    between `low` and `high` (on a log scale, or on multiples of `step` from `low`), or one
    of `choices`."""

    name: str
    kind: Literal["int", "float", "choice"]
    low: float = 0
    high: float = 0
    step: float | None = None
    log: bool = False
    choices: tuple[str, ...] = ()

    def value(self, text: str) -> Any:
        """A trial's value (its text, as the trial got it) as the sampler reads it."""
        if self.kind == "choice":
            return text
        return int(text) if self.kind == "int" else float(text)


@dataclass(frozen=True)
class Told:
    """An earlier trial of the search: its values, as it got them, and its objective once it
    has ended (None: it runs, or it ended without one)."""

    values: tuple[tuple[str, str], ...]
    objective: float | None = None
    ended: bool = False


def suggest(
    space: Sequence[Dimension],
    algorithm: str,
    settings: dict[str, Any],
    seed: int,
    maximize: bool,
    number: int,
    history: Sequence[Told],
) -> dict[str, str]:
    """Trial `number`'s values, each as text (an int's digits, a float as Python writes it, a
    choice as given), from the trials of `history` (each of this space: a trial with a value
    outside it, after the space changed, does not count). `settings`: the sampler's, by
    Optuna's names (a door reads its own, with its defaults)."""
    study, distributions = _study(space, algorithm, settings, _seed(seed, number), maximize)
    for told in history:
        if (trial := _trial(told, space, distributions)) is not None:
            study.add_trial(trial)
    return _asked(study, space, distributions)[1]


def replayed(
    space: Sequence[Dimension],
    algorithm: str,
    settings: dict[str, Any],
    seed: int,
    maximize: bool,
    parallel: int,
    told: Sequence[Told],
    number: int,
) -> list[dict[str, str]]:
    """The values of trials 0 to `number` - 1 of a sampler that keeps its state from trial to
    trial (CMA-ES: its generations), asked again in one study seeded once: trial k asked
    once trials 0 to k - `parallel` are told (`told`: each one's objective, as it ended), as
    the loop asked it. The same history replays the same trials, so no state is kept between
    two asks; the sampler's own (Optuna stores CMA-ES's in its trials) is made again."""
    study, distributions = _study(space, algorithm, settings, seed, maximize)
    from optuna.trial import TrialState  # (after `_optuna`: its error says what to install)

    asked: list[Any] = []
    found: list[Any] = []
    for k in range(number):
        if (i := k - parallel) >= 0:
            ended = told[i]
            state = TrialState.COMPLETE if ended.objective is not None else TrialState.FAIL
            study.tell(asked[i], ended.objective, state=state)
        trial, values = _asked(study, space, distributions)
        asked.append(trial)
        found.append(values)
    return found


def _study(
    space: Sequence[Dimension], algorithm: str, settings: dict[str, Any], seed: int, maximize: bool
) -> tuple[Any, dict[str, BaseDistribution]]:
    """An empty study of the algorithm's sampler (seeded `seed`), and the space's
    distributions."""
    optuna = _optuna()
    study = optuna.create_study(
        sampler=_sampler(algorithm, settings, seed),
        direction="maximize" if maximize else "minimize",
    )
    return study, {d.name: _distribution(d) for d in space}


def _asked(
    study: Any, space: Sequence[Dimension], distributions: dict[str, BaseDistribution]
) -> tuple[Any, dict[str, str]]:
    """The study's next trial, and its values as a trial gets them (`_text`)."""
    trial = study.ask(fixed_distributions=distributions)
    return trial, {d.name: _text(d, trial.params[d.name]) for d in space}


def _optuna() -> Any:
    """Optuna, quiet (it logs each trial at INFO), or an ImportError that says what to install."""
    try:
        import optuna
    except ImportError:
        raise ImportError(f"a search that learns needs Optuna: {INSTALL}") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _seed(seed: int, number: int) -> int:
    """Trial `number`'s sampler's seed: from the search's seed and the number alone."""
    digest = hashlib.sha256(f"{seed}/{number}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def _sampler(algorithm: str, settings: dict[str, Any], seed: int) -> BaseSampler:
    """The algorithm's sampler, as Katib's optuna service makes it (`_create_sampler`)."""
    from optuna import samplers

    if algorithm in ("tpe", "multivariate-tpe"):
        multivariate = algorithm == "multivariate-tpe"
        return samplers.TPESampler(
            **settings, seed=seed, multivariate=multivariate, constant_liar=True
        )
    if algorithm == "gp":
        return samplers.GPSampler(**settings, seed=seed)
    if algorithm == "cmaes":  # (`sigma0` is deprecated in Optuna 4.9+, and still read)
        try:
            import cmaes  # noqa: F401 (Optuna's CmaEsSampler runs it, and does not install it)
        except ImportError:
            raise ImportError(f"cmaes needs the cmaes package: {INSTALL}") from None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return samplers.CmaEsSampler(**settings, seed=seed)
    raise ValueError(f"{algorithm}: not a search that learns ({', '.join(ALGORITHMS)})")


def _distribution(dimension: Dimension) -> BaseDistribution:
    """The dimension as Optuna's distribution (Katib's `_get_optuna_search_space`)."""
    from optuna import distributions

    if dimension.kind == "choice":
        return distributions.CategoricalDistribution(dimension.choices)
    if dimension.kind == "int":
        step = int(dimension.step or 1)
        low, high = int(dimension.low), int(dimension.high)
        return distributions.IntDistribution(low, high, log=dimension.log, step=step)
    step_size = None if dimension.log else dimension.step
    return distributions.FloatDistribution(
        dimension.low, dimension.high, log=dimension.log, step=step_size
    )


def _trial(told: Told, space: Sequence[Dimension], distributions: dict[str, Any]) -> Any:
    """An earlier trial as Optuna's (complete, failed or running), or None if it is not of
    this space."""
    from optuna.trial import TrialState, create_trial

    state, value = TrialState.RUNNING, None
    if told.ended:
        state = TrialState.FAIL if told.objective is None else TrialState.COMPLETE
        value = told.objective
    given = dict(told.values)
    try:  # (Optuna refuses a value outside its distribution)
        params = {d.name: d.value(given[d.name]) for d in space}
        return create_trial(state=state, value=value, params=params, distributions=distributions)
    except (KeyError, ValueError):
        return None


def _text(dimension: Dimension, value: Any) -> str:
    """A value as a trial gets it: as Katib's optuna service writes it (`str`)."""
    return str(int(value)) if dimension.kind == "int" else str(value)
