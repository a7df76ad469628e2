"""A local run of an experiment, or of a stack's experiments (`aichor-iac run --local`):
render them, run their pods on a `LocalCluster` (as root here, else in a user namespace of
the run's own) in the order `pulumi up` creates them, and decide each one's result as the
cluster would (`parts`)."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..k8s import awaits
from . import host
from .api import LocalApi, announce, forwarded
from .cluster import LocalCluster
from .host import UNSHARE, LocalUnavailable
from .jobs import owner
from .parts import HELD_BACK, TIMED_OUT, Outcome, Part, first_failure
from .prepare import (
    Gate,
    base_env,
    capped_to,
    check_entrypoints,
    job_order,
    progress_hosts,
    secret_values,
    sweep_gates,
    with_secrets,
)

LAST_LINES = 80  # of the failing pod, in LocalRunFailed


class LocalRunFailed(Exception):
    """A local run that failed: its exit status (as a shell reports a process's), the pod
    whose failure decided it (None: the run's timeout) and that pod's last lines."""

    def __init__(self, experiment: str, status: int, pod: str | None, lines: list[str]):
        self.experiment, self.status, self.pod, self.lines = experiment, status, pod, lines
        why = (
            f"{pod} failed first"
            if pod
            else "pulumi up failed first: it was not created"
            if (status, pod) == HELD_BACK
            else "the run's timeout was reached"
        )
        shown = "".join(f"\n{pod} {line}" for line in lines)
        super().__init__(
            f"{experiment} failed ({status}): {why}{'; its last lines:' if shown else ''}{shown}"
        )


def run_experiment(
    manifest: Any,
    settings: Any = None,
    *,
    name: str | None = None,
    replicas: int | None = None,
    timeout: float = 3600,
    on_line: Callable[[str, str], None] | None = None,
    on_progress: Callable[[dict[str, str]], None] | None = None,
    entrypoints: dict[str, list[str]] | None = None,
) -> list[tuple[str, str]]:
    """Run every replica of the experiment (what `render` takes: an Experiment, or a
    manifest's or custom resource's path) as local processes, with the env, host names,
    ordering, waiting and following they would have on the cluster; `replicas` caps each
    group's count and masks GPUs off. It succeeds once every Job the experiment's success
    needs has succeeded; else LocalRunFailed, with the failing pod's last lines. Commands run
    in the manifest's directory (AIchor builds the image from the repository it is in), else
    here, with the programs of the Python environment running this first on PATH (as an
    activated venv would give them). As root, the pods' namespaces are made in this
    machine's; otherwise in a user namespace of the run's own. LocalUnavailable when this
    machine cannot (what it lacks). The pods' lines, `(pod, line)` in the order printed, are
    returned — or, with `on_line(pod, line)`, handed to it as they come (nothing is kept).
    `on_progress(states)` gets each pod's state whenever one changes. No image is pulled
    here: a container that gives no command runs `entrypoints[image]` (argv)."""
    from ..doors import experiment_of

    manifest = experiment_of(manifest)
    kept: list[tuple[str, str]] = []
    last: dict[str, collections.deque[str]] = {}

    def line(pod: str, text: str) -> None:
        last.setdefault(pod, collections.deque(maxlen=LAST_LINES)).append(text)
        if on_line is None:
            kept.append((pod, text))
        else:
            on_line(pod, text)

    experiment = name or (settings and settings.experiment_name) or manifest.name_in("local")
    ((status, pod),) = _run(
        [manifest], settings, [experiment], replicas, timeout, line, on_progress, entrypoints
    ).values()
    if status:
        raise LocalRunFailed(experiment, status, pod, list(last.get(pod or "", ())))
    return kept


def run_experiments(
    manifests: Sequence[Any],
    settings: Any = None,
    *,
    stack: str = "local",
    replicas: int | None = None,
    timeout: float = 3600,
    on_line: Callable[[str, str], None] | None = None,
    on_progress: Callable[[dict[str, str]], None] | None = None,
    entrypoints: dict[str, list[str]] | None = None,
) -> dict[str, Outcome]:
    """The experiments of one stack (`doors.load_all`'s: a sweep's trials, a directory's
    experiments) in one local run, as `run_experiment` runs one, each named by its own name
    and created in the order `pulumi up` creates them: a sweep's trial once the trial it
    waits for has ended (at most parallelTrialCount at once). A failed experiment does not
    stop the others: its Jobs fail, as a Job past its deadline does. Each experiment's
    outcome — (exit status, the pod whose failure decided it) — in the order decided."""
    if len(manifests) == 1:
        experiment = (settings and settings.experiment_name) or manifests[0].name_in(stack)
        names = [experiment]
    else:  # (each named by its own name, as `components.experiments` names them)
        names = [m.name_in(stack) for m in manifests]
    return _run(
        list(manifests),
        settings,
        names,
        replicas,
        timeout,
        on_line,
        on_progress,
        entrypoints,
        stack,
    )


def _run(
    manifests: list[Any],
    settings: Any,
    names: list[str],
    replicas: int | None,
    timeout: float,
    on_line: Callable[[str, str], None] | None,
    on_progress: Callable[[dict[str, str]], None] | None,
    entrypoints: dict[str, list[str]] | None,
    stack: str = "dev",
) -> dict[str, Outcome]:
    """The run of the experiments (`names`: theirs, in `stack`): each one's outcome."""
    from .. import engine, planning
    from ..settings import Settings

    if lacks := host.missing():
        raise LocalUnavailable("a local run needs " + ", ".join(lacks))
    settings = settings or Settings.default()
    if replicas is not None:
        manifests = [capped_to(m, replicas) for m in manifests]
    blueprints = [planning.blueprint(m, settings, n) for m, n in zip(manifests, names, strict=True)]
    plans = [blueprint.plan for blueprint in blueprints]
    if any(plan.endless for plan in plans):
        raise LocalUnavailable(
            "a RayCluster runs until destroyed: run a RayJob (or a manifest) locally"
        )
    if len(manifests) == 1:
        rendering = engine.expand(manifests[0], settings, name=names[0])
    else:
        rendering = engine.expand(manifests, settings, stack)
    objects = rendering.objects
    for manifest in manifests:
        objects = with_secrets(objects, manifest)
    check_entrypoints(objects, entrypoints := entrypoints or {})
    keys = {k for o in objects if o["kind"] == "Secret" for k in o.get("stringData", {})}
    source = Path(manifests[0].source)
    run = Run(
        objects=objects,
        env=base_env(masked=replicas is not None),
        secrets=secret_values(sorted(keys), progress_hosts(objects)),
        # (as AIchor's image: the manifest's directory)
        workdir=str(source.resolve().parent if source.is_file() else Path.cwd()),
        parts=[Part.of(name, plan) for name, plan in zip(names, plans, strict=True)],
        timeout=timeout,
        entrypoints=entrypoints,
        after=job_order(rendering),
        gates=sweep_gates(blueprints),
        announced=True,
    )
    if os.geteuid() == 0:
        return run.drive(on_line, on_progress)
    return _in_user_namespace(run, on_line, on_progress)


@dataclasses.dataclass
class Run:
    """A rendered experiment to run locally: its objects, the pods' base env, the generated
    Secret's values, where commands run, which groups' pods (`count` of them) must succeed,
    and which groups' failure fails it at once (theirs and the gates'), and what the
    images' entrypoints are (`entrypoints`: image -> argv, for containers that give no
    command)."""

    objects: list[dict[str, Any]]
    env: dict[str, str]
    secrets: dict[str, str]
    workdir: str
    parts: list[Part]  # its experiments, and what decides each
    timeout: float
    entrypoints: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    # Job -> the Jobs it is created after, once their awaits hold (as `pulumi up` does)
    after: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    # experiment -> its gate: created unless its sweep has failed (`prepare.sweep_gates`)
    gates: dict[str, Gate] = dataclasses.field(default_factory=dict)
    # Whether the run announces its read API for `status --local` (under each part's name)
    announced: bool = False
    # Where a run in a user namespace of its own (a network of its own) serves that API: a
    # Unix socket its parent forwards from this side's 127.0.0.1 and announces
    api_socket: str | None = None

    def __post_init__(self) -> None:
        self.parts = [p if isinstance(p, Part) else Part(**p) for p in self.parts]  # (JSON)

    @property
    def namespace(self) -> str:
        return self.objects[0]["metadata"].get("namespace", "default")

    def drive(
        self,
        on_line: Callable[[str, str], None] | None,
        on_progress: Callable[[dict[str, str]], None] | None,
        private: bool = False,
    ) -> dict[str, Outcome]:
        """Create every Job, wait for each experiment's outcome, leave the cluster; the
        outcomes, in the order they were decided (an experiment undecided at the timeout
        last). One experiment's failure ends a run of one; of several (a sweep), its Jobs
        fail as a Job past its deadline does, and the others go on."""
        cluster = LocalCluster(
            self.objects,
            self.env,
            self.secrets,
            on_line,
            Path(self.workdir),
            private,
            entrypoints=self.entrypoints,
        )
        with _terminated_as_exit(), cluster, self._api(cluster):
            creating = _Creation(cluster, self.after, self.gates, self.timeout)
            deadline, states = time.monotonic() + self.timeout, {}
            outcomes: dict[str, Outcome] = {}
            while time.monotonic() < deadline and len(outcomes) < len(self.parts):
                creating.advance()
                if on_progress is not None and states != cluster.state:
                    states = dict(cluster.state)
                    on_progress(states)
                if self._decide(cluster, outcomes) and len(self.parts) == 1:
                    break
                for job in (cluster.controllers.job(n) for n in creating.held_back()):
                    outcomes.setdefault(owner(job)[0], HELD_BACK)
                time.sleep(0.2)
            if not any(code for code, _ in outcomes.values()):  # the followers stop by
                cluster.settle(timeout=10)  # themselves: let them, briefly
            if on_progress is not None:
                on_progress(dict(cluster.state))
        for pod in sorted(cluster.unshipped):  # (said as it happened: not a success here)
            experiment = owner(cluster.controllers.job_of_pod(pod))[0]
            if outcomes.get(experiment, (1, None))[0] == 0:
                outcomes[experiment] = (1, pod)
        return {**outcomes, **{p.name: TIMED_OUT for p in self.parts if p.name not in outcomes}}

    def _decide(self, cluster: LocalCluster, outcomes: dict[str, Outcome]) -> bool:
        """Each undecided experiment's outcome, where the pods' results give it (`outcomes`,
        added to); whether one has failed. The Jobs of one that failed (of several) fail."""
        of = cluster.controllers.job_of_pod
        results = [
            (pod, result.returncode, *owner(of(pod)))
            for pod, result in list(cluster.results.items())
        ]
        failed = False
        for part in (p for p in self.parts if p.name not in outcomes):
            if (outcome := part.outcome(results)) is None:
                continue
            outcomes[part.name] = outcome
            failed = failed or bool(outcome[0])
            if outcome[0] and len(self.parts) > 1:
                for job in cluster.jobs:
                    if owner(job)[0] == part.name:
                        cluster.fail_job(job["metadata"]["name"], "ExperimentFailed")
        return failed

    @contextlib.contextmanager
    def _api(self, cluster: LocalCluster) -> Iterator[None]:
        """The cluster's read API, announced, while the run lasts (`announced`)."""
        if self.api_socket is not None:  # (announced by the parent: `_in_user_namespace`)
            with LocalApi(cluster, self.namespace, self.api_socket):
                yield
        elif self.announced:
            with LocalApi(cluster, self.namespace) as api, _announced(self, api.url):
                yield
        else:
            yield


class _Creation:
    """`pulumi up`'s order on the local cluster: a Job is created once every Job it depends
    on is created and its await holds (`awaits`), and, a sweep's trial, unless its sweep has
    failed (its gate). Once an await fails or a gate refuses, `up` fails: nothing more is
    created (what is created runs on)."""

    def __init__(
        self,
        cluster: LocalCluster,
        after: dict[str, list[str]],
        gates: dict[str, Gate],
        timeout: float,
    ):
        self.cluster, self.after, self.gates, self.timeout = cluster, after, gates, timeout
        self.waiting = [job["metadata"]["name"] for job in cluster.jobs]
        self.created: list[str] = []
        self.held: set[str] = set()
        self.failed = False  # `pulumi up` has failed

    def advance(self) -> None:
        for name in [n for n in self.created if n not in self.held]:
            job = self.cluster.controllers.job(name)
            try:
                if awaits.holds(job, self.cluster.job_status(name)):
                    self.held.add(name)
            except awaits.AwaitFailed:
                self.held.add(name)  # (ended: held for good, and `up` fails)
                self.failed = True
        for name in list(self.waiting):
            if self.failed or not {*self.after.get(name, ()), *self._counted(name)} <= self.held:
                continue
            if self._refused(name):
                self.failed = True
                continue
            self.cluster.start(name, self.timeout)
            self.waiting.remove(name)
            self.created.append(name)

    def _gate(self, name: str) -> Gate:
        """The Job's trial's gate: its sweep's limit, and the entry Jobs of the earlier trials
        it counts (it waits until each has ended: `components.sweep_gate`)."""
        return self.gates.get(owner(self.cluster.controllers.job(name))[0], (0, []))

    def _counted(self, name: str) -> list[str]:
        return self._gate(name)[1]

    def _refused(self, name: str) -> bool:
        """Whether the Job's sweep has failed (as many failed trials as its limit)."""
        limit, counted = self._gate(name)
        status = self.cluster.job_status
        return bool(counted) and sum(awaits.job_failed(status(n)) for n in counted) >= limit

    def held_back(self) -> set[str]:
        """The Jobs that will never be created: `pulumi up` has failed."""
        return set(self.waiting) if self.failed else set()


@contextlib.contextmanager
def _announced(run: Run, url: str) -> Iterator[None]:
    """The run's read API announced under each of its experiments' names."""
    with contextlib.ExitStack() as stack:
        for part in run.parts:
            stack.enter_context(announce(part.name, url, run.namespace))
        yield


def _in_user_namespace(
    run: Run,
    on_line: Callable[[str, str], None] | None,
    on_progress: Callable[[dict[str, str]], None] | None,
) -> dict[str, Outcome]:
    """Without root: the run in a child process inside a user namespace (`_child`), the
    rendered experiment on its standard input, its lines and progress back as JSON lines. The
    child leaving (or being killed) ends every pod with it: they are in its PID namespace."""
    root = tempfile.mkdtemp(prefix="aichor-root-", dir="/var/tmp")  # the child's own root
    sockets = tempfile.mkdtemp(prefix="aichor-api-", dir="/var/tmp")  # (seen from both sides)
    run = dataclasses.replace(run, api_socket=os.path.join(sockets, "api.sock"))
    code = f"from aichor_iac.local.run import _child; _child({root!r})"
    # --kill-child: a TERM to the child if `unshare` is ended, so that it leaves cleanly
    argv = [*UNSHARE, "--mount-proc", "--kill-child=TERM", sys.executable, "-c", code]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, root, ignore_errors=True)  # (the mount was the child's)
        stack.callback(shutil.rmtree, sockets, ignore_errors=True)
        if run.announced and run.api_socket is not None:
            url = stack.enter_context(forwarded(run.api_socket))
            stack.enter_context(_announced(run, url))
        child = stack.enter_context(
            subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
            )
        )
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(json.dumps(dataclasses.asdict(run)))
        child.stdin.close()
        outcomes: dict[str, Outcome] = {}
        try:
            for message in child.stdout:
                kind, *value = json.loads(message)
                if kind == "line" and on_line is not None:
                    on_line(*value)
                elif kind == "progress" and on_progress is not None:
                    on_progress(*value)
                elif kind == "outcomes":
                    outcomes = {name: (code, pod) for name, code, pod in value[0]}
                elif kind == "unavailable":
                    raise LocalUnavailable(*value)
        finally:
            if child.poll() is None:
                child.terminate()
            status = child.wait()
    # (a child killed before it could tell: its status, for every experiment)
    return outcomes or {p.name: (status, None) for p in run.parts}


def _child(root: str) -> None:
    """The run inside the user namespace (root there): a root directory of its own, so that a
    volume can be mounted where no directory exists yet (`/aichor/function`), then the run."""
    run = Run(**json.load(sys.stdin))
    lock = threading.Lock()

    def send(*message: Any) -> None:
        with lock:
            print(json.dumps(message), flush=True)

    host.own_root(Path(root))
    try:
        outcomes = run.drive(
            lambda pod, line: send("line", pod, line),
            lambda states: send("progress", states),
            private=True,
        )
        send("outcomes", [[name, code, pod] for name, (code, pod) in outcomes.items()])
        status = first_failure(outcomes)[0]
    except LocalUnavailable as error:
        send("unavailable", str(error))
        status = 2
    sys.exit(status)


@contextlib.contextmanager
def _terminated_as_exit() -> Iterator[None]:
    """SIGTERM (a `timeout`, a closed terminal) ends the run as Ctrl-C does: the cluster is
    left cleanly (its processes killed, its namespaces and mounts removed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the cleanup is not interrupted again
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
