"""Progress reports (issue 52; docs/architecture.md, "Progress reports"): what Kubeflow
Trainer's controller gives a training container under its `TrainJobStatus` gate, given here to
every replica of every experiment when `aichor:progress` is on; and the receiver
(`receiver.py`) as a native sidecar of the entry point's pod.

Every replica gets `KUBEFLOW_TRAINER_SERVER_URL` (the entry pod's host, its port, Trainer's
path), `_CA_CERT` and `_TOKEN` (files at Trainer's reserved path, from the experiment's
Secret). The Secret also holds the receiver's certificate (for that host, signed by the CA)
and key, which only the sidecar mounts. A sweep's trials share one set, in one Secret of the
sweep's, and one NetworkPolicy (`sweep`).
"""

from __future__ import annotations

from dataclasses import replace

from .. import pods
from ..experiment.trial import Trial
from ..frameworks import Group
from ..frameworks.base import File, Mount
from . import kinds, services
from .context import Context, container_security

CONTAINER = "progress"
PORT = 28443  # the receiver's
# What Trainer's controller gives a training container: the variables its clients read, and
# the CA and token files at its reserved path
ENV_URL = "KUBEFLOW_TRAINER_SERVER_URL"
ENV_CA = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
ENV_TOKEN = "KUBEFLOW_TRAINER_SERVER_TOKEN"
MOUNT_PATH = "/var/run/secrets/kubeflow/trainer"
CA_FILE, TOKEN_FILE = "ca.crt", "token"
# The experiment's Secret's keys (the component makes them; a local run too)
CA, CERT, KEY, TOKEN = "progress-ca.crt", "progress-tls.crt", "progress-tls.key", "progress-token"
KEYS = (CA, CERT, KEY, TOKEN)
# Trainer's reserved volume and path (its files: ca.crt and token); the receiver's own files
TRAINER_FILES = Mount(
    "kubeflow-trainer-token",
    MOUNT_PATH,
    (File("secret", CA, CA_FILE), File("secret", TOKEN, TOKEN_FILE)),
)
RECEIVER_FILES = Mount(
    "aichor-progress",
    "/var/run/aichor/progress",
    tuple(
        File("secret", key, path)
        for key, path in ((CERT, "tls.crt"), (KEY, "tls.key"), (TOKEN, "token"))
    ),
)
# The sidecar's share of the entry pod: requests equal to limits, so that a Guaranteed pod
# (whole GPUs, pinned CPUs) stays Guaranteed. 1,000 pods reporting every 5 s take a fifth of a
# core and 43 MB (benchmarks/progress.py).
RESOURCES = {"cpu": "250m", "memory": "128Mi"}
# Its first process, a shell that handles TERM from its first line (a container's first
# process drops a TERM it has no handler for: the pod's end would wait for the grace period's
# KILL, 30 s, as when a main container ends while python3 still imports). It runs the
# receiver where python3 is, and passes a TERM on to it; else it idles until TERM (a native
# sidecar that exits is restarted forever); on an Indexed Job's other pods (the same
# template), it idles too. Whatever it does, it writes READY once there is nothing to wait
# for (the receiver listens, or there is none), which its startup probe waits for.
_RUN = """\
trap 'exit 0' TERM
if [ "${JOB_COMPLETION_INDEX:-0}" = 0 ]; then
  if command -v python3 >/dev/null 2>&1; then
    python3 -c "$1" &
    receiver=$!
    trap 'kill -TERM "$receiver" 2>/dev/null; wait "$receiver" 2>/dev/null; exit 0' TERM
    wait "$receiver"
    code=$?
    [ ! -e "$AICHOR_PROGRESS_READY" ] || exit "$code"
    echo "aichor: the progress receiver ended ($code) before it listened: no progress reports"
  else
    echo "aichor: no python3 in the image: no progress reports"
  fi
fi
: > "$AICHOR_PROGRESS_READY" 2>/dev/null
while :; do sleep 1 & wait $!; done
"""
# Written by the receiver once it listens (or by its shell, where there is nothing to wait
# for): a native sidecar's startup probe holds the pod's next containers until it passes
# (Kubernetes 1.29+, KEP-753), so that a report posted at a training container's first instant
# is received (Trainer's raw-HTTP example posts once, with no retry)
READY = "/tmp/aichor-progress-ready"
STARTUP = [
    "/bin/sh",
    "-c",
    '[ "${JOB_COMPLETION_INDEX:-0}" != 0 ] || [ -e "$AICHOR_PROGRESS_READY" ]',
]


def status_path(namespace: str, name: str) -> str:
    """The URL path of an experiment's reports, as Trainer's (`statusserver.StatusUrl`)."""
    return f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def enabled(ctx: Context) -> bool:
    return ctx.settings.progress


def sweep(ctx: Context) -> Trial | None:
    """The trial the experiment is, when the receiver's credentials are its sweep's: a sweep's
    trials share one set (`credentials.sweep_credentials`), in one Secret, and one
    NetworkPolicy. Its first trial creates both; the others' objects wait for them
    (`components.experiments`): two objects for a sweep of 1,000 trials, not 2,000."""
    return ctx.blueprint.manifest.trial if enabled(ctx) else None


def creates_sweep_objects(ctx: Context) -> bool:
    return (trial := sweep(ctx)) is not None and trial.index == trial.first


def secret_name(ctx: Context) -> str:
    """The Secret of the receiver's credentials: the experiment's, or its sweep's."""
    trial = sweep(ctx)
    return f"{trial.sweep}-sweep-progress" if trial else ctx.names.secret


def sweep_secret(ctx: Context, data: dict[str, str]) -> dict:
    """The sweep's Secret of the receiver's credentials (the component puts their values in)."""
    return dict(metadata=_sweep_metadata(ctx), type="Opaque", string_data=data)


