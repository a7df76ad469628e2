"""The Pulumi program and the CLI around the same components: `__main__.py` under mocks with a
stack config exports the documented outputs; `Pulumi.yaml` declares every setting; `preview`
shows the tree, the order and the totals."""

from __future__ import annotations

import json
import re
import runpy
import subprocess
import sys
import traceback
from pathlib import Path

import pulumi
import pytest
import yaml
from conftest import ALL_EXAMPLES, ROOT, expand, pytorch_manifest

from aichor_iac import cli, doors, engine, render
from aichor_iac.experiment.trial import SUCCEEDED, Result
from aichor_iac.settings import Settings, load_stack_file

OUTPUTS = [
    "experiment",
    "namespace",
    "framework",
    "entryPoint",
    "addresses",
    "logs",
    "pods",
    "gpus",
    "cpus",
    "memoryGiB",
]
STACKS = sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))


def program() -> dict:
    """__main__.py's body: the outputs of its experiments (of one alone: its own)."""
    found = runpy.run_path(str(ROOT / "__main__.py"))["experiments"]
    outputs = {name: component.outputs for name, component in found.items()}
    return next(iter(outputs.values())) if len(outputs) == 1 else outputs


def run_program(stack_file: Path, monkeypatch) -> tuple[dict, engine.Rendering]:
    """Run __main__.py as `pulumi up` would, with the stack file's config, under mocks."""
    config = yaml.safe_load(stack_file.read_text())["config"]
    # Pulumi hands every config value to the program as text; structured values as JSON.
    values = {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}
    exports: dict = {}
    monkeypatch.setattr(pulumi, "export", lambda key, value: exports.__setitem__(key, value))
    monkeypatch.chdir(ROOT)
    stack = stack_file.name.removeprefix("Pulumi.").removesuffix(".yaml")
    rendering = engine.run(
        program,
        stack=stack,
        config=values,
    )
    return exports, rendering


# Outputs only some frameworks have (docs/outputs.md).
FRAMEWORK_OUTPUTS = {
    "mpi": ("hostfile", "slots"),
    "ray": ("rayAddress", "dashboard", "dashboardUrl", "expectedNodeCount"),
}


@pytest.mark.parametrize("stack_file", STACKS, ids=lambda p: p.name)
def test_main_exports_the_documented_outputs(stack_file, monkeypatch):
    exports, rendering = run_program(stack_file, monkeypatch)
    settings, stack = load_stack_file(stack_file)
    # (a stack of several experiments, a sweep's trials: each one's outputs under its name)
    several = "framework" not in exports
    optional = {"tensorboard", "tensorboardLogs", "sharedVolume"}  # when the manifest asks
    for name, outputs in exports.items() if several else [(None, exports)]:
        framework = set(FRAMEWORK_OUTPUTS.get(outputs["framework"], ()))
        assert [k for k in outputs if k not in optional | framework] == OUTPUTS
        assert framework <= set(outputs)
        assert outputs["namespace"] == settings.namespace
        assert outputs["experiment"] == name or not several
    manifest = yaml.safe_load(
        (ROOT / yaml.safe_load(stack_file.read_text())["config"]["aichor:manifest"]).read_text()
    )
    if not several:  # (an AIchor manifest's name, a custom resource's metadata.name, the stack's)
        named = manifest.get("name", manifest.get("metadata", {}).get("name", stack))
        assert exports["experiment"] == named
    assert sum(o["pods"] for o in (exports.values() if several else [exports])) == sum(
        o["spec"]["completions"] for o in rendering.objects if o["kind"] == "Job"
    )


def test_main_and_cli_render_the_same_objects(monkeypatch):
    stack_file = ROOT / "stacks/Pulumi.pytorch.yaml"
    _, program = run_program(stack_file, monkeypatch)
    settings, stack = load_stack_file(stack_file)
    assert program.objects == render(ROOT / "examples/pytorch.yaml", settings=settings, stack=stack)


