"""Progress reports on a cluster (issue 52, `aichor:progress`): every training container of
every door's inputs gets Trainer's three variables and its files; the entry point's pod (and
only it) the receiver as a native sidecar; the experiment's Secret the CA, the certificate, its
key and the token. Every object stays namespace-scoped and valid (strict schemas); with the
setting off, nothing of it is there."""

from __future__ import annotations

from pathlib import Path

import pytest
import schemas
from conftest import ROOT

from aichor_iac import doors, engine
from aichor_iac.frameworks.base import INDEX_VAR
from aichor_iac.k8s import progress
from aichor_iac.problems import ManifestError
from aichor_iac.settings import Settings, load_stack_file

FOLDERS = ("aichor", "kubeflow", "kuberay", "jobset", "trainer", "katib")
INPUTS = sorted((ROOT / "examples").glob("*.yaml")) + [
    path for folder in FOLDERS for path in sorted((ROOT / "tests" / folder).glob("*.yaml"))
]
NAMESPACED = {
    "Secret",
    "ConfigMap",
    "Service",
    "Job",
    "Deployment",
    "NetworkPolicy",
    "PersistentVolumeClaim",
    "PodGroup",
    "ServiceAccount",
    "Role",
    "RoleBinding",
}


def rendered(path: Path, **update: object) -> list[dict]:
    stack = ROOT / "stacks" / f"Pulumi.{path.stem}.yaml"
    settings = load_stack_file(stack)[0] if stack.exists() else Settings()
    models = doors.load_all(path)
    settings = settings.model_copy(update=update)
    if len(models) == 1:
        return engine.expand(models[0], settings, name="exp").objects
    return engine.expand(list(models), settings).objects


