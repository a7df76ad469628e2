"""aichor-iac: AIchor experiment manifests as Pulumi components, no Kubernetes operator needed.

from aichor_iac import render
objects = render("examples/pytorch.yaml", namespace="ml")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .manifest import Manifest, ManifestError, load
from .settings import Settings

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["Manifest", "ManifestError", "Settings", "experiment_from_function", "load", "render"]
__version__ = "0.1.0"


def render(manifest: Manifest | str | Path, **options: Any) -> list[dict[str, Any]]:
    """Every Kubernetes object for a manifest, in creation order (see `engine.render`)."""
    from .engine import render as _render  # Pulumi is imported only when rendering

    return _render(manifest, **options)


def experiment_from_function(func: Callable[..., Any], **options: Any) -> Manifest:
    """An experiment that runs a Python function on every replica (see
    `aichor_iac.function.experiment_from_function` for the options)."""
    from .function import experiment_from_function as _from_function

    return _from_function(func, **options)
