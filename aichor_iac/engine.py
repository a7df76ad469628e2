"""The offline engine: run the same components as `pulumi up`, under Pulumi's mock monitor,
and record every resource with its inputs, parent and dependencies. No Pulumi CLI, no cluster.

The mock engine hands inputs over camelCased (i.e. as Kubernetes JSON), integers as floats
and secrets wrapped in a sentinel (DESIGN §7); `normalise` undoes that, redacting secrets, and
`plain` reads a Kubernetes object's inputs so from its registration's request.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import gc
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from google.protobuf import struct_pb2
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime.sync_await import _sync_await

from . import doors
from .experiment.model import Experiment
from .settings import Settings

PROJECT = "aichor"
SECRET_SIG = "4dabf18193072939515e22adb298388d"
SECRET_VALUE = "1b47061264138c4ac30d75fd1eb44270"  # (the SDK's `_special_secret_sig`)
REDACTED = "[secret]"
# Kinds created first when nothing else orders them (the order `kubectl apply` would use).
KIND_ORDER = (
    "Namespace",
    "Secret",
    "ConfigMap",
    "PersistentVolumeClaim",
    "NetworkPolicy",
    "PodGroup",
    "Service",
    "Job",
    "Deployment",
)


@dataclass
class Resource:
    type: str
    name: str
    urn: str
    parent: str
    dependencies: list[str]
    custom: bool
    inputs: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def is_kubernetes(self) -> bool:
        return self.custom and self.type.startswith("kubernetes:")

    @property
    def kind(self) -> str:
        return self.inputs.get("kind", self.type.rsplit(":", 1)[-1])


@dataclass
class Rendering:
    resources: list[Resource]  # creation order
    outputs: dict[str, Any]
    warnings: list[str] = field(default_factory=list)  # what `pulumi up` would log as warnings

    @property
    def objects(self) -> list[dict[str, Any]]:
        """Every Kubernetes object, in creation order, secrets redacted."""
        return [r.inputs for r in self.resources if r.is_kubernetes]


# Stand-in values for the outputs of the providers that generate secrets (they run only
# under `pulumi up`). They never reach the output: the components mark them secret.
GENERATED = {
    "random:index/randomPassword:RandomPassword": {"result": "mock-password"},
    "tls:index/privateKey:PrivateKey": {
        "privateKeyOpenssh": "-----BEGIN OPENSSH PRIVATE KEY-----\nmock\n",
        "publicKeyOpenssh": "ssh-ed25519 mock\n",
        "privateKeyPem": "-----BEGIN PRIVATE KEY-----\nmock\n",
    },
    "tls:index/selfSignedCert:SelfSignedCert": {"certPem": "-----BEGIN CERTIFICATE-----\nmock\n"},
    "tls:index/certRequest:CertRequest": {"certRequestPem": "mock"},
    "tls:index/locallySignedCert:LocallySignedCert": {
        "certPem": "-----BEGIN CERTIFICATE-----\nmock\n"
    },
}


class _Recorder(pulumi.runtime.Mocks):
    """The mocks of the resources that are not Kubernetes objects (`_Monitor` records those):
    their inputs, and the outputs of those that generate secrets."""

    def __init__(self) -> None:
        self.inputs: dict[tuple[str, str], dict[str, Any]] = {}  # normalised

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        state = dict(args.inputs)
        self.inputs[(args.typ, args.name)] = normalise(state)
        return f"{args.name}-id", {**state, **GENERATED.get(args.typ, {})}

    def call(
        self, args: pulumi.runtime.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None  # (no outputs, no failures)


class _Logs(logging.Handler):
    """The program's `pulumi.log` messages, kept rather than printed: the mock engine would
    hand them to the root logger."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.warnings: list[str] = []
        # One per run, in no registry; warnings only (the SDK's debug messages made records)
        self.logger = logging.Logger(__name__, logging.WARNING)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.warnings.append(record.getMessage())


# The event loop Pulumi's mocks made for each worker thread of the monitor's calls: closed once
# its thread has ended (`_close_ended_loops`), the others at exit (`_close_loop`)
_WORKER_LOOPS: dict[threading.Thread, asyncio.AbstractEventLoop] = {}


