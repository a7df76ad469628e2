"""The programs that run in the user's pods, with the image's `python3`: each a file here,
read by `source` (never imported by the pod, which has no aichor-iac) and given to the pod in
its command. They import the standard library alone (the Ray ones, Ray too), run on Python 3.8
and later, the oldest an ML image still ships, and are linted and type-checked as the rest of
the package (tests/pods/test_programs.py holds them to it).

- `keeper`: the stores' writer, the first native sidecar of every pod (`k8s/keeping.py`);
- `receiver`: the progress receiver beside the entry point (`k8s/progress.py`);
- `regroup`: the group restart, each replica's main process (`k8s/shell.py`);
- `stopping`: Katib's median stopping rule, checked around a trial's command
  (`sweeps/collect.py`; the sweeps read the same rule from it);
- `wait`: a replica's wait for its peers, before its command (`k8s/shell.py`);
- `lifeline`: how followers learn that the entry point has ended (`k8s/shell.py`);
- `tensorboard_receiver`, `tensorboard_shipper`: TensorBoard's logs, from each replica's
  sidecar to TensorBoard's pod (`k8s/tensorboard.py`);
- `ray_wait`, `ray_submit`: a Ray job's wait for its nodes, and KubeRay's submitter
  (`frameworks/ray.py`).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

# The port the lifeline's entry listens on (given to it, and to its followers, as an argument;
# a constant here so that the pods' ports name it without importing the program)
LIFELINE_PORT = 29944
# Each program, and what it imports besides the standard library (the image has it)
PROGRAMS: dict[str, tuple[str, ...]] = {
    "keeper": (),
    "receiver": (),
    "regroup": (),
    "stopping": (),
    "wait": (),
    "lifeline": (),
    "tensorboard_receiver": (),
    "tensorboard_shipper": (),
    "ray_wait": ("ray",),
    "ray_submit": ("ray",),
}


@functools.cache  # (read once: a sweep's trials each carry them)
def source(name: str) -> str:
    """The program `name` as a pod runs it: its file without the docstring (which is for the
    next engineer; a pod's command shows the code)."""
    if name not in PROGRAMS:
        raise ValueError(f"no program {name!r} runs in a pod: {', '.join(PROGRAMS)}")
    text = Path(__file__).with_name(f"{name}.py").read_text()
    module = ast.parse(text)
    start = module.body[0].end_lineno if ast.get_docstring(module) else 0
    return "\n".join(text.splitlines()[start or 0 :]).strip() + "\n"