def test_the_program_reads_what_an_image_runs_from_the_stack(tmp_path, monkeypatch):
    """`pulumi up` with docs/failures.md's server set: its stack's aichor:entrypoints (a list,
    which Pulumi hands over as JSON) is the command every server restarts with."""
    page = (ROOT / "docs" / "failures.md").read_text()
    manifest = tmp_path / "servers.yaml"
    manifest.write_text(page.split('```yaml title="servers.yaml"\n', 1)[1].split("```", 1)[0])
    told = "registry.example/model-server:1=/usr/bin/model_server --model /models/m"
    stack = tmp_path / "Pulumi.servers.yaml"
    config = {"aichor:manifest": str(manifest), "aichor:entrypoints": [told]}
    stack.write_text(yaml.safe_dump({"config": config}))
    _, rendering = run_program(stack, monkeypatch)
    jobs = [o for o in rendering.objects if o["kind"] == "Job"]
    assert len(jobs) == 2
    for job in jobs:
        command = job["spec"]["template"]["spec"]["containers"][0]["command"]
        assert command[-1] == "/usr/bin/model_server --model /models/m --port=8000"


def test_each_rendering_in_a_process_has_its_own_stacks_root():
    # Renderings of several stacks in one process (a notebook, a test run): each top
    # component's parent is its own stack's root, whatever was rendered before it.
    model = doors.load(ROOT / "examples/pytorch.yaml")
    for stack in ("first", "second", "first"):
        (top, *_) = engine.expand(model, stack=stack).resources
        assert top.parent == f"urn:pulumi:{stack}::aichor::pulumi:pulumi:Stack::aichor-{stack}"


def test_every_example_has_a_stack():
    assert sorted(p.stem for p in ALL_EXAMPLES) == sorted(
        p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACKS
    )


