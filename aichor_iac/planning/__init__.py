"""An experiment and the stack's settings made into what the layers below read: its names, its
framework's plan, its gang, its restart policy and platform env, or every problem that only shows
once they meet (`blueprint()`, the one path that decides validity)."""

from .advice import warnings
from .blueprints import (
    Blueprint,
    TensorboardLogs,
    about,
    arrange,
    blueprint,
    created_last,
    draft_plan,
)
from .entrypoints import commandless
from .gangs import Gang

__all__ = [
    "Blueprint",
    "Gang",
    "TensorboardLogs",
    "about",
    "arrange",
    "blueprint",
    "commandless",
    "created_last",
    "draft_plan",
    "warnings",
]