def _sweep_metadata(ctx: Context) -> kinds.ObjectMetaArgs:
    """An object of the trial's sweep: named for the sweep, with the trial's labels but the
    one naming the trial."""
    labels = ctx.labels(replica=False)
    del labels["app.kubernetes.io/instance"]
    return kinds.ObjectMetaArgs(name=secret_name(ctx), namespace=ctx.names.namespace, labels=labels)


def host(ctx: Context) -> str:
    """The entry point's first pod: where the receiver listens (its certificate's name)."""
    return ctx.names.host(ctx.plan.entry_point, 0)


def url(ctx: Context) -> str:
    path = status_path(ctx.names.namespace, ctx.names.experiment)
    return f"https://{host(ctx)}:{PORT}{path}"


def env(ctx: Context) -> dict[str, str]:
    """The three variables of Trainer's protocol (none when progress is off)."""
    if not enabled(ctx):
        return {}
    return {
        ENV_URL: url(ctx),
        ENV_CA: f"{MOUNT_PATH}/{CA_FILE}",
        ENV_TOKEN: f"{MOUNT_PATH}/{TOKEN_FILE}",
    }


def mounts(ctx: Context) -> list[Mount]:
    """A training container's files of the protocol (the CA and the token)."""
    return [replace(TRAINER_FILES, secret_name=secret_name(ctx))] if enabled(ctx) else []


def receives(ctx: Context, group: Group, replica: int | None = None) -> bool:
    """Whether the group's pods (of `replica`'s Job) carry the receiver: the entry point's.
    Their pod has the receiver's files as a volume too, which only the sidecar mounts."""
    return enabled(ctx) and group.role == ctx.plan.entry_point and replica in (None, 0)


def receiver_parts(
    ctx: Context, group: Group, replica: int | None = None
) -> tuple[list[kinds.VolumeArgs], list[kinds.ContainerArgs]]:
    """What the receiver adds to the pods of the group (of `replica`'s Job): its files'
    volume and its sidecar, on the entry point's; nothing elsewhere."""
    if not receives(ctx, group, replica):
        return [], []
    files = replace(RECEIVER_FILES, secret_name=secret_name(ctx))
    return [services.projected_volume(ctx.names, files)], [sidecar(ctx)]


def sidecar(ctx: Context) -> kinds.ContainerArgs:
    """The receiver's container: the experiment's image unless `aichor:progressImage` names
    one; its settings in its environment, its files mounted; the security of the project's
    other containers."""
    path = status_path(ctx.names.namespace, ctx.names.experiment)
    files = RECEIVER_FILES.path
    settings = {
        "AICHOR_PROGRESS_PORT": str(PORT),
        "AICHOR_PROGRESS_CERT": f"{files}/tls.crt",
        "AICHOR_PROGRESS_KEY": f"{files}/tls.key",
        "AICHOR_PROGRESS_TOKEN": f"{files}/token",
        "AICHOR_PROGRESS_PATH": path,
        "AICHOR_PROGRESS_READY": READY,
    }
    return kinds.ContainerArgs(
        name=CONTAINER,
        image=ctx.settings.progress_image or ctx.spec.image,
        restart_policy="Always",
        command=["/bin/sh", "-c", _RUN, CONTAINER, pods.source("receiver")],
        env=[kinds.EnvVarArgs(name=k, value=v) for k, v in settings.items()],
        ports=[kinds.ContainerPortArgs(name=CONTAINER, container_port=PORT)],
        # (each second for up to 2 minutes: a slow image's python3 under load; then the
        # kubelet restarts it, and the training containers still wait)
        startup_probe=kinds.ProbeArgs(
            exec_=kinds.ExecActionArgs(command=STARTUP),
            period_seconds=1,
            timeout_seconds=5,
            failure_threshold=120,
        ),
        resources=kinds.ResourceRequirementsArgs(requests=RESOURCES, limits=RESOURCES),
        security_context=container_security(ctx.spec),
        volume_mounts=[
            kinds.VolumeMountArgs(name=RECEIVER_FILES.name, mount_path=files, read_only=True)
        ],
    )


def network_policy(ctx: Context) -> dict:
    """Where the experiment has no NetworkPolicy of its own: the receiver's port reached by
    the experiment's pods only (a sweep's: its trials'), every other port of the entry point's
    pods as before (from anywhere: the ports below and above it, `endPort` ranges, Kubernetes
    1.25+)."""
    selector, metadata = ctx.experiment_selector(), None
    if trial := sweep(ctx):
        selector = {"app.kubernetes.io/part-of": "aichor", trial.label: trial.sweep}
        metadata = _sweep_metadata(ctx)
    own = kinds.NetworkPolicyPeerArgs(pod_selector=kinds.LabelSelectorArgs(match_labels=selector))
    below, above = (1, PORT - 1), (PORT + 1, 65535)
    others = [
        kinds.NetworkPolicyPortArgs(protocol="TCP", port=low, end_port=high)
        for low, high in (below, above)
    ] + [
        kinds.NetworkPolicyPortArgs(protocol=protocol, port=1, end_port=65535)
        for protocol in ("UDP", "SCTP")
    ]
    entry = {**selector, "app.kubernetes.io/component": ctx.plan.entry_point}
    return dict(
        metadata=metadata or ctx.metadata(f"{ctx.names.experiment}-progress", replica=False),
        spec=kinds.NetworkPolicySpecArgs(
            pod_selector=kinds.LabelSelectorArgs(match_labels=entry),
            policy_types=["Ingress"],
            ingress=[
                kinds.NetworkPolicyIngressRuleArgs(from_=[own]),
                kinds.NetworkPolicyIngressRuleArgs(ports=others),
            ],
        ),
    )
