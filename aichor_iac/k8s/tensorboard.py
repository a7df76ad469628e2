"""TensorBoard for an experiment (`spec.tensorboard.enabled`): a Deployment and a ClusterIP
Service `<exp>-tensorboard` reading the experiment's log location (`planning.TensorboardLogs`).

With no log location configured, TensorBoard gets a ReadWriteOnce volume of its own, which is
all a plain cluster's default storage class offers, and nothing else mounts it: each replica
writes `AICHOR_TENSORBOARD_PATH` to a local `emptyDir`, and a native sidecar (`SHIPPER`) sends
the bytes added to each file to a receiver beside TensorBoard (`RECEIVER`), which appends them
at their offset (resends are harmless). So TensorBoard runs on any node, serves the logs while
the experiment runs and after it has ended (until `pulumi destroy`), a replica that restarts
loses none of what it shipped, and any replica may write (rank 0, every jobset Job).
"""

from __future__ import annotations

from . import kinds, services, shell
from .awaits import SKIP_AWAIT
from .context import Context, container_security

PORT = 6006  # TensorBoard
LOGS_PORT = 6007  # the log receiver
VOLUME = "tensorboard-logs"
SHIPPER_CONTAINER = "tensorboard-logs"
SHIP_INTERVAL_SECONDS = 5
FINAL_SHIP_SECONDS = 20  # within the pod's 30 s termination grace period

# The log receiver, in TensorBoard's pod: `PUT /<relative path>` with `X-Offset: N` appends
# the body to that file at byte N and answers the file's size; bytes it already has are
# skipped, so a resend is harmless; a gap is refused with 409 and the size it has.
# argv: root directory, port.
RECEIVER = """\
import http.server, os, sys, threading, urllib.parse
root, port, lock = os.path.realpath(sys.argv[1]), int(sys.argv[2]), threading.Lock()

class Receiver(http.server.BaseHTTPRequestHandler):
    def reply(self, code, text):
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self):
        relative = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        target = os.path.realpath(os.path.join(root, relative))
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if not relative or not target.startswith(root + os.sep):
            return self.reply(400, "a path inside the log directory, please")
        offset = int(self.headers.get("X-Offset", 0))
        with lock:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "ab") as log:
                size = log.tell()
                gap = offset > size
                if not gap:
                    log.write(data[size - offset:])
                    log.flush()
                    os.fsync(log.fileno())
                    size = log.tell()
        # Answered once the bytes are in the file: the shipper never resends what it was told
        # is stored, so an acknowledged byte must not sit in a buffer.
        self.reply(409 if gap else 200, str(size))

    def log_message(self, *args):
        pass

print(f"aichor: receiving TensorBoard logs into {root} on port {port}", flush=True)
http.server.ThreadingHTTPServer(("0.0.0.0", port), Receiver).serve_forever()
"""

# The replica's sidecar: every few seconds, and a last time when the pod stops (TERM), send
# the bytes added to each file under the log directory to the receiver.
# argv: log directory, receiver URL, interval, seconds allowed for the last round.
# The TERM handler comes first: a container's first process ignores a signal it does not
# handle, and a main container that ends at once sends TERM while urllib is still importing.
SHIPPER = """\
import signal
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
import os, sys, time, urllib.error, urllib.parse, urllib.request
root, url, interval, final = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
sent, warned = {}, set()
print(f"aichor: shipping TensorBoard logs from {root} to {url}", flush=True)

def ship():
    done = True
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, root)
            try:
                size = os.path.getsize(path)
            except OSError:
                continue
            while sent.get(relative, 0) < size:
                offset = sent.get(relative, 0)
                with open(path, "rb") as log:
                    log.seek(offset)
                    data = log.read(min(size - offset, 8 << 20))
                request = urllib.request.Request(
                    f"{url}/{urllib.parse.quote(relative)}", data=data, method="PUT",
                    headers={"X-Offset": str(offset)})
                try:
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        sent[relative] = int(answer.read())
                except urllib.error.HTTPError as error:
                    if error.code != 409:
                        print(f"aichor: TensorBoard refused {relative}: {error}", flush=True)
                        done = False
                        break
                    sent[relative] = int(error.read())
                except OSError as error:
                    if url not in warned:
                        print(f"aichor: TensorBoard at {url} not reachable: {error}", flush=True)
                        warned.add(url)
                    return False
    return done

while not stopping:
    ship()
    for _ in range(int(interval * 10)):
        if stopping:
            break
        time.sleep(0.1)
deadline = time.time() + final
while not ship():
    if time.time() >= deadline:
        sys.exit("aichor: gave up shipping the last TensorBoard logs")
    time.sleep(1)
print(f"aichor: shipped {sum(sent.values())} bytes of logs in {len(sent)} files", flush=True)
"""

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
        command=["python3", "-c", RECEIVER, shell.k8s_escape(path), str(LOGS_PORT)],
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
    args = (SHIPPER, logs(ctx).path, url, str(SHIP_INTERVAL_SECONDS), str(FINAL_SHIP_SECONDS))
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