def _thread_loop_kept(call: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """A mock monitor's call, after which the event loop Pulumi's mocks made for the worker
    thread that called it, if it is new, is kept to be closed at exit. They make one for each
    such thread and leave it open, for the interpreter's exit to finalise (now and then a
    traceback after the result). Closed after each call, each call made a new one: a quarter
    of a sweep's render went to making and closing loops."""

    @functools.wraps(call)
    def keeping(self: Any, request: Any) -> Any:
        try:
            return call(self, request)
        finally:
            if threading.current_thread() is not threading.main_thread():
                with contextlib.suppress(RuntimeError):  # (none made: nothing to keep)
                    _WORKER_LOOPS[threading.current_thread()] = asyncio.get_event_loop()

    return keeping


class _Monitor(pulumi_mocks.MockMonitor):
    """Mock monitor that also keeps each registration's parent, dependencies and options."""

    mocks: _Recorder

    def __init__(self, mocks: _Recorder) -> None:
        super().__init__(mocks)
        self.registrations: list[dict[str, Any]] = []

    Invoke = _thread_loop_kept(pulumi_mocks.MockMonitor.Invoke)
    ReadResource = _thread_loop_kept(pulumi_mocks.MockMonitor.ReadResource)

    @_thread_loop_kept
    def RegisterResource(self, request: Any) -> Any:
        if request.type.startswith("kubernetes:"):
            response = self._object(request)
        else:
            response = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":  # the program's root, not one of its own
            return response
        timeouts = request.customTimeouts
        self.registrations.append(
            {
                "type": request.type,
                "name": request.name,
                "urn": response.urn,
                "parent": request.parent,
                "dependencies": sorted(set(request.dependencies)),
                "custom": request.custom,
                "options": {
                    k: v
                    for k, v in {
                        "provider": request.provider.split("::")[-2] if request.provider else None,
                        "deleteBeforeReplace": request.deleteBeforeReplace,
                        "retainOnDelete": request.retainOnDelete,
                        "customTimeouts": {
                            k: getattr(timeouts, k)
                            for k in ("create", "update", "delete")
                            if getattr(timeouts, k)
                        },
                    }.items()
                    if v
                },
            }
        )
        return response

    def _object(self, request: Any) -> Any:
        """A Kubernetes object's registration: its inputs recorded as plain data, its identity
        (apiVersion, kind, metadata) as its outputs. The program reads no other output of an
        object but its status (none here, as before the cluster answers); the whole object
        back cost each its translation twice more. Its inputs are read from the request at
        once (`plain`), not through the SDK's reading and then `normalise`."""
        urn = self.make_urn(request.parent, request.type, request.name)
        inputs = plain(request.object)
        metadata = dict(inputs.get("metadata") or {})  # (auto-naming, where it is left out)
        metadata.setdefault("name", request.name)
        inputs["metadata"] = metadata
        self.mocks.inputs[(request.type, request.name)] = inputs
        identity: dict[str, Any] = {
            k: inputs[k] for k in ("apiVersion", "kind", "metadata") if k in inputs
        }
        self.resources[urn] = pulumi_mocks.MockMonitor.ResourceRegistration(
            urn, f"{request.name}-id", identity
        )
        outputs = _sync_await(rpc.serialize_properties(identity, {}))
        return resource_pb2.RegisterResourceResponse(
            urn=urn, id=f"{request.name}-id", object=outputs
        )


def run(
    program: Callable[[], Any], stack: str = "dev", config: dict[str, str] | None = None
) -> Rendering:
    """Run a Pulumi program function under the mock monitor; `program` returns its outputs."""
    _close_loop_at_exit()
    _close_ended_loops()
    recorder = _Recorder()
    monitor = _Monitor(recorder)
    logs = _Logs()
    outputs: dict[str, Any] = {}

    async def collect(exported: dict[str, Any]) -> None:
        """Each output's value, or REDACTED when it is secret (as `pulumi stack output` shows
        it): an `apply` would hand over secrets unmarked."""
        for key, value in exported.items():
            output = pulumi.Output.from_input(value)
            outputs[key] = REDACTED if await output.is_secret() else await output.future()

    def body() -> Any:
        return pulumi.Output.from_input(collect(program() or {}))

    with _no_source_positions(), _no_full_collections():
        # A root stack of this run's own: set_mocks keeps the process's first one, whose URN
        # would name the stack of the first rendering as the parent of every later one.
        pulumi.runtime.reset_options(project=PROJECT, stack=stack)
        pulumi.runtime.set_mocks(
            recorder,
            project=PROJECT,
            stack=stack,
            preview=False,
            monitor=monitor,
            logger=logs.logger,
        )
        pulumi.runtime.set_all_config(config or {})
        pulumi.runtime.test(body)()
        resources = [
            Resource(inputs=recorder.inputs.get((r["type"], r["name"]), {}), **r)
            for r in monitor.registrations
        ]
        return Rendering(creation_order(resources), normalise(outputs), logs.warnings)


@contextlib.contextmanager
def _no_full_collections() -> Iterator[None]:
    """A render allocates millions of small objects (each registration's Outputs, futures and
    protobuf messages) that live until it ends: each of the cycle collector's full passes
    walked them all, a third of a 1,000-trial sweep's render (and the passes freed nothing
    the young ones had not). Within the block, the young generations are collected as before
    and the oldest is not; it is once the block ends, when it is due."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, 1 << 30)
    try:
        yield
    finally:
        gc.set_threshold(young, middle, old)


@contextlib.contextmanager
def _no_source_positions() -> Iterator[None]:
    """Pulumi's SDK takes the Python stack at each registration, for the engine to show where
    in the program a resource was made (`sourcePosition`); the mock monitor drops it, and a
    sweep's render spent a tenth of its time taking them. Within the block, none is taken
    (tests/test_program.py); an SDK without the function it replaces fails every render."""
    from pulumi.runtime import resource
    from pulumi.runtime.proto import source_pb2

    taken = resource._get_stack_trace
    resource._get_stack_trace = source_pb2.StackTrace
    try:
        yield
    finally:
        resource._get_stack_trace = taken


@functools.cache
def _close_loop_at_exit() -> None:
    """Pulumi's runtime runs a program in the thread's event loop and leaves it open (a user's
    own Pulumi mocks may take it up after a render), for the interpreter's exit to finalise:
    after the modules it needs are gone, where now and then its finaliser met a closed
    descriptor and printed a traceback after the command's result (issue 50). So it is
    closed at exit, before that, as `asyncio.run` closes one, and so are the worker threads'."""
    atexit.register(_close_loop)


def _close_loop() -> None:
    with contextlib.suppress(RuntimeError):  # (no loop, or one still running: left alone)
        loop = asyncio.get_event_loop_policy().get_event_loop()
        if not loop.is_running() and not loop.is_closed():
            left = asyncio.all_tasks(loop)  # (a failed program's: nothing awaits them now)
            for task in left:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())  # (the worker threads)
            loop.close()
    _close_ended_loops(every=True)  # (the threads ended, or idle: no loop runs)


