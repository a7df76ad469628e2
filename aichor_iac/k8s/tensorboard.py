"""TensorBoard for an experiment (`spec.tensorboard.enabled`): a Deployment and a ClusterIP
Service `<exp>-tensorboard` reading the experiment's log location (`planning.TensorboardLogs`).

With no log location configured, TensorBoard gets a ReadWriteOnce volume of its own, which is
all a plain cluster's default storage class offers, and nothing else mounts it: each replica
writes `AICHOR_TENSORBOARD_PATH` to a local `emptyDir`, and a native sidecar (the program
`pods/tensorboard_shipper.py`) sends the bytes added to each file to a receiver beside
TensorBoard (`pods/tensorboard_receiver.py`), which appends them at their offset (resends are
harmless). So TensorBoard runs on any node, serves the logs while the experiment runs and
after it has ended (until `pulumi destroy`), a replica that restarts loses none of what it
shipped, and any replica may write (rank 0, every jobset Job).
"""

from __future__ import annotations

from .. import pods
from . import kinds, services, shell
from .awaits import SKIP_AWAIT
from .context import Context, container_security

PORT = 6006  # TensorBoard
LOGS_PORT = 6007  # the log receiver
VOLUME = "tensorboard-logs"
SHIPPER_CONTAINER = "tensorboard-logs"
SHIP_INTERVAL_SECONDS = 5
FINAL_SHIP_SECONDS = 20  # within the pod's 30 s termination grace period

# The sidecar's first process. As a container's first process, a shell (and then Python, until
# the shipper sets its handler) drops a TERM it has no handler for, and the kubelet sends one:
# a sidecar stopped early ran on until the grace period's KILL, its last logs lost. So this
# shell takes TERM from its first line and hands it on, again each second, until the shipper
# has ended; the shipper starts with TERM ignored, so one that comes first does not kill it.
# Without python3 the sidecar idles (a native sidecar that exits would be restarted forever).
_SHIP = """\
stopping=
trap 'stopping=1' TERM
if ! command -v python3 >/dev/null 2>&1; then
  echo "aichor: no python3 in the image: TensorBoard logs are not shipped"
  while [ -z "$stopping" ]; do sleep 1; done
  exit 0
fi
(trap '' TERM; exec python3 -c "$1" "$2" "$3" "$4" "$5") &
shipper=$!
until [ -n "$stopping" ]; do wait "$shipper"; ended=$?; [ -n "$stopping" ] || exit "$ended"; done
(while kill -TERM "$shipper" 2>/dev/null; do sleep 1; done) &
wait "$shipper"
"""


def name(ctx: Context) -> str:
    return f"{ctx.names.experiment}-tensorboard"


def logs(ctx: Context):
    return ctx.blueprint.tensorboard


def has_volume(ctx: Context) -> bool:
    """TensorBoard has a volume of its own that replicas ship their logs to."""
    return logs(ctx) is not None and logs(ctx).source == "volume"


def _await(ctx: Context) -> dict[str, str]:
    return {} if ctx.settings.wait == "ready" else {SKIP_AWAIT: "true"}


def log_volume(ctx: Context) -> dict:
    """TensorBoard's own ReadWriteOnce claim; never awaited (a WaitForFirstConsumer class
    binds it once TensorBoard's pod is scheduled)."""
    return dict(
        metadata=ctx.metadata(name(ctx), "tensorboard", {SKIP_AWAIT: "true"}, replica=False),
        spec=kinds.PersistentVolumeClaimSpecArgs(
            access_modes=["ReadWriteOnce"],
            storage_class_name=ctx.settings.tensorboard_storage_class,
            resources=kinds.VolumeResourceRequirementsArgs(
                requests={"storage": f"{ctx.settings.tensorboard_volume_gb}Gi"}
            ),
        ),
    )


def deployment(ctx: Context) -> dict:
    """TensorBoard on the log location; with its own volume, the log receiver beside it. One
    pod, replaced by deleting it first (`Recreate`): a ReadWriteOnce volume has one node."""
    labels = ctx.labels("tensorboard", replica=False)
    path = logs(ctx).path
    if has_volume(ctx):
        claim = kinds.PersistentVolumeClaimVolumeSourceArgs(claim_name=name(ctx))
        volumes = [kinds.VolumeArgs(name=VOLUME, persistent_volume_claim=claim)]
        mounts = [kinds.VolumeMountArgs(name=VOLUME, mount_path=path, read_only=True)]
    else:
        volumes, mounts = services.storage(ctx, read_only=True)
    containers = [_tensorboard(ctx, mounts)]
    if has_volume(ctx):
        containers.append(_receiver(ctx))
    return dict(
        metadata=ctx.metadata(name(ctx), "tensorboard", _await(ctx), replica=False),
        spec=kinds.DeploymentSpecArgs(
            replicas=1,
            strategy=kinds.DeploymentStrategyArgs(type="Recreate"),
            selector=kinds.LabelSelectorArgs(match_labels=labels),
            template=kinds.PodTemplateSpecArgs(
                metadata=kinds.ObjectMetaArgs(labels=labels),
                spec=kinds.PodSpecArgs(
                    containers=containers, volumes=volumes or None, **ctx.pod_defaults()
                ),
            ),
        ),
    )


