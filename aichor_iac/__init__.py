"""aichor-iac: AIchor experiment manifests as Pulumi components, no Kubernetes operator needed.

from aichor_iac import render
objects = render("examples/pytorch.yaml", namespace="ml")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .manifest import Manifest, ManifestError, load
from .settings import Settings

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["Manifest", "ManifestError", "Settings", "load", "render"]
__version__ = "0.1.0"


def render(manifest: Manifest | str | Path, **options: Any) -> list[dict[str, Any]]:
    """Every Kubernetes object for a manifest, in creation order (see `engine.render`)."""
    from .engine import render as _render  # Pulumi is imported only when rendering

    return _render(manifest, **options)
