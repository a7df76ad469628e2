"""A Jupyter server beside the entry point (`spec.debug.jupyter: true`; Ray: on the head), as
AIchor's debug option offers: a native sidecar of that group's pods (it stops when the replica
ends), guarded by a generated token read from the experiment's Secret (`JUPYTER_TOKEN`, never
a literal), reached with `kubectl port-forward` through the Service `<exp>-jupyter`, which
selects the group's pod 0."""

from __future__ import annotations

from . import kinds, shell
from .awaits import SKIP_AWAIT
from .context import Context, container_security, secret_env

PORT = 8888
TOKEN_KEY = "jupyter-token"  # its key in the experiment's Secret
CONTAINER = "jupyter"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"  # on Indexed Job pods (1.28+)

# jupyter_server (JupyterLab, Notebook 7) or the classic notebook; both read JUPYTER_TOKEN.
# Without either, the sidecar says so and idles: the replica runs as if it were not there.
_SERVE = f"""\
flags="--ip=0.0.0.0 --port={PORT} --no-browser --allow-root"
if command -v jupyter-server >/dev/null 2>&1; then exec jupyter server $flags; fi
if command -v jupyter-notebook >/dev/null 2>&1; then exec jupyter notebook $flags; fi
echo "aichor: no jupyter in the image: add jupyterlab (or jupyter_server) to use debug.jupyter"
trap 'exit 0' TERM
while :; do sleep 1; done"""


def name(ctx: Context) -> str:
    return f"{ctx.names.experiment}-jupyter"


def sidecar(ctx: Context, mounts: list[kinds.VolumeMountArgs]) -> kinds.ContainerArgs:
    """The server, with the same volumes as the replica's main container."""
    return kinds.ContainerArgs(
        name=CONTAINER,
        image=ctx.spec.image,
        restart_policy="Always",
        command=["/bin/sh", "-c", shell.k8s_escape(_SERVE)],
        env=[secret_env("JUPYTER_TOKEN", ctx.names.secret, TOKEN_KEY)],
        ports=[kinds.ContainerPortArgs(name="jupyter", container_port=PORT, protocol="TCP")],
        # No readiness probe: a sidecar's readiness is the pod's, and the Ray head's readiness
        # gates `pulumi up`; `kubectl port-forward svc/…` picks the pod by its selector.
        resources=kinds.ResourceRequirementsArgs(
            requests={"cpu": "250m", "memory": "512Mi"}, limits={"cpu": "2", "memory": "8Gi"}
        ),
        volume_mounts=mounts or None,
        security_context=container_security(ctx.spec),
    )


def service(ctx: Context) -> dict:
    """ClusterIP, for `kubectl port-forward`: the Jupyter server of the group's pod 0."""
    role = ctx.blueprint.jupyter
    selector = {**ctx.selector(), "app.kubernetes.io/component": role, INDEX_LABEL: "0"}
    return dict(
        metadata=ctx.metadata(name(ctx), "jupyter", {SKIP_AWAIT: "true"}, replica=False),
        spec=kinds.ServiceSpecArgs(
            type="ClusterIP",
            selector=selector,
            ports=[
                kinds.ServicePortArgs(name="jupyter", port=PORT, target_port=PORT, protocol="TCP")
            ],
        ),
    )
