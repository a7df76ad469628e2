"""The Kubernetes objects: valid against the real OpenAPI schemas (strict), deterministic,
named within DNS limits, ordered by dependencies, and shaped by `resources` and settings."""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Callable

import kubernetes_validate
import pytest
import schemas
from conftest import EXAMPLES, ROOT, expand, pytorch_manifest, with_resources
from hypothesis import given, settings
from hypothesis import strategies as st

from aichor_iac import planning
from aichor_iac.doors import validate
from aichor_iac.k8s.objects import cpu, gib
from aichor_iac.planning import naming
from aichor_iac.review import output
from aichor_iac.rules.limits import DNS_1035 as DNS_LABEL

KUBERNETES_VERSIONS = ["1.29.0", kubernetes_validate.latest_version()]

VARIANTS = {
    "gpu product + shm": dict(shmSizeGB=2, accelerators={"gpu": {"count": 2, "product": "A100"}}),
    "mig": dict(accelerators={"gpu": {"count": 1, "type": "mig-1g.10gb"}}),
    "tpu": dict(
        accelerators={
            "tpu": {"type": "tpu-v5-lite-podslice", "topology": "2x2", "tpuChipsCount": 4}
        }
    ),
    "selectors + tolerations": dict(
        extraSelectors={"pool": "training"},
        extraTolerations=[
            {
                "key": "dedicated",
                "operator": "Equal",
                "value": "ml",
                "effect": "NoExecute",
                "tolerationSeconds": 60,
            }
        ],
    ),
    "fractional": dict(cpus=0.5, cpuLimitRatio=1.5, ramRatio=1.5),
}


def renderings() -> dict[str, Callable[[], list[dict]]]:
    """Label -> how to render it: the examples, the resource variants under every wait, and
    the shapes no example has (rendered when a test asks, not when the suite is collected)."""
    found: dict[str, Callable[[], list[dict]]] = {
        path.name: functools.partial(expand, path) for path in EXAMPLES
    }
    for label, resources in VARIANTS.items():
        data = with_resources(
            pytorch_manifest(1, 3, timeout="1d2h", securityContext={"ptrace": True}), **resources
        )
        for wait in ("none", "ready", "complete"):
            found[f"{label}, wait {wait}"] = functools.partial(
                expand,
                data,
                wait=wait,
                create_namespace=True,
                namespace="ml",
                image_pull_secrets=["reg"],
                experiment_id="e1",
                output_path="/out/$(not-expanded)",
            )
    found["single worker"] = functools.partial(expand, pytorch_manifest(None, 3))
    # TensorBoard's own volume and log shipper, Jupyter, RDMA NICs, TPU slices, jobset
    rdma = {"rdma": {"devices": ["sriov_a"]}, "accelerators": {"gpu": {"count": 8}}}
    found["tensorboard volume + jupyter + rdma"] = functools.partial(
        expand,
        with_resources(
            pytorch_manifest(1, 2, tensorboard={"enabled": True}, debug={"jupyter": True}),
            **rdma,
        ),
    )
    for path in sorted((ROOT / "tests" / "aichor").glob("*.yaml")):
        found[f"aichor/{path.name}"] = functools.partial(expand, path)
    return found


RENDERINGS = renderings()


@functools.cache
def objects_of(label: str) -> list[dict]:
    return RENDERINGS[label]().objects


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("label", sorted(RENDERINGS))
def test_every_object_is_valid_for_kubernetes(label, version):
    for obj in objects_of(label):
        schemas.validate(obj, version)


JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "a"},
    "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}},
}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(
    "obj",
    [
        JOB,
        {**JOB, "spek": {}},  # strict: no field the schema does not name
        {**JOB, "spec": {"template": {"spec": {"containers": [{"name": "a", "image": 1}]}}}},
        {**JOB, "spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}},  # no name
        {**JOB, "kind": "Jobb"},  # no schema
    ],
    ids=["valid", "unknown-field", "wrong-type", "missing-field", "unknown-kind"],
)
def test_the_suites_schema_check_is_kubernetes_validates(obj, version):
    """tests/schemas.py (each kind's validator built once) says what kubernetes_validate says."""

    def outcome(validate: Callable[[], object]) -> str:
        try:
            validate()
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as e:
            return f"{type(e).__name__}: {e}"
        return "valid"

    expected = outcome(lambda: kubernetes_validate.validate(obj, version, strict=True))
    assert outcome(lambda: schemas.validate(obj, version)) == expected
    assert (expected == "valid") is (obj is JOB)


# `aichor-iac render` of each example, one after the other, in one process of its own
CLI_RENDERS = """
import sys
from aichor_iac.cli import main
for path in sys.argv[1:]:
    assert main(["render", path]) == 0
    print("\\0", flush=True)
"""


def test_two_renders_are_byte_identical():
    """The CLI in another process (another hash seed) renders each example to the bytes this
    one does."""
    paths = [str(path) for path in EXAMPLES]
    cli = subprocess.run(
        [sys.executable, "-c", CLI_RENDERS, *paths], capture_output=True, check=True
    ).stdout
    for path, first in zip(EXAMPLES, cli.split(b"\0\n")[:-1], strict=True):
        second = output.to_yaml(expand(path, name=None).objects).encode()
        assert first == second and first, path


def test_service_is_headless_and_resolves_peers_before_ready(render):
    service = render(pytorch_manifest(1, 2))["Service/exp"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["ports"] == [
        {"name": "pytorch", "port": 23456, "protocol": "TCP", "targetPort": 23456}
    ]
    pod_labels = render(pytorch_manifest(1, 2))["Job/exp-worker"]["spec"]["template"]["metadata"][
        "labels"
    ]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_jobs_are_indexed_with_stable_hosts_and_limits(render):
    data = pytorch_manifest(1, 5, timeout="6h", restartPolicy={"backoffLimit": 3})
    job = render(data)["Job/exp-worker"]
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 5, 5)
    assert spec["backoffLimit"] == 3 and spec["activeDeadlineSeconds"] == 6 * 3600
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == "exp" and pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert "initContainers" not in pod  # (the wait for peers runs in the main container)
    for container in pod["containers"]:
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }
    assert job["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "worker"


def test_accelerators_selectors_and_shm(render):
    data = with_resources(pytorch_manifest(None, 2), **VARIANTS["gpu product + shm"])
    rendered = render(data, gpu_product_label="example.com/gpu", progress=False)
    pod = rendered["Job/exp-worker"]["spec"]["template"]["spec"]
    main = pod["containers"][0]
    assert main["resources"]["limits"] == {"cpu": "8", "memory": "14Gi", "nvidia.com/gpu": "2"}
    assert pod["nodeSelector"] == {"example.com/gpu": "A100"}
    assert pod["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}
    ]
    assert main["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]

    mig = render(with_resources(pytorch_manifest(None, 1), **VARIANTS["mig"]))
    limits = mig["Job/exp-worker"]["spec"]["template"]["spec"]["containers"][0]["resources"][
        "limits"
    ]
    assert limits["nvidia.com/mig-1g.10gb"] == "1" and "nvidia.com/gpu" not in limits

    tpu = render(with_resources(pytorch_manifest(None, 1), **VARIANTS["tpu"]))
    pod = tpu["Job/exp-worker"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["google.com/tpu"] == "4"
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x2",
    }

    extra = render(with_resources(pytorch_manifest(None, 1), **VARIANTS["selectors + tolerations"]))
    pod = extra["Job/exp-worker"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "training"}
    assert pod["tolerations"] == [
        {
            "key": "dedicated",
            "operator": "Equal",
            "value": "ml",
            "effect": "NoExecute",
            "tolerationSeconds": 60,
        }
    ]


def test_ptrace_adds_only_that_capability(render):
    pod = render(pytorch_manifest(1, 0, securityContext={"ptrace": True}))["Job/exp-master"]
    caps = pod["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]
    assert caps == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}


def test_platform_env_comes_from_settings_and_is_not_expanded(render):
    job = render(pytorch_manifest(1, 0), experiment_id="e-1", output_path="/out/$(HOME)")[
        "Job/exp-master"
    ]
    env = {
        e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["AICHOR_EXPERIMENT_ID"] == "e-1"
    assert env["AICHOR_OUTPUT_PATH"] == "/out/$$(HOME)"  # Kubernetes turns $$ into $
    assert "AICHOR_INPUT_PATH" not in env


@pytest.mark.parametrize(
    ("wait", "master", "worker"),
    [
        ("none", {"pulumi.com/skipAwait": "true"}, {"pulumi.com/skipAwait": "true"}),
        (
            "ready",
            {"pulumi.com/waitFor": "jsonpath={$[?@.ready==1 || @.succeeded==1]}"},
            {"pulumi.com/waitFor": "jsonpath={$[?@.ready==3 || @.succeeded==3]}"},
        ),
        ("complete", {}, {"pulumi.com/skipAwait": "true"}),
    ],
)
def test_await_annotations_follow_the_wait_setting(wait, master, worker):
    rendering = expand(pytorch_manifest(1, 3, timeout="2h"), wait=wait)
    jobs = {r.name: r for r in rendering.resources if r.kind == "Job"}
    background = {"pulumi.com/deletionPropagationPolicy": "background"}
    assert jobs["exp-master"].inputs["metadata"].get("annotations") == {**master, **background}
    assert jobs["exp-worker"].inputs["metadata"].get("annotations") == {**worker, **background}
    timeouts = jobs["exp-master"].options.get("customTimeouts")
    # readiness: peerWaitSeconds (1800) before the 2h timeout; completion: past its deadline
    seconds = {"none": None, "ready": 1800, "complete": 7200 + 300}[wait]
    assert timeouts == (seconds and {"create": f"{seconds}s", "update": f"{seconds}s"})
    service = next(r for r in rendering.resources if r.kind == "Service")
    assert service.inputs["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}


def test_resources_are_created_in_dependency_order():
    rendering = expand(pytorch_manifest(1, 2), create_namespace=True, namespace="ml")
    order = [(r.type, r.name) for r in rendering.resources]
    assert order == [
        ("aichor:index:PyTorchJob", "exp"),
        ("kubernetes:core/v1:Namespace", "namespace-ml"),
        # the progress receiver's credentials (pulumi-tls, pulumi-random), in its Secret
        ("tls:index/privateKey:PrivateKey", "exp-progress-ca-key"),
        ("tls:index/selfSignedCert:SelfSignedCert", "exp-progress-ca"),
        ("tls:index/privateKey:PrivateKey", "exp-progress-key"),
        ("tls:index/certRequest:CertRequest", "exp-progress-request"),
        ("tls:index/locallySignedCert:LocallySignedCert", "exp-progress-cert"),
        ("random:index/randomPassword:RandomPassword", "exp-progress-token"),
        ("kubernetes:core/v1:Secret", "exp-secret"),
        ("kubernetes:networking.k8s.io/v1:NetworkPolicy", "exp-network-policy"),
        ("kubernetes:core/v1:Service", "exp-service"),
        ("kubernetes:batch/v1:Job", "exp-master"),
        ("kubernetes:batch/v1:Job", "exp-worker"),
    ]
    urns = {r.name: r.urn for r in rendering.resources}
    worker = rendering.resources[-1]
    before = ("namespace-ml", "exp-secret", "exp-network-policy", "exp-service", "exp-master")
    assert set(worker.dependencies) == {urns[n] for n in before}
    secret = next(r for r in rendering.resources if r.name == "exp-secret")
    made = ("exp-progress-ca", "exp-progress-cert", "exp-progress-key", "exp-progress-token")
    assert set(secret.dependencies) == {urns[n] for n in ("namespace-ml", *made)}
    assert all(r.parent == urns["exp"] for r in rendering.resources[1:])
    assert all(r.options["deleteBeforeReplace"] for r in rendering.resources[1:])
    assert all(o["metadata"]["namespace"] == "ml" for o in rendering.objects[1:])


@pytest.mark.parametrize(
    "raw",
    [
        "exp",
        "My_Experiment.v2",
        "9lives",
        "a" * 80,
        "x" * 56 + "-y",
        "-weird--name-",
    ],
)
def test_experiment_names_keep_every_host_a_dns_label(raw):
    model = validate(pytorch_manifest(1, 1000))
    name = planning.blueprint(model, name=raw).names.experiment
    assert name == planning.blueprint(model, name=raw).names.experiment  # deterministic
    for group in planning.blueprint(model, name=raw).plan.groups:
        assert DNS_LABEL.match(f"{name}-{group.role}-{group.count - 1}")
        assert len(f"{name}-{group.role}-{group.count - 1}") <= 63
    if len(raw) <= 40 and raw == raw.lower() and DNS_LABEL.match(raw):
        assert name == raw


@pytest.mark.parametrize(
    "names",
    [("a_b", "a.b", "a-b", "a b"), ("名前", "🚀", "x"), ("..", "x"), ("exp", "-exp-", "Exp!")],
)
def test_names_that_clean_alike_name_different_objects(names):
    roles = [("worker", 4)]
    cleaned = [naming.experiment_name(n, roles) for n in names]
    assert len(set(cleaned)) == len(names), cleaned
    assert all(DNS_LABEL.match(c) for c in cleaned)


def test_long_names_differ_by_hash():
    roles = [("master", 1), ("worker", 1)]
    a, b = (naming.experiment_name(("n" * 70) + s, roles) for s in ("a", "b"))
    assert a != b and a[:40] == b[:40] == "n" * 40


@given(st.decimals(min_value="0.001", max_value="512", places=3))
@settings(max_examples=200, deadline=None)
def test_cpu_quantities_are_exact(value):
    quantity = cpu(float(value))
    parsed = int(quantity[:-1]) / 1000 if quantity.endswith("m") else int(quantity)
    assert abs(parsed - float(value)) < 0.0005


@given(st.floats(min_value=0.01, max_value=4096, allow_nan=False))
@settings(max_examples=200, deadline=None)
def test_memory_quantities_round_to_mebibytes(value):
    quantity = gib(value)
    parsed = int(quantity[:-2]) * (1024 if quantity.endswith("Gi") else 1)
    assert abs(parsed - value * 1024) <= 0.5


def test_render_writes_one_file_per_object(tmp_path):
    from aichor_iac import cli

    assert cli.main(["render", str(ROOT / "examples/pytorch.yaml"), "-o", str(tmp_path)]) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [
        "01-secret-pytorch-ddp-secret.yaml",  # (the progress receiver's credentials)
        "02-networkpolicy-pytorch-ddp.yaml",
        "03-service-pytorch-ddp.yaml",
        "04-job-pytorch-ddp-master.yaml",
        "05-job-pytorch-ddp-worker.yaml",
    ]


def test_disruptions_do_not_count_as_failures():
    # A node drain or a preemption (condition DisruptionTarget) replaces the pod; only the
    # program's failures count against backoffLimit.
    for job in (o for o in expand(pytorch_manifest(1, 2)).objects if o["kind"] == "Job"):
        assert job["spec"]["podFailurePolicy"] == {
            "rules": [
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                }
            ]
        }
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"  # required by it


@pytest.mark.parametrize(
    ("wait", "settings", "master", "worker"),
    [
        ("ready", {}, 1800, 1800),  # aichor:peerWaitSeconds
        ("complete", {}, 86400, None),  # aichor:waitTimeoutSeconds; the worker is not awaited
        ("complete", {"wait_timeout_seconds": 3 * 86400}, 3 * 86400, None),
    ],
)
def test_no_await_falls_back_to_the_providers_ten_minutes(wait, settings, master, worker):
    rendering = expand(pytorch_manifest(1, 2), wait=wait, **settings)
    jobs = {r.name: r.options.get("customTimeouts") for r in rendering.resources if r.kind == "Job"}
    for role, seconds in (("master", master), ("worker", worker)):
        assert jobs[f"exp-{role}"] == (
            seconds and {"create": f"{seconds}s", "update": f"{seconds}s"}
        )