def _close_ended_loops(every: bool = False) -> None:
    """Close the kept loops of worker threads that have ended (`every`: of all of them): a
    process that renders many times (a test suite) makes new ones as its executors come and
    go, each with a selector and a pair of sockets."""
    for thread, loop in list(_WORKER_LOOPS.items()):
        if every or not thread.is_alive():
            del _WORKER_LOOPS[thread]
            if not loop.is_running() and not loop.is_closed():
                loop.close()


def expand(
    manifest: Experiment | Sequence[Experiment],
    settings: Settings | None = None,
    stack: str = "dev",
    name: str | None = None,
) -> Rendering:
    """The resources of the experiment (or of the experiments of one stack), exactly as
    `__main__.py` would create them; `name` names one experiment alone."""
    from .components import experiment, experiments

    settings = settings or Settings.default()
    if settings.check:  # (offline: `aichor-iac check` reads the cluster, when asked)
        settings = settings.updated("", check=False)
    manifests = [manifest] if isinstance(manifest, Experiment) else list(manifest)
    if len(manifests) > 1 or any(m.trial and m.trial.kept for m in manifests):
        if name:
            raise ValueError(f"a name names one experiment: these are {len(manifests)}")

        def several() -> dict[str, Any]:
            found = experiments(manifests, settings, stack)
            return {key: component.outputs for key, component in found.items()}

        return run(several, stack)
    (one,) = manifests
    experiment_name = name or settings.experiment_name or one.name_in(stack)
    return run(lambda: experiment(experiment_name, one, settings).outputs, stack)


