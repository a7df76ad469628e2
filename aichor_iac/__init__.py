"""aichor-iac: AIchor experiment manifests as Pulumi components, no Kubernetes operator needed.

from aichor_iac import render
objects = render("examples/pytorch.yaml", namespace="ml")
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from .doors import load, load_all
    from .experiment.model import Experiment
    from .problems import ManifestError
    from .settings import Settings

# The names the package gives from its modules, imported on first use: `import aichor_iac`
# (the console script's first step) stays light, so that the command line decides when its
# imports happen (aichor_iac/cli/process.py)
EXPORTS = {
    "Experiment": "experiment.model",
    "ManifestError": "problems",
    "Settings": "settings",
    "load": "doors",
    "load_all": "doors",
}

__all__ = [
    "Experiment",
    "ManifestError",
    "Settings",
    "destroy",
    "experiment_from_function",
    "experiment_from_optimizer",
    "experiment_from_trainer",
    "load",
    "load_all",
    "logs",
    "render",
    "up",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """A name of EXPORTS, or a subpackage, on first use (`aichor_iac.local.run_experiment(...)`
    as the docs write it), rather than imported up front: `validate` would pay for Pulumi's and
    the local run's imports."""
    if name in EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{EXPORTS[name]}"), name)
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def render(
    manifest: Experiment | Sequence[Experiment] | str | Path, **options: Any
) -> list[dict[str, Any]]:
    """Every Kubernetes object for a manifest (or the experiments of a file or directory of
    several), in creation order (see `engine.render`)."""
    from .engine import render as _render  # Pulumi is imported only when rendering

    return _render(manifest, **options)


def experiment_from_function(func: Callable[..., Any], **options: Any) -> Experiment:
    """An experiment that runs a Python function on every replica (see
    `aichor_iac.doors.sdk.function.experiment_from_function` for the options)."""
    from .doors.sdk.function import experiment_from_function as _from_function

    return _from_function(func, **options)


def experiment_from_trainer(trainer: Any, **options: Any) -> Experiment:
    """The TrainJob experiment of Kubeflow's v2 SDK `CustomTrainer` (see
    `aichor_iac.doors.sdk.function.experiment_from_trainer`: `runtime`, `name`)."""
    from .doors.sdk.function import experiment_from_trainer as _from_trainer

    return _from_trainer(trainer, **options)


def experiment_from_optimizer(trial_template: Any, **options: Any) -> tuple[Experiment, ...]:
    """The sweep of Kubeflow's v2 SDK `OptimizerClient().optimize(trial_template, ...)`, its
    trials in order (see `aichor_iac.doors.sdk.optimizer.experiment_from_optimizer`: `search_space`,
    `trial_config`, `objectives`, `algorithm`, `name`)."""
    from .doors.sdk.optimizer import experiment_from_optimizer as _from_optimizer

    return _from_optimizer(trial_template, **options)


def up(experiment: Experiment | str | Path, stack: str, **options: Any) -> dict[str, Any]:
    """`pulumi up` of one stack per experiment through the Automation API; the stack's
    outputs (see `aichor_iac.submit.up`; needs the Pulumi CLI)."""
    from .submit import up as _up

    return _up(experiment, stack, **options)


def destroy(stack: str, **options: Any) -> None:
    """`pulumi destroy` of an experiment's stack, then its removal (`aichor_iac.submit`)."""
    from .submit import destroy as _destroy

    _destroy(stack, **options)


def logs(stack: str, **options: Any) -> str:
    """The replicas' output, by the stack's `logs` output (`aichor_iac.submit.logs`)."""
    from .submit import logs as _logs

    return _logs(stack, **options)