def test_preview_shows_the_tree_order_and_totals(capsys):
    assert (
        cli.main(
            [
                "preview",
                str(ROOT / "examples/pytorch.yaml"),
                "--stack-config",
                str(ROOT / "stacks/Pulumi.pytorch.yaml"),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    rows = [line.split() for line in text.splitlines()[3:17]]
    # mark, tree, type, name, plan: the stack, its component, then creation order
    assert rows[:2] == [
        ["+", "pulumi:pulumi:Stack", "aichor-pytorch", "create"],
        ["+", "└─", "aichor:index:PyTorchJob", "pytorch-ddp", "create"],
    ]
    assert [(r[2], r[3]) for r in rows[2:]] == [
        ("kubernetes:core/v1:Namespace", "ml-experiments"),
        ("tls:index/privateKey:PrivateKey", "pytorch-ddp-progress-ca-key"),
        ("tls:index/selfSignedCert:SelfSignedCert", "pytorch-ddp-progress-ca"),
        ("tls:index/privateKey:PrivateKey", "pytorch-ddp-progress-key"),
        ("tls:index/certRequest:CertRequest", "pytorch-ddp-progress-request"),
        ("tls:index/locallySignedCert:LocallySignedCert", "pytorch-ddp-progress-cert"),
        ("random:index/randomPassword:RandomPassword", "pytorch-ddp-progress-token"),
        ("kubernetes:core/v1:Secret", "pytorch-ddp-secret"),
        ("kubernetes:networking.k8s.io/v1:NetworkPolicy", "pytorch-ddp"),
        ("kubernetes:core/v1:Service", "pytorch-ddp"),
        ("kubernetes:batch/v1:Job", "pytorch-ddp-master"),
        ("kubernetes:batch/v1:Job", "pytorch-ddp-worker"),
    ]
    worker = text.splitlines()[16]
    assert "2 pods, 4 CPU, 12Gi memory, 1 × nvidia.com/gpu (Quadro-RTX-4000) each" in worker
    # what it is created after, less what that already follows
    assert worker.endswith("(after Job/pytorch-ddp-master)")
    assert "Resources:\n    + 14 to create" in text
    assert "Totals: 3 pods, GPUs: 3 × Quadro-RTX-4000, 12 CPUs, 36 GiB memory" in text


def test_cli_options_override_the_stack(capsys):
    assert (
        cli.main(
            [
                "render",
                str(ROOT / "examples/pytorch.yaml"),
                "--name",
                "Other Name",
                "--namespace",
                "team-a",
            ]
        )
        == 0
    )
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert {o["metadata"]["namespace"] for o in objects} == {"team-a"}
    # cleaned into a DNS label, with a hash of the name given (names that clean alike differ)
    service = next(o for o in objects if o["kind"] == "Service")
    assert re.fullmatch(r"other-name-[0-9a-f]{6}", service["metadata"]["name"])


def test_bad_stack_config_is_a_clear_error(tmp_path, capsys):
    stack = tmp_path / "Pulumi.x.yaml"
    stack.write_text("config:\n  aichor:wait: forever\n  aichor:nameSpace: a\n")
    assert (
        cli.main(["render", str(ROOT / "examples/pytorch.yaml"), "--stack-config", str(stack)]) == 2
    )
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"{stack}: aichor:wait: Input should be 'none', 'ready' or 'complete'")
    assert err[1].startswith(f"{stack}: aichor:nameSpace: unknown key")


def test_main_reports_manifest_problems_without_a_traceback(tmp_path, monkeypatch):
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec:\n  operator: pytorch\n  image: i\n  command: c\n  types: {Wroker: {}}\n")
    monkeypatch.chdir(ROOT)
    with pytest.raises(pulumi.RunError) as caught:
        engine.run(
            program,
            config={"aichor:manifest": str(bad)},
        )
    assert str(caught.value) == (
        f"{bad}:5: spec.types.Wroker: unknown key 'Wroker'; did you mean 'Worker'?"
    )


@pytest.mark.parametrize("option", ["providers", "provider"])
def test_a_components_provider_reaches_every_kubernetes_object(option):
    # What the own-program example of the README does: the cluster comes from the provider passed
    # in the component's opts, not from the ambient default provider.
    import pulumi_kubernetes as k8s

    from aichor_iac.components import PyTorchJob

    model = doors.validate(pytorch_manifest(1, 1))

    def program():
        provider = k8s.Provider("team-a", context="team-a")
        value = [provider] if option == "providers" else provider
        opts = pulumi.ResourceOptions(**{option: value})
        return PyTorchJob("my-run", model, Settings(namespace="team-a"), opts=opts).outputs

    objects = [r for r in engine.run(program).resources if r.is_kubernetes]
    assert objects and all(r.options.get("provider") == "team-a" for r in objects)


@pytest.mark.parametrize(("upsert", "warned"), [(None, True), (True, False)])
def test_main_warns_when_destroy_keeps_what_a_later_up_could_not_create(
    upsert, warned, monkeypatch, tmp_path
):
    config = yaml.safe_load((ROOT / "stacks/Pulumi.pytorch-tensorboard.yaml").read_text())
    config["config"].pop("kubernetes:upsertExistingObjects")
    if upsert:
        config["config"]["kubernetes:upsertExistingObjects"] = "true"
    stack_file = tmp_path / "Pulumi.pytorch-tensorboard.yaml"
    stack_file.write_text(yaml.safe_dump(config))
    warnings: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *a, **k: warnings.append(message))
    run_program(stack_file, monkeypatch)
    expected = [
        "`pulumi destroy` keeps PersistentVolumeClaim/pytorch-tb-shared; to find it again in a "
        "later `pulumi up` of this stack, run `pulumi config set "
        "kubernetes:upsertExistingObjects true` (or set aichor:deleteSharedVolume true to "
        "delete it)"
    ]
    assert warnings == (expected if warned else [])


GPU = {"count": 1, "type": "gpu", "product": "NVIDIA-L4"}


@pytest.mark.parametrize(
    ("spec", "settings", "expected"),
    [
        ({}, {}, []),
        (
            {"timeout": "5m"},
            {},
            ["test.yaml:25: spec.timeout: 300 s is shorter than aichor:peerWaitSeconds"],
        ),
        ({"timeout": "5m"}, {"peer_wait_seconds": 120}, []),
        (
            {"env": [{"name": "DATA", "value": "gs://bucket/x"}]},
            {},
            ["spec.env.0.value: gs://bucket/x looks like object storage"],
        ),
        (
            {"env": [{"name": "DATA", "value": "gs://bucket/x"}]},
            {"egress_cidrs": ["0.0.0.0/0"]},
            [],
        ),
        ({"env": [{"name": "DATA", "value": "gs://bucket/x"}]}, {"network_policy": False}, []),
        (
            {},
            {"gpu_product_label": "example.com/gpu"},
            ["aichor:gpuProductLabel: example.com/gpu is no label"],
        ),
        ({}, {"gpu_product_label": "karpenter.k8s.aws/instance-gpu-name"}, []),
    ],
)
def test_pulumi_up_logs_the_experiments_warnings(spec, settings, expected):
    """What `aichor-iac validate` warns about, `pulumi up` logs as warnings (pulumi.log.warn
    on the component), one each, with the manifest's file and line."""
    data = pytorch_manifest(**spec)
    for group in data["spec"]["types"].values():
        group["resources"]["accelerators"] = {"gpu": GPU}
    warnings = expand(data, **settings).warnings
    assert len(warnings) == len(expected), warnings
    for warning, text in zip(warnings, expected, strict=True):
        assert text in warning


def test_a_render_takes_no_stack_at_a_registration_and_leaves_the_sdk_as_it_was(monkeypatch):
    """The mock monitor drops each registration's source position: a render takes no stack for
    it (a tenth of a sweep's render), and a program's own mocks afterwards get theirs."""
    from pulumi.runtime import resource

    taken, stacks = resource._get_stack_trace, []
    monkeypatch.setattr(traceback, "extract_stack", lambda *a, **k: stacks.append(1) or [])
    rendering = engine.expand(doors.validate(pytorch_manifest()))
    assert rendering.resources and not stacks
    assert resource._get_stack_trace is taken


# In a process of its own: another test's threads (a server's, a client's) open and close
# event loops of their own meanwhile, which a count in the suite's process would see.
LOOPS_THAT_COME_AND_GO = """
import asyncio, contextlib, os, sys
from aichor_iac import doors, engine

def render_in_a_new_loop():
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        engine.expand(doors.load(sys.argv[1]))
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        asyncio.set_event_loop(None)
        loop.close()

def loops():
    found = 0  # (an epoll each)
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            found += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventpoll]"
    return found

def unkept():  # (the open loops beside those kept for the last render's worker threads,
    # which it uses: under load its executor makes more threads, each with its loop)
    return loops() - len(engine._WORKER_LOOPS)

render_in_a_new_loop()
before = unkept()
for _ in range(6):
    render_in_a_new_loop()
# (a render closes the loops of the worker threads that have ended: under load, one may end
# after the next render has begun; once they all have, the next render closes theirs)
for thread in list(engine._WORKER_LOOPS):
    thread.join(60)
render_in_a_new_loop()
print(before, unkept())
"""


def test_renders_in_loops_that_come_and_go_leave_no_descriptor_open():
    """Each worker thread's event loop is kept while the thread lives (made once, not at each
    registration) and closed once it has ended: a process that renders in event loops that
    come and go (their executors' threads with them) does not gather open descriptors."""
    example = str(ROOT / "examples" / "pytorch.yaml")
    result = subprocess.run(
        [sys.executable, "-c", LOOPS_THAT_COME_AND_GO, example], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    before, after = map(int, result.stdout.split())
    assert after == before


def _struct_values():
    """JSON as the SDK serialises a registration's inputs: unknowns, secrets anywhere."""
    from hypothesis import strategies as st
    from pulumi.runtime import rpc

    leaves = (
        st.none()
        | st.booleans()
        | st.integers(-(2**40), 2**40)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=5)
        | st.just(rpc.UNKNOWN)
    )

    def nested(inner):
        secret = inner.map(lambda v: {engine.SECRET_SIG: engine.SECRET_VALUE, "value": v})
        return (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.text(max_size=4), inner, max_size=4)
            | secret
        )

    return st.dictionaries(
        st.text(max_size=6), st.recursive(leaves, nested, max_leaves=12), max_size=5
    )