def render(
    manifest: Experiment | Sequence[Experiment] | str | Path,
    *,
    name: str | None = None,
    namespace: str | None = None,
    settings: Settings | None = None,
    stack: str = "dev",
) -> list[dict[str, Any]]:
    """Every Kubernetes object for the manifest (a model, several, or a path: a file of one
    or several experiments, a directory of them), in creation order."""
    if isinstance(manifest, str | Path):
        manifest = doors.load_all(manifest)
    settings = settings or Settings.default()
    if namespace:
        settings = settings.updated("namespace", namespace=namespace)
    return expand(manifest, settings, stack, name).objects


def normalise(value: Any) -> Any:
    """Mock-engine values as plain data: secrets redacted, whole floats as integers."""
    if isinstance(value, dict):
        if SECRET_SIG in value:  # a secret map (a Secret's data) keeps its keys, not its values
            inner = value.get("value")
            return {k: REDACTED for k in inner} if isinstance(inner, dict) else REDACTED
        return {k: normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def plain(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A registration's inputs as `normalise(rpc.deserialize_properties(struct))` gives them,
    in one walk: a property holding a secret anywhere is redacted whole (the SDK lifts a
    secret to its top-level property), keeping its keys if it is a map; nulls and unknowns
    are left out of maps."""
    found = {}
    for key, value in struct.fields.items():
        data, secret = _plain(value)
        if secret:
            found[key] = {k: REDACTED for k in data} if isinstance(data, dict) else REDACTED
        elif data is not None:
            found[key] = data
    return found


def _plain(value: struct_pb2.Value) -> tuple[Any, bool]:
    """The value as plain data, and whether it holds a secret."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        text = value.string_value
        return (None, False) if text == rpc.UNKNOWN else (text, False)
    if kind == "number_value":
        number = value.number_value
        return int(number) if number.is_integer() else number, False
    if kind == "bool_value":
        return value.bool_value, False
    if kind == "list_value":
        items = [_plain(v) for v in value.list_value.values]
        return [data for data, _ in items], any(secret for _, secret in items)
    if kind != "struct_value":
        return None, False
    fields = value.struct_value.fields
    if SECRET_SIG in fields:
        if fields[SECRET_SIG].string_value != SECRET_VALUE:
            raise ValueError(f"an input the offline engine cannot read: {value}")
        return _plain(fields["value"])[0], True
    data, secret = {}, False
    for key, item in fields.items():
        found, hidden = _plain(item)
        secret = secret or hidden
        if found is not None or hidden:  # (a secret of nothing is still there)
            data[key] = found
    return data, secret


def creation_order(resources: list[Resource]) -> list[Resource]:
    """Dependencies first; otherwise by kind (Namespace, Secret, … Job), then by name."""
    by_urn = {r.urn: r for r in resources}

    def rank(r: Resource) -> tuple[int, str]:
        kind = r.kind
        return (KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER), r.name)

    def needs(r: Resource) -> Iterator[Resource]:
        return iter(
            sorted((by_urn[d] for d in [*r.dependencies, r.parent] if d in by_urn), key=rank)
        )

    ordered: list[Resource] = []
    done: set[str] = set()
    for first in sorted(resources, key=lambda r: (r.custom, rank(r))):
        if first.urn in done:
            continue
        # Depth first, each resource after what it needs, without recursion: a sweep's trials
        # are a chain as long as the sweep.
        done.add(first.urn)
        path = [(first, needs(first))]
        while path:
            r, left = path[-1]
            for dep in left:
                if dep.urn not in done:
                    done.add(dep.urn)
                    path.append((dep, needs(dep)))
                    break
            else:
                path.pop()
                ordered.append(r)
    return ordered
