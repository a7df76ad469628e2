"""Katib's algorithms that learn from the trials that have ended (issue 54), as
`aichor_iac.search` runs them: each one's settings with Katib's names, defaults and checks,
refused in its service's words; its parameters as dimensions, as Katib's optuna service makes
its search space (kubeflow/katib 33c8ff4e5 `pkg/suggestion/v1beta1/optuna`, `.../skopt`).

- `tpe`, `multivariate-tpe`: Katib's optuna service's settings, `n_startup_trials` (default
  10), `n_ei_candidates` (24), `random_state`. (Katib's default configuration runs `tpe` on
  hyperopt; its optuna service runs it as Optuna's TPESampler, which is what runs here.)
- `bayesianoptimization`: Katib's scikit-optimize service's settings, `n_initial_points`
  (default 10), `random_state`, `base_estimator` (`GP` alone: scikit-optimize's forests are
  not Gaussian processes), `acq_func` (`gp_hedge`, its default, or `EI`: Optuna's GPSampler
  maximises log expected improvement), `acq_optimizer` (read, not used: the sampler optimises
  its acquisition its own way). scikit-optimize is no longer maintained (katib issue 2280).

Without `random_state`, the seed comes from the experiment's name, as for grid and random.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...search.learning import Dimension
from .numpy_legacy import SEED_MAX
from .space import Parameter


@dataclass(frozen=True)
class Setting:
    """One setting Katib's service reads: the sampler's argument it becomes (None: read, not
    passed on), and why a value is refused (None: taken), in the service's words."""

    argument: str | None
    check: Callable[[str, str], str | None]


def _count(words: str) -> Callable[[str, str], str | None]:
    """A whole number of at least 0 (`int(value) >= 0`, as Katib's services check it)."""

    def check(name: str, value: str) -> str | None:
        try:
            number = int(value)
        except ValueError as error:
            return f"failed to validate {name}({value}): {error}"
        if number < 0:
            return f"{name} {words}"
        if name == "random_state" and number > SEED_MAX:
            return f"{name}: Seed must be between 0 and 2**32 - 1"
        return None

    return check


def _one_of(allowed: Sequence[str], why: str = "") -> Callable[[str, str], str | None]:
    def check(name: str, value: str) -> str | None:
        if value in allowed:
            return None
        return f"{name} {value} is not supported in Bayesian optimization{why}"

    return check


OPTUNA = "should be greate or equal than zero"  # (Katib's optuna service's words, as written)
SKOPT = "should be great or equal than zero"  # (its scikit-optimize service's)
# What each algorithm's service reads, with the sampler's name and Katib's default
SETTINGS: dict[str, dict[str, Setting]] = {
    "tpe": {
        "n_startup_trials": Setting("n_startup_trials", _count(OPTUNA)),
        "n_ei_candidates": Setting("n_ei_candidates", _count(OPTUNA)),
        "random_state": Setting(None, _count(OPTUNA)),
    },
    "bayesianoptimization": {
        "n_initial_points": Setting("n_startup_trials", _count(SKOPT)),
        "random_state": Setting(None, _count(SKOPT)),
        "base_estimator": Setting(
            None, _one_of(("GP",), ": here a Gaussian process (GP), Optuna's GPSampler")
        ),
        "acq_func": Setting(
            None,
            _one_of(("gp_hedge", "EI"), ": here expected improvement (EI, or gp_hedge)"),
        ),
        "acq_optimizer": Setting(None, _one_of(("auto", "sampling", "lbfgs"))),
    },
}
SETTINGS["multivariate-tpe"] = SETTINGS["tpe"]
# The sampler each runs (aichor_iac.search.learning), and Katib's defaults it starts from
SAMPLERS = {"tpe": "tpe", "multivariate-tpe": "multivariate-tpe", "bayesianoptimization": "gp"}
DEFAULTS: dict[str, dict[str, int]] = {
    "tpe": {"n_startup_trials": 10, "n_ei_candidates": 24},
    "multivariate-tpe": {"n_startup_trials": 10, "n_ei_candidates": 24},
    "bayesianoptimization": {"n_startup_trials": 10},
}


def problem(algorithm: str, name: str, value: str) -> str | None:
    """Why Katib's service refuses the setting, in its words (None: it takes it)."""
    setting = SETTINGS[algorithm].get(name)
    if setting is None:
        return f"unknown setting {name} for algorithm {algorithm}"
    return setting.check(name, value)


def sampler_settings(algorithm: str, given: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The sampler's arguments from the algorithm's settings (each `problem`-free): Katib's
    defaults, then each setting given that the sampler reads."""
    found: dict[str, Any] = dict(DEFAULTS[algorithm])
    for name, value in given:
        if (argument := SETTINGS[algorithm][name].argument) is not None:
            found[argument] = int(value)
    return found


def dimension(parameter: Parameter) -> Dimension:
    """A parameter as Katib's optuna service makes it (`_get_optuna_search_space`): an int
    between min and max (by its step; on a log scale from max(1, min), step 1), a double
    between min and max (by its step; on a log scale without one), a list's items."""
    space = parameter.space
    if space.list:
        return Dimension(parameter.name, "choice", choices=tuple(space.list))
    low, high = float(space.min or 0), float(space.max or 0)
    step = float(space.step) if space.step is not None else None
    if parameter.type == "int":
        if parameter.log:
            return Dimension(parameter.name, "int", max(1, int(low)), int(high), 1, log=True)
        return Dimension(parameter.name, "int", int(low), int(high), step)
    if parameter.log:
        return Dimension(parameter.name, "float", max(1e-10, low), high, log=True)
    return Dimension(parameter.name, "float", low, high, step)