def test_a_registrations_inputs_are_read_as_the_sdk_reads_them_then_normalised():
    """`engine.plain` reads a Kubernetes object's inputs from the request in one walk: what the
    SDK's reading and then `normalise` give, secrets redacted whole at their top-level property
    (where the SDK lifts them), nulls and unknowns left out of maps, whole floats as integers."""
    from google.protobuf import struct_pb2
    from hypothesis import given, settings
    from pulumi.runtime import rpc

    @settings(max_examples=400, deadline=None)
    @given(_struct_values())
    def read_alike(inputs: dict) -> None:
        struct = struct_pb2.Struct()
        struct.update(inputs)
        assert engine.plain(struct) == engine.normalise(rpc.deserialize_properties(struct))

    read_alike()
    secret = {engine.SECRET_SIG: engine.SECRET_VALUE, "value": "x"}
    struct = struct_pb2.Struct()
    struct.update({"stringData": {"a": secret, "b": None}, "spec": {"n": 2.0, "m": [None, 1.5]}})
    assert engine.plain(struct) == {
        "stringData": {"a": engine.REDACTED},
        "spec": {"n": 2, "m": [None, 1.5]},
    }


def run_on(cluster, folder: Path, monkeypatch, config: dict) -> engine.Rendering:
    """The program, with the stack `config`, its provider's cluster `cluster` (served by
    tests/fake_kube.py)."""
    from fake_kube import kubeconfig, serving

    monkeypatch.chdir(ROOT)
    with serving(cluster) as url:
        path = folder / "kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig(url)))
        return engine.run(program, config={**config, "kubernetes:kubeconfig": str(path)})