def _tensorboard(ctx: Context, mounts: list[kinds.VolumeMountArgs]) -> kinds.ContainerArgs:
    """TensorBoard itself, serving the log location (as the replicas write it)."""
    arg = shell.k8s_escape(logs(ctx).path)  # reaches TensorBoard as given, as the replicas
    return kinds.ContainerArgs(
        name="tensorboard",
        image=ctx.settings.tensorboard_image,
        command=["tensorboard", "--logdir", arg, "--host", "0.0.0.0", "--port", str(PORT)],
        env=[
            kinds.EnvVarArgs(name="AICHOR_TENSORBOARD_PATH", value=arg),
            kinds.EnvVarArgs(name="NVIDIA_VISIBLE_DEVICES", value="void"),
        ],
        ports=[kinds.ContainerPortArgs(name="tensorboard", container_port=PORT, protocol="TCP")],
        readiness_probe=kinds.ProbeArgs(
            tcp_socket=kinds.TCPSocketActionArgs(port=PORT), period_seconds=10
        ),
        # A TensorBoard that stops answering (stuck on a huge log directory) is restarted after
        # 2.5 minutes; its HTTP server starts before it has read the logs.
        liveness_probe=kinds.ProbeArgs(
            http_get=kinds.HTTPGetActionArgs(path="/", port=PORT),
            initial_delay_seconds=60,
            period_seconds=30,
            timeout_seconds=5,
            failure_threshold=5,
        ),
        resources=kinds.ResourceRequirementsArgs(
            requests={"cpu": "250m", "memory": "1Gi"}, limits={"cpu": "1", "memory": "2Gi"}
        ),
        volume_mounts=mounts or None,
        security_context=container_security(ctx.spec),
    )


def _receiver(ctx: Context) -> kinds.ContainerArgs:
    """The log receiver: what the replicas' shippers send, written to TensorBoard's volume."""
    path = logs(ctx).path
    return kinds.ContainerArgs(
        name="log-receiver",
        image=ctx.settings.tensorboard_image,
        command=[
            "python3",
            "-c",
            pods.source("tensorboard_receiver"),
            shell.k8s_escape(path),
            str(LOGS_PORT),
        ],
        ports=[kinds.ContainerPortArgs(name="logs", container_port=LOGS_PORT, protocol="TCP")],
        readiness_probe=kinds.ProbeArgs(
            tcp_socket=kinds.TCPSocketActionArgs(port=LOGS_PORT), period_seconds=10
        ),
        resources=kinds.ResourceRequirementsArgs(
            requests={"cpu": "50m", "memory": "64Mi"},
            limits={"cpu": "500m", "memory": "256Mi"},
        ),
        volume_mounts=[kinds.VolumeMountArgs(name=VOLUME, mount_path=path)],
        security_context=container_security(ctx.spec),
    )


def service(ctx: Context) -> dict:
    """ClusterIP only: reach TensorBoard with `kubectl port-forward` (no LoadBalancer, no
    NodePort); replicas reach the log receiver through it."""
    ports = [("tensorboard", PORT)] + ([("logs", LOGS_PORT)] if has_volume(ctx) else [])
    return dict(
        metadata=ctx.metadata(name(ctx), "tensorboard", _await(ctx), replica=False),
        spec=kinds.ServiceSpecArgs(
            type="ClusterIP",
            selector=ctx.labels("tensorboard", replica=False),
            ports=[
                kinds.ServicePortArgs(name=n, port=p, target_port=p, protocol="TCP")
                for n, p in ports
            ],
        ),
    )


def replica_volume(ctx: Context) -> tuple[kinds.VolumeArgs, kinds.VolumeMountArgs] | None:
    """A replica's local log directory (at AICHOR_TENSORBOARD_PATH), when logs are shipped."""
    if not has_volume(ctx):
        return None
    return (
        kinds.VolumeArgs(name=VOLUME, empty_dir=kinds.EmptyDirVolumeSourceArgs()),
        kinds.VolumeMountArgs(name=VOLUME, mount_path=logs(ctx).path),
    )


def shipper(ctx: Context) -> kinds.ContainerArgs:
    """The native sidecar (an init container that keeps running) shipping a replica's logs;
    Kubernetes stops it, with TERM, once the replica's main container has ended."""
    url = f"http://{ctx.names.service_host(name(ctx))}:{LOGS_PORT}"
    args = (
        pods.source("tensorboard_shipper"),
        logs(ctx).path,
        url,
        str(SHIP_INTERVAL_SECONDS),
        str(FINAL_SHIP_SECONDS),
    )
    return kinds.ContainerArgs(
        name=SHIPPER_CONTAINER,
        image=ctx.spec.image,
        restart_policy="Always",
        command=["/bin/sh", "-c", shell.k8s_escape(_SHIP), "ship", *map(shell.k8s_escape, args)],
        env=[kinds.EnvVarArgs(name="NVIDIA_VISIBLE_DEVICES", value="void")],
        resources=kinds.ResourceRequirementsArgs(
            requests={"cpu": "10m", "memory": "32Mi"}, limits={"cpu": "500m", "memory": "256Mi"}
        ),
        volume_mounts=[
            kinds.VolumeMountArgs(name=VOLUME, mount_path=logs(ctx).path, read_only=True)
        ],
        security_context=container_security(ctx.spec),
    )
