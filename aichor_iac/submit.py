"""Submit from Python: `up`, `destroy` and `logs` of one Pulumi stack per experiment, through
the Pulumi Automation API (`pulumi.automation`), with the Pulumi program's own body
(`components.export`) as the stack's inline program.

The Automation API drives the Pulumi CLI: it must be installed, and logged in to a backend;
the cluster is the kubeconfig's current context, as for `pulumi up`. Every problem of the
experiment is found before the CLI is asked anything, so nothing is half-created.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .doors import experiment_of
from .experiment.model import Experiment
from .settings import Settings

PROJECT = "aichor-experiments"  # the Pulumi project of the stacks `up` creates
INSTALL = (
    "install the Pulumi CLI (https://www.pulumi.com/docs/install/, e.g. "
    "`curl -fsSL https://get.pulumi.com | sh`) and log in to a backend (`pulumi login`, or "
    "`pulumi login --local` to keep the state on this machine)"
)


class PulumiMissing(RuntimeError):
    """The Pulumi CLI, which the Automation API drives, is not installed."""


def up(
    experiment: Experiment | str | Path,
    stack: str,
    *,
    settings: Settings | None = None,
    name: str | None = None,
    project: str = PROJECT,
    on_output: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """`pulumi up` of the stack `stack` of `project` (created if new) with the experiment
    (a manifest, a custom resource or a function's experiment, or a path); its outputs."""
    from . import components
    from .k8s import layout
    from .k8s.context import Context
    from .planning import blueprint

    manifest = experiment_of(experiment)
    settings = settings or Settings.default()
    experiment_name = name or settings.experiment_name or manifest.name_in(stack)
    # ManifestError now, naming every problem, rather than from inside the CLI's run.
    layout.build(Context(blueprint(manifest, settings, experiment_name)))

    def program() -> None:
        components.export(experiment_name, manifest, settings)

    with _stack(stack, project, program) as selected:
        result = selected.up(on_output=on_output)
    return {key: output.value for key, output in result.outputs.items()}


def destroy(
    stack: str, *, project: str = PROJECT, on_output: Callable[[str], None] | None = print
) -> None:
    """`pulumi destroy` of the stack, then its removal (what `pulumi destroy` keeps, a
    retained shared volume, stays in the cluster)."""
    with _stack(stack, project, lambda: None, create=False) as selected:
        selected.destroy(on_output=on_output)
        selected.workspace.remove_stack(stack)


def logs(stack: str, *, project: str = PROJECT, follow: bool = False) -> str:
    """The replicas' output, by the stack's `logs` output (a `kubectl logs` command)."""
    with _stack(stack, project, lambda: None, create=False) as selected:
        outputs = selected.outputs()
    command = shlex.split(str(outputs["logs"].value))
    if not follow:
        command = [word for word in command if word != "-f"]
    if shutil.which(command[0]) is None:
        raise PulumiMissing(f"`{command[0]}` is not installed: install kubectl to read logs")
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def until_done(
    stack: str,
    work_dir: Path,
    read: Callable[[], tuple[frozenset[str], bool]] | None = None,
    *,
    poll: float = 30.0,
    on_output: Callable[[str], None] | None = print,
    wait: Callable[[float], None] = time.sleep,
) -> int:
    """`pulumi up` of the stack of the Pulumi project in `work_dir` (its own program); with
    `read` (the experiments the cluster's results allow now, and whether a trial of theirs
    has not ended), again each time they allow more, every `poll` seconds, until every trial
    has ended: how many times it ran. Stateless: stopped and started again (on any machine),
    it goes on from what the cluster holds; Pulumi's stack lock keeps two from one `up` at
    once."""
    from pulumi import automation

    try:
        selected = automation.select_stack(stack_name=stack, work_dir=str(work_dir))
    except FileNotFoundError:
        raise PulumiMissing(f"`pulumi` is not installed: {INSTALL}") from None
    ups, created = 0, None
    while True:
        known, pending = read() if read is not None else (frozenset(), False)
        if ups == 0 or known != created:
            selected.up(on_output=on_output)
            ups, created = ups + 1, known
            if read is None:
                return ups
            continue
        if not pending:
            return ups
        wait(poll)


@contextmanager
def _stack(
    stack: str, project: str, program: Callable[[], None], create: bool = True
) -> Iterator[Any]:
    """The stack through the Automation API, or PulumiMissing saying what to install. Its
    workspace (the inline program's project file) lives in a folder removed after use: left
    to itself, the Automation API makes one under /tmp per call and keeps it."""
    from pulumi import automation

    with tempfile.TemporaryDirectory(prefix="aichor-iac-stack-") as work_dir:
        opts = automation.LocalWorkspaceOptions(work_dir=work_dir)
        select = automation.create_or_select_stack if create else automation.select_stack
        try:
            selected = select(stack, project, program, opts=opts)
        except FileNotFoundError:
            raise PulumiMissing(f"`pulumi` is not installed: {INSTALL}") from None
        yield selected