def test_main_creates_the_trials_a_sweeps_results_on_the_cluster_allow(tmp_path, monkeypatch):
    """A sweep that learns (issue 54): each `pulumi up` reads what its trials have reported
    on the provider's cluster (tests/fake_kube.py: the first trial ended, its loss in its
    log) and creates the trials that allows, and no more."""
    from fake_kube import Cluster
    from learning_sweep import sweep_file

    path = sweep_file(tmp_path, "tpe", 1, 6)
    first, second = doors.load_all(path)
    jobs = [o for o in render([first, second]) if o["kind"] == "Job"]
    jobs = [j for j in jobs if j["metadata"]["name"].startswith(first.name)]
    for job in jobs:
        job["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    template = jobs[0]["spec"]["template"]
    labels = {
        **template["metadata"]["labels"],
        "batch.kubernetes.io/job-name": jobs[0]["metadata"]["name"],
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{first.name}-pod", "namespace": "default", "labels": labels},
        "spec": template["spec"],
        "status": {"phase": "Succeeded"},
    }
    cluster = Cluster(
        namespace="default",
        served={"batch/v1/jobs": jobs, "v1/pods": [pod], "v1/events": []},
        logs={(pod["metadata"]["name"], ""): ["2026-11-29T10:00:00Z loss=0.5"]},
    )
    rendering = run_on(cluster, tmp_path, monkeypatch, {"aichor:manifest": str(path)})
    made = sorted({r.name for r in rendering.resources if r.kind == "Job"})
    third = doors.load_all(path, {first.name: Result(SUCCEEDED, 0.5, (0.5,))})[2]
    assert made == sorted(f"{t.name}-worker" for t in (first, second, third))


def kept_trial(store: str, trial, loss: float, environ: dict) -> None:
    """A trial's pod, ended with exit 0 after printing its loss, as its keeper leaves it in
    the bucket `store` (s3://bucket/prefix)."""
    from aichor_iac.pods import keeper

    folder = Path(environ["HOME"]) / trial.name
    folder.mkdir()
    (folder / keeper.LOG).write_text(f"loss={loss}\n")
    (folder / keeper.EXITS).write_text("0\n")
    shared = keeper.Shared(str(folder))
    who = {
        "namespace": "default",
        "experiment": trial.name,
        "pod": f"{trial.name}-worker-0-x1",
        "entry": True,
        "job": f"{trial.name}-worker",
        "container": "main",
        "trial": {"sweep": trial.trial.sweep, "index": trial.trial.index, "parameters": {}},
    }
    who["trial"]["parameters"] = dict(trial.trial.values)
    bucket, _, prefix = store.removeprefix("s3://").partition("/")
    history = keeper.History(keeper.Bucket(bucket, prefix, environ), shared, who)
    history.send(shared.cursors.setdefault("history", {}), final=True)


def test_main_goes_on_from_the_trials_its_store_kept_after_a_destroy(
    tmp_path, monkeypatch, s3_store
):
    """`pulumi destroy`, then `pulumi up` of a sweep that learns with aichor:history (issue
    67): the cluster has none of its objects, the bucket its first two trials' pods (ended,
    each its loss printed). The program creates neither again and creates the two trials
    their results allow, the sweep's Secret with the first of them."""
    from fake_kube import Cluster
    from learning_sweep import ended, sweep_file
    from stores import KEYS, s3_client

    s3_client(s3_store.url).create_bucket(Bucket="kept")
    environ = {**KEYS, "AWS_ENDPOINT_URL": s3_store.url, "HOME": str(tmp_path)}
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    path = sweep_file(tmp_path, "tpe", 1, 6)
    first, second = doors.load_all(path)
    for trial, loss in ((first, 0.5), (second, 0.25)):
        kept_trial("s3://kept/runs", trial, loss, environ)
    cluster = Cluster(namespace="default", served={"batch/v1/jobs": [], "v1/pods": []})
    config = {
        "aichor:manifest": str(path),
        "aichor:history": "s3://kept/runs",
        "aichor:historySecret": "store-keys",
        "aichor:historyEndpoint": s3_store.url,
    }
    rendering = run_on(cluster, tmp_path, monkeypatch, config)
    made = sorted(r.name for r in rendering.resources if r.kind == "Job")
    asked = doors.load_all(path, ended({first.name: 0.5, second.name: 0.25}))
    assert made == sorted(f"{t.name}-worker" for t in asked[2:4])
    secrets = [r for r in rendering.resources if r.kind == "Secret"]
    assert [r.parent.rsplit("::", 1)[1] for r in secrets] == [asked[2].name]


def test_main_refuses_a_sweep_that_learns_whose_cluster_it_cannot_read(tmp_path, monkeypatch):
    from learning_sweep import sweep_file

    path = sweep_file(tmp_path, "tpe", 1, 6)
    monkeypatch.chdir(ROOT)
    missing = tmp_path / "no-kubeconfig"
    with pytest.raises(pulumi.RunError) as caught:
        engine.run(
            program,
            config={"aichor:manifest": str(path), "kubernetes:kubeconfig": str(missing)},
        )
    said = str(caught.value)
    assert said.startswith("Pulumi config: kubernetes:kubeconfig: a sweep that depends on its")


def test_main_deletes_no_trial_whose_results_it_can_no_longer_read(tmp_path, monkeypatch):
    """A third trial on the cluster, and the first two gone (their pods, and so their
    results): the program fails rather than drop the third, which Pulumi would delete."""
    from fake_kube import Cluster, kubeconfig, serving
    from learning_sweep import ended, sweep_file

    path = sweep_file(tmp_path, "tpe", 1, 6)
    first = doors.load_all(path)[0]
    third = doors.load_all(path, ended({n: 0.5 for n in first.trial.names[:1]}))[2]
    jobs = [o for o in render([third]) if o["kind"] == "Job"]
    cluster = Cluster(namespace="default", served={"batch/v1/jobs": jobs, "v1/pods": []})
    monkeypatch.chdir(ROOT)
    with serving(cluster) as url, pytest.raises(pulumi.RunError) as caught:
        config = tmp_path / "kubeconfig"
        config.write_text(yaml.safe_dump(kubeconfig(url)))
        engine.run(
            program, config={"aichor:manifest": str(path), "kubernetes:kubeconfig": str(config)}
        )
    assert f"trials {third.name} of sweep {first.trial.sweep} are on the cluster" in str(
        caught.value
    )
