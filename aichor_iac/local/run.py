"""A local run of an experiment (`aichor-iac run --local`): render it, run its pods on a
`LocalCluster` (as root here, else in a user namespace of the run's own), and decide its
result as the cluster would: done once the Jobs its success needs have succeeded, failed at
the first failure of one of those or of a pod the others wait for."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import awaits
from . import host
from .api import LocalApi, announce, forwarded
from .cluster import LocalCluster
from .host import UNSHARE, LocalUnavailable

if TYPE_CHECKING:
    from ..engine import Rendering


LAST_LINES = 80  # of the failing pod, in LocalRunFailed


class LocalRunFailed(Exception):
    """A local run that failed: its exit status (as a shell reports a process's), the pod
    whose failure decided it (None: the run's timeout) and that pod's last lines."""

    def __init__(self, experiment: str, status: int, pod: str | None, lines: list[str]):
        self.experiment, self.status, self.pod, self.lines = experiment, status, pod, lines
        why = f"{pod} failed first" if pod else "the run's timeout was reached"
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
    status, pod = _run(
        manifest, settings, experiment, replicas, timeout, line, on_progress, entrypoints
    )
    if status:
        raise LocalRunFailed(experiment, status, pod, list(last.get(pod or "", ())))
    return kept


def _run(
    manifest: Any,
    settings: Any,
    experiment: str,
    replicas: int | None,
    timeout: float,
    on_line: Callable[[str, str], None],
    on_progress: Callable[[dict[str, str]], None] | None,
    entrypoints: dict[str, list[str]] | None,
) -> tuple[int, str | None]:
    """`run_experiment`'s run: its exit status and the pod whose failure decided it."""
    from .. import engine, planning
    from ..settings import Settings

    if lacks := host.missing():
        raise LocalUnavailable("a local run needs " + ", ".join(lacks))
    settings = settings or Settings.default()
    if replicas is not None:
        manifest = _capped(manifest, replicas)
    plan = planning.blueprint(manifest, settings, experiment).plan
    if plan.endless:
        raise LocalUnavailable(
            "a RayCluster runs until destroyed: run a RayJob (or a manifest) locally"
        )
    rendering = engine.expand(manifest, settings, name=experiment)
    objects = _with_secrets(rendering.objects, manifest)
    _check_entrypoints(objects, entrypoints := entrypoints or {})
    env = base_env(masked=replicas is not None)
    secret = next((o for o in objects if o["kind"] == "Secret"), None)
    source = Path(manifest.source)
    run = Run(
        objects=objects,
        env=env,
        secrets=_secret_values(list((secret or {}).get("stringData", {}))),
        # (as AIchor's image: the manifest's directory)
        workdir=str(source.resolve().parent if source.is_file() else Path.cwd()),
        needed=sorted(plan.completes),
        gates=_awaited(plan),
        count=sum(g.count for g in plan.groups if g.role in plan.completes),
        timeout=timeout,
        entrypoints=entrypoints,
        after=_job_order(rendering),
        announced=experiment,
    )
    if os.geteuid() == 0:
        return run.drive(on_line, on_progress)
    return _in_user_namespace(run, on_line, on_progress)


def _awaited(plan: Any) -> list[str]:
    """The groups whose pods others wait to be up, which decide a run too: their failure
    leaves the rest waiting (on a cluster up to aichor:peerWaitSeconds or the experiment's
    timeout). A Ray head, MPI's workers (gates), and the Ray nodes the entry point waits for:
    the groups it is created after (a node that never joins holds its node wait)."""
    entry = next(g for g in plan.groups if g.role == plan.entry_point)
    return sorted(g.role for g in plan.groups if g.gates or g.role in entry.after)


def base_env(masked: bool = False) -> dict[str, str]:
    """What every pod's processes start from; `masked`: a smoke test, in which no process
    takes a GPU of this machine (only where there are any: Paddle's launcher takes any
    CUDA_VISIBLE_DEVICES for a GPU job)."""
    # (this Python environment's programs first, as an activated venv has them: a replica's
    # `torchrun` is the one installed beside aichor-iac, whatever the caller's PATH)
    path = os.pathsep.join(
        [str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")]
    )
    env = {
        "PATH": path,
        "HOME": os.environ.get("HOME", "/"),
    }
    if masked and glob.glob("/dev/nvidia[0-9]*"):
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


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
    needed: list[str]
    gates: list[str]
    count: int
    timeout: float
    entrypoints: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    # Job -> the Jobs it is created after, once their awaits hold (as `pulumi up` does)
    after: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    # The experiment's name, under which the run announces its read API for `status --local`
    announced: str | None = None
    # Where a run in a user namespace of its own (a network of its own) serves that API: a
    # Unix socket its parent forwards from this side's 127.0.0.1 and announces
    api_socket: str | None = None

    @property
    def namespace(self) -> str:
        return self.objects[0]["metadata"].get("namespace", "default")

    def drive(
        self,
        on_line: Callable[[str, str], None] | None,
        on_progress: Callable[[dict[str, str]], None] | None,
        private: bool = False,
    ) -> tuple[int, str | None]:
        """Create every Job, wait for the result, leave the cluster; the exit status, and the
        pod whose failure decided it."""
        workdir = Path(self.workdir)
        cluster = LocalCluster(
            self.objects,
            self.env,
            self.secrets,
            on_line,
            workdir,
            private,
            entrypoints=self.entrypoints,
        )
        with _terminated_as_exit(), cluster, self._api(cluster):
            creating = _Creation(cluster, self.after, self.timeout)
            deadline, states = time.monotonic() + self.timeout, {}
            codes: list[int] = []  # the exit codes of the pods that must succeed
            failures: list[int] = []  # the deciding pods' failures, in the order they ended
            deciding = {*self.needed, *self.gates}
            role = cluster.controllers.role_of
            while time.monotonic() < deadline:  # until the result is known: done, or a failure
                creating.advance()
                if on_progress is not None and states != cluster.state:
                    states = dict(cluster.state)
                    on_progress(states)
                results = list(cluster.results.items())
                codes = [r.returncode for p, r in results if role(p) in self.needed]
                # A smoke test: the first failure of a deciding pod ends the run, even where
                # its Job would make the pod again (a group restart runs within the pods)
                failures = [
                    (r.returncode, p) for p, r in results if r.returncode and role(p) in deciding
                ]
                if len(codes) == self.count or failures:
                    break
                time.sleep(0.2)
            if not failures:  # the followers stop by themselves: let them, briefly
                cluster.settle(timeout=10)
            if on_progress is not None:
                on_progress(dict(cluster.state))
        if failures:  # a signal's death as a shell reports it (128 + the signal)
            code, pod = failures[0]
            return (128 - code if code < 0 else code), pod
        return (0 if len(codes) == self.count else 124), None  # done, or the timeout

    @contextlib.contextmanager
    def _api(self, cluster: LocalCluster) -> Iterator[None]:
        """The cluster's read API, announced, while the run lasts (`announced`)."""
        if self.api_socket is not None:  # (announced by the parent: `_in_user_namespace`)
            with LocalApi(cluster, self.namespace, self.api_socket):
                yield
        elif self.announced is not None:
            with (
                LocalApi(cluster, self.namespace) as api,
                announce(self.announced, api.url, self.namespace),
            ):
                yield
        else:
            yield


class _Creation:
    """`pulumi up`'s order on the local cluster: a Job is created once every Job it depends
    on is created and its await holds (`awaits`); one that has failed holds back its
    dependents for good, as it fails `up`."""

    def __init__(self, cluster: LocalCluster, after: dict[str, list[str]], timeout: float):
        self.cluster, self.after, self.timeout = cluster, after, timeout
        self.waiting = [job["metadata"]["name"] for job in cluster.jobs]
        self.created: list[str] = []
        self.held: set[str] = set()

    def advance(self) -> None:
        for name in [n for n in self.created if n not in self.held]:
            with contextlib.suppress(awaits.AwaitFailed):
                job = self.cluster.controllers.job(name)
                if awaits.holds(job, self.cluster.job_status(name)):
                    self.held.add(name)
        for name in list(self.waiting):
            if set(self.after.get(name, ())) <= self.held:
                self.cluster.start(name, self.timeout)
                self.waiting.remove(name)
                self.created.append(name)


def _job_order(rendering: Rendering) -> dict[str, list[str]]:
    """Each Job's Jobs it is created after (its Pulumi dependencies that are Jobs; the other
    objects it depends on hold at once)."""
    jobs = {r.urn: r.inputs["metadata"]["name"] for r in rendering.resources if r.kind == "Job"}
    return {
        jobs[r.urn]: [jobs[d] for d in r.dependencies if d in jobs]
        for r in rendering.resources
        if r.urn in jobs
    }


def _with_secrets(objects: list[dict[str, Any]], manifest: Any) -> list[dict[str, Any]]:
    """The rendered objects with the values of the Secrets given beside a custom resource
    (render redacts them; the local cluster's pods need them, and nothing here prints them)."""
    origin = manifest.spec.origin
    given = {
        c["metadata"]["name"]: c
        for c in (origin.companions if origin else ())
        if c["kind"] == "Secret"
    }
    return [
        {
            **o,
            **{
                k: given[o["metadata"]["name"]][k]
                for k in ("data", "stringData")
                if k in given[o["metadata"]["name"]]
            },
        }
        if o["kind"] == "Secret" and o["metadata"]["name"] in given
        else o
        for o in objects
    ]


def _check_entrypoints(objects: list[dict[str, Any]], entrypoints: dict[str, list[str]]) -> None:
    """LocalUnavailable naming each container that runs its image's entrypoint, where it is
    not given (no image is pulled here)."""
    unknown = []
    for job in (o for o in objects if o["kind"] == "Job"):
        spec = job["spec"]["template"]["spec"]
        for container in spec["containers"] + spec.get("initContainers", []):
            if "command" not in container and container["image"] not in entrypoints:
                unknown.append(
                    f"container {container['name']} of Job {job['metadata']['name']} runs "
                    f"the entrypoint of {container['image']}"
                )
    if unknown:
        raise LocalUnavailable(
            "no image is pulled here, and "
            + "; ".join(unknown)
            + ": say what it runs with --entrypoint IMAGE=COMMAND (docker inspect --format "
            "'{{json .Config.Entrypoint}}' IMAGE)"
        )


def _in_user_namespace(
    run: Run,
    on_line: Callable[[str, str], None] | None,
    on_progress: Callable[[dict[str, str]], None] | None,
) -> tuple[int, str | None]:
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
        if run.announced is not None and run.api_socket is not None:
            url = stack.enter_context(forwarded(run.api_socket))
            stack.enter_context(announce(run.announced, url, run.namespace))
        child = stack.enter_context(
            subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
            )
        )
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(json.dumps(dataclasses.asdict(run)))
        child.stdin.close()
        failed = None
        try:
            for message in child.stdout:
                kind, *value = json.loads(message)
                if kind == "line" and on_line is not None:
                    on_line(*value)
                elif kind == "progress" and on_progress is not None:
                    on_progress(*value)
                elif kind == "failed":
                    failed = value[0]
                elif kind == "unavailable":
                    raise LocalUnavailable(*value)
        finally:
            if child.poll() is None:
                child.terminate()
            status = child.wait()
    return status, failed


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
        status, failed = run.drive(
            lambda pod, line: send("line", pod, line),
            lambda states: send("progress", states),
            private=True,
        )
        send("failed", failed)
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


def _capped(manifest: Any, replicas: int) -> Any:
    """The experiment with at most `replicas` replicas per group (pool; a jobset type's Jobs
    and pods per Job) and no GPUs (a Ray node then offers none), nothing else changed."""

    spec = manifest.spec

    def capped(group: Any) -> Any:
        accelerators = group.resources.accelerators.model_copy(update={"gpu": None})
        update = {
            "count": min(group.count, replicas),
            "resources": group.resources.model_copy(update={"accelerators": accelerators}),
        }
        if hasattr(group, "completions"):  # a jobset type: pods per Job too
            update["completions"] = min(group.completions, replicas)
            update["parallelisms"] = min(group.parallelisms, update["completions"])
        return group.model_copy(update=update)

    types = spec.types.model_copy()
    for type_name, group in spec.types.present().items():
        value = [capped(g) for g in group] if isinstance(group, list) else capped(group)
        if type_name in type(types).model_fields:
            types.__dict__[type_name] = value  # (the models are frozen)
        else:  # a jobset's own type names are the model's extra fields
            types.__pydantic_extra__[type_name] = value
    capped_spec = spec.model_copy(update={"types": types})
    capped_spec._origin = spec.origin
    result = manifest.model_copy(update={"spec": capped_spec})
    return result.read_from(manifest.source, manifest._lines)


def _secret_values(keys: list[str]) -> dict[str, str]:
    """Values for the experiment's generated Secret (Pulumi generates them on a cluster)."""
    import secrets as random

    values = {key: random.token_hex(24) for key in keys}
    if "ssh-privatekey" in keys:
        if shutil.which("ssh-keygen") is None:
            raise LocalUnavailable("an MPI experiment's key pair needs `ssh-keygen` (openssh)")
        with tempfile.TemporaryDirectory() as directory:
            key = Path(directory) / "id"
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True
            )
            values["ssh-privatekey"] = key.read_text()
            values["ssh-publickey"] = key.with_suffix(".pub").read_text()
    return values
