"""Keeping a run from inside the cluster (issue 67; docs/stores.md): when the stack names
`aichor:history` or `aichor:mlflow`, each pod of the experiment gets a shared folder, its main
container's output copied there as it is printed (`CAPTURE`), and the keeper (`keeper.py`) as
a native sidecar that writes what the pod knows to the stores."""

from __future__ import annotations

import functools
from pathlib import Path


@functools.cache  # (read once: a sweep renders a keeper per trial)
def program() -> str:
    """The keeper's source (`keeper.py`, read, not imported), run by the image's python3."""
    return Path(__file__).with_name("keeper.py").read_text()