def training_containers(job: dict) -> list[dict]:
    """A Job's containers that run the experiment's command (not a user's own sidecars):
    those the operator gave the replica's index."""
    containers = job["spec"]["template"]["spec"]["containers"]
    found = [c for c in containers if any(e["name"] == INDEX_VAR for e in c.get("env", []))]
    assert found, job["metadata"]["name"]
    return found


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_training_container_of_every_door_gets_the_protocol(path: Path) -> None:
    try:
        objects = rendered(path)  # (on by default)
    except ManifestError:
        pytest.skip("an input refused as written (its own tests say why)")
    jobs = [o for o in objects if o["kind"] == "Job"]
    secrets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
    urls, holding = set(), set()  # (the Secrets the files come from: an experiment's, a sweep's)
    for job in jobs:
        spec = job["spec"]["template"]["spec"]
        for container in training_containers(job):
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            assert env[progress.ENV_CA] == "/var/run/secrets/kubeflow/trainer/ca.crt"
            assert env[progress.ENV_TOKEN] == "/var/run/secrets/kubeflow/trainer/token"
            urls.add(env[progress.ENV_URL])
            mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
            assert mounts[progress.TRAINER_FILES.name] == progress.MOUNT_PATH
            assert progress.RECEIVER_FILES.name not in mounts  # (the key: the sidecar's)
        volumes = {v["name"]: v for v in spec["volumes"]}
        (source,) = volumes[progress.TRAINER_FILES.name]["projected"]["sources"]
        holding.add(source["secret"]["name"])
    receivers = [
        job
        for job in jobs
        for c in job["spec"]["template"]["spec"].get("initContainers", [])
        if c["name"] == progress.CONTAINER
    ]
    experiments = {job["metadata"]["labels"]["app.kubernetes.io/instance"] for job in jobs}
    assert len(receivers) == len(experiments) == len(urls)  # one receiver per experiment
    for receiving in receivers:
        sidecar = next(
            c
            for c in receiving["spec"]["template"]["spec"]["initContainers"]
            if c["name"] == progress.CONTAINER
        )
        assert sidecar["restartPolicy"] == "Always"
        security = sidecar["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert sidecar["resources"]["requests"] == sidecar["resources"]["limits"]
    # The receiver's port: the experiment's pods only (its own NetworkPolicy, else one for it
    # that selects the receiver's pods and leaves their other ports as they were)
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    for receiving in receivers:
        labels = receiving["spec"]["template"]["metadata"]["labels"]
        selecting = [
            p for p in policies if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        ]
        assert selecting, receiving["metadata"]["name"]
        for policy in selecting:
            ports = [port for rule in policy["spec"]["ingress"] for port in rule.get("ports", [])]
            assert not any(
                p["port"] <= progress.PORT <= p.get("endPort", p["port"]) and p["protocol"] == "TCP"
                for p in ports
            )
    for secret in (secrets[name] for name in holding):
        assert set(progress.KEYS) <= set(secret["stringData"])
        assert all(secret["stringData"][key] == "[secret]" for key in progress.KEYS)
    for obj in objects:
        assert obj["kind"] in NAMESPACED or obj["kind"] == "Namespace"
        if obj["kind"] != "PodGroup":
            schemas.validate(obj)


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_without_the_setting_nothing_of_it_is_rendered(path: Path) -> None:
    text = str(rendered(path, progress=False))
    for word in (progress.ENV_URL, progress.TRAINER_FILES.name, progress.CA, "aichor-progress"):
        assert word not in text


def test_a_sweeps_trials_share_one_ca_certificate_and_token() -> None:
    """A sweep of 1,000 trials must not make 6,000 Pulumi resources: one CA, one certificate
    naming every trial's receiver, one token."""
    (*models,) = doors.load_all(ROOT / "examples" / "sweep.yaml")
    rendering = engine.expand(models, Settings())
    made = [r for r in rendering.resources if r.type.startswith(("tls:", "random:"))]
    made_for = ("ca-key", "ca", "key", "request", "cert", "token")
    assert sorted(r.name for r in made) == sorted(f"lr-momentum-progress-{m}" for m in made_for)
    (request,) = (r for r in made if r.type == "tls:index/certRequest:CertRequest")
    urls = {
        e["value"]
        for job in rendering.objects
        if job["kind"] == "Job"
        for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
        if e["name"] == progress.ENV_URL
    }
    assert len(urls) == len(models) == 6
    assert sorted(request.inputs["dnsNames"]) == sorted(
        url.split("/")[2].split(":")[0] for url in urls
    )


def test_a_sweep_has_one_secret_and_one_network_policy_its_trials_wait_for() -> None:
    """The credentials in one Secret of the sweep's and one NetworkPolicy, made with its first
    trial (not two objects per trial): every trial's pods mount that Secret, every later
    trial's objects are created after both, and the policy admits the sweep's pods alone to
    the receivers' port of every trial's entry pods. An experiment beside it keeps its own."""
    (*trials,) = doors.load_all(ROOT / "examples" / "sweep.yaml")
    (alone,) = doors.load_all(ROOT / "examples" / "pytorch.yaml")
    rendering = engine.expand([*trials, alone], Settings())
    objects = [r for r in rendering.resources if r.is_kubernetes]
    secrets = {r.inputs["metadata"]["name"]: r for r in objects if r.kind == "Secret"}
    policies = {r.inputs["metadata"]["name"]: r for r in objects if r.kind == "NetworkPolicy"}
    shared, own = "lr-momentum-sweep-progress", alone.name_in("dev")
    assert set(secrets) == {shared, f"{own}-secret"}
    assert set(policies) == {shared, own}  # (its own: the experiment's NetworkPolicy)
    assert set(secrets[shared].inputs["stringData"]) == set(progress.KEYS)
    first, *later = (f"::{trial.name_in('dev')}" for trial in trials)
    sweep_objects = {secrets[shared].urn, policies[shared].urn}
    assert all(r.parent.endswith(first) for r in (secrets[shared], policies[shared]))
    of_later = [r for r in objects if r.parent.endswith(tuple(later))]
    assert len(of_later) == 5 * 2  # (each trial's Service and Job)
    assert all(sweep_objects <= set(r.dependencies) for r in of_later)
    sweep = {"app.kubernetes.io/part-of": "aichor", "katib.kubeflow.org/experiment": "lr-momentum"}
    jobs = [r for r in objects if r.kind == "Job" and r.parent.endswith((first, *later))]
    assert len(jobs) == 6
    for job in jobs:
        pod = job.inputs["spec"]["template"]
        assert sweep.items() <= pod["metadata"]["labels"].items()
        mounted = {
            source["secret"]["name"]
            for volume in pod["spec"]["volumes"]
            for source in volume.get("projected", {}).get("sources", [])
            if "secret" in source
        }
        assert mounted == {shared}
    policy = policies[shared].inputs["spec"]
    assert policy["podSelector"]["matchLabels"] == {
        **sweep,
        "app.kubernetes.io/component": "worker",
    }
    assert policy["ingress"][0] == {"from": [{"podSelector": {"matchLabels": sweep}}]}
