"""The settings of Katib's algorithms (`spec.algorithm.algorithmSettings`) and of its
early stopping (`spec.earlyStopping.algorithmSettings`), as its services read them (kubeflow/katib
33c8ff4e5 `pkg/suggestion/v1beta1`, `pkg/earlystopping/v1beta1`): each algorithm takes exactly
the settings its service takes, with its defaults, and refuses any other in the service's
words (`problem`, `stopping_problem`).

- `grid`, `random`, `sobol`: `random_state` alone (0 to 2**32 - 1: numpy's RandomState takes
  no more).
- `tpe`, `multivariate-tpe`: Katib's optuna service's `n_startup_trials` (default 10),
  `n_ei_candidates` (24), `random_state`.
- `bayesianoptimization`: its scikit-optimize service's `n_initial_points` (default 10),
  `random_state`, `base_estimator` (`GP` alone: the Gaussian process here is Optuna's
  GPSampler, not one of scikit-optimize's forests), `acq_func` (`gp_hedge`, its default, or
  `EI`: GPSampler maximises log expected improvement), `acq_optimizer` (read, not used:
  GPSampler optimises its acquisition its own way).
- `cmaes`: its optuna service's `sigma` (CmaEsSampler's `sigma0`; unset: a sixth of the
  narrowest range), `random_state`, `restart_strategy` (`ipop` or `none`: read, and none with
  the Optuna here, which restarts no more).
- `medianstop`: `min_trials_required` (default 3), `start_step` (4).

Without `random_state`, the seed comes from the experiment's name (`space.seed_of`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..pods.stopping import MIN_TRIALS_REQUIRED, START_STEP
from .numpy_legacy import SEED_MAX

FIXED = ("grid", "random", "sobol")  # the algorithms whose trials are fixed beforehand
# The algorithms that learn from the trials that have ended, by the sampler each runs
SAMPLERS = {
    "tpe": "tpe",
    "multivariate-tpe": "multivariate-tpe",
    "bayesianoptimization": "gp",
    "cmaes": "cmaes",
}


@dataclass(frozen=True)
class Setting:
    """One setting Katib's service reads: the sampler's argument it becomes (None: read, not
    passed on), why a value is refused (None: taken), in the service's words, and how the
    argument is read from it."""

    argument: str | None
    check: Callable[[str, str], str | None]
    read: Callable[[str], Any] = int


def _whole(least: int, refused: str) -> Callable[[str, str], str | None]:
    """A whole number of at least `least` (`int(value)`, as Katib's services read it), else
    `refused`: the service's words, `{name}` in them."""

    def check(name: str, value: str) -> str | None:
        try:
            number = int(value)
        except ValueError as error:
            return f"failed to validate {name}({value}): {error}"
        if number < least:
            return refused.format(name=name)
        if name == "random_state" and number > SEED_MAX:
            return f"{name}: Seed must be between 0 and 2**32 - 1"
        return None

    return check


def _one_of(
    allowed: Sequence[str], why: str = "", where: str = "Bayesian optimization"
) -> Callable[[str, str], str | None]:
    def check(name: str, value: str) -> str | None:
        if value in allowed:
            return None
        return f"{name} {value} is not supported in {where}{why}"

    return check


def _sigma(name: str, value: str) -> str | None:
    """CMA-ES's `sigma` (its optuna service's check, in its words)."""
    try:
        number = float(value)
    except ValueError as error:
        return f"failed to validate {name}({value}): {error}"
    return None if number >= 0 else f"{name} should be greate or equal than zero"


OPTUNA = _whole(0, "{name} should be greate or equal than zero")  # (its words, as written)
GREAT = _whole(0, "{name} should be great or equal than zero")  # (hyperopt's, skopt's, goptuna's)
SEED = Setting(None, GREAT)  # `random_state`, read as the seed, not passed on
# What each algorithm's service reads (its `ValidateAlgorithmSettings`), and the sampler's
# argument each becomes
SETTINGS: dict[str, dict[str, Setting]] = {
    "grid": {"random_state": SEED},
    "random": {"random_state": SEED},
    "sobol": {"random_state": SEED},
    "tpe": {
        "n_startup_trials": Setting("n_startup_trials", OPTUNA),
        "n_ei_candidates": Setting("n_ei_candidates", OPTUNA),
        "random_state": Setting(None, OPTUNA),
    },
    "bayesianoptimization": {
        "n_initial_points": Setting("n_startup_trials", GREAT),
        "random_state": SEED,
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
# (Optuna 5 reads `restart_strategy` and restarts no more: ipop falls back to none)
SETTINGS["cmaes"] = {
    "restart_strategy": Setting(None, _one_of(("ipop", "None", "none"), "", "CMAES optimization")),
    "sigma": Setting("sigma0", _sigma, float),
    "random_state": Setting(None, _whole(0, "{name} should be greate or equal than zero")),
}
# Early stopping's (`earlyStopping.algorithmSettings`), by its service's words
SETTINGS["medianstop"] = {
    "min_trials_required": Setting(
        "min_trials_required", _whole(1, "min_trials_required must be greater than zero (>0)")
    ),
    "start_step": Setting(
        "start_step", _whole(1, "start_step must be greater or equal than one (>=1)")
    ),
}
# Katib's defaults of the arguments the settings become
DEFAULTS: dict[str, dict[str, int]] = {
    "tpe": {"n_startup_trials": 10, "n_ei_candidates": 24},
    "multivariate-tpe": {"n_startup_trials": 10, "n_ei_candidates": 24},
    "bayesianoptimization": {"n_startup_trials": 10},
    "cmaes": {},
    "medianstop": {"min_trials_required": MIN_TRIALS_REQUIRED, "start_step": START_STEP},
}


def stopping_problem(name: str, value: str) -> str | None:
    """Why Katib's medianstop service refuses an `earlyStopping` setting, in its words."""
    return problem("medianstop", name, value)


def stopping_settings(given: Sequence[tuple[str, str]]) -> tuple[int, int]:
    """`min_trials_required` and `start_step` (each `stopping_problem`-free), with Katib's
    defaults (3 and 4)."""
    found = sampler_settings("medianstop", given)
    return found["min_trials_required"], found["start_step"]


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
        setting = SETTINGS[algorithm][name]
        if setting.argument is not None:
            found[setting.argument] = setting.read(value)
    return found
