"""Keeping a run from inside the cluster (issue 67; docs/stores.md): when the stack names
`aichor:history` or `aichor:mlflow`, each of the experiment's pods gets a shared folder
(an `emptyDir`), its main container's output copied there as it is printed (`CAPTURE`), its
receiver's reports appended there (the entry pod's), and the keeper (`keeper.py`) as its first
native sidecar, which writes what the pod knows to the stores. The keeper starts first, so it
is stopped last (native sidecars stop in the reverse order): the receiver's last report and
the main container's last line are in the folder by then.

Credentials reach the keeper only by reference (`secretKeyRef`, optional keys of the Secrets
the stack names): never in a URL (settings refuse one), an object, a log or a render.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from typing import Any

from .. import pods
from ..experiment.trial import MARKER
from ..frameworks import Group
from ..problems import ManifestError, Problem
from . import kinds, progress, shell
from .context import Context, container_security

CONTAINER = "aichor-keeper"
VOLUME = "aichor-keep"
DIR = "/var/run/aichor/keep"
LOG, REPORTS, EXITS = "output.log", "reports.jsonl", "exit"  # (keeper.py's names)
# Requests equal to limits, as the receiver's: a Guaranteed pod stays Guaranteed. It holds a
# log chunk (4 MiB) and the log's last 16 MiB for MLflow at most.
RESOURCES = {"cpu": "100m", "memory": "192Mi"}
SECRET_KEYS = {
    "history": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"),
    "az": ("AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY"),  # (as the Azure CLI names them)
    "mlflow": ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"),
}
AZURE_ENDPOINT = "AZURE_STORAGE_BLOB_ENDPOINT"  # (the account's blob endpoint: Azurite's)
GCS_ENDPOINT = "https://storage.googleapis.com"  # (its XML API takes S3's requests)
JOB_UID = "metadata.labels['batch.kubernetes.io/controller-uid']"  # (the Job controller's)

# The main container's command, `$@`, as a child whose output (and errors) are copied into the
# shared folder by `tee` as they come, and still reach the container's log; its status written
# there when it ends. A TERM or INT is passed on to it; its output's last lines are out before
# the container ends (a process it left behind that holds them open: 5 s at most). Without
# `tee` or `mkfifo` (a distroless image), it runs as it would, its output not kept.
CAPTURE = """\
d="$AICHOR_KEEP_DIR"
rm -f "$d/.out" "$d/.err"
if command -v tee >/dev/null 2>&1 && mkfifo "$d/.out" "$d/.err" 2>/dev/null; then
  tee -a "$d/output.log" < "$d/.out" &
  out=$!
  tee -a "$d/output.log" < "$d/.err" >&2 &
  err=$!
  "$@" > "$d/.out" 2> "$d/.err" &
else
  echo "aichor: no tee or mkfifo in the image: this container's output is not kept" >&2
  out= err=
  "$@" &
fi
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM
trap 'kill -INT "$child" 2>/dev/null' INT
wait "$child"; status=$?
while kill -0 "$child" 2>/dev/null; do wait "$child"; status=$?; done
if [ -n "$out" ]; then
  (sleep 5; kill "$out" "$err" 2>/dev/null) &
  timer=$!
  wait "$out" "$err" 2>/dev/null
  kill "$timer" 2>/dev/null
fi
echo "$status" >> "$d/exit"
exit "$status"
"""

# The keeper's first process: a shell that handles TERM from its first line (as the
# receiver's), runs the keeper where python3 is and passes a TERM on to it (its last round:
# 20 s at most); else says why and idles until TERM (a native sidecar that exits is
# restarted forever).
_RUN = """\
trap 'exit 0' TERM
if command -v python3 >/dev/null 2>&1; then
  python3 -S -c "$1" &
  keeper=$!
  trap 'kill -TERM "$keeper" 2>/dev/null; wait "$keeper"; exit 0' TERM
  wait "$keeper"
  echo "aichor: the keeper ended ($?): this pod's run is no longer kept" >&2
else
  echo "aichor: no python3 in the image: this pod's run is not kept (aichor:progressImage)" >&2
fi
while :; do sleep 1 & wait $!; done
"""


def enabled(ctx: Context) -> bool:
    return ctx.settings.keeps


def kept(ctx: Context, group: Group, replica: int | None, template: dict, main: str) -> dict:
    """A pod template (Kubernetes JSON) whose pods keep their run: the shared folder, the
    keeper first among the native sidecars, the main container's output captured, the
    receiver's reports appended."""
    spec = template["spec"]
    mount = {"name": VOLUME, "mountPath": DIR}
    spec["volumes"] = [*spec.get("volumes", []), {"name": VOLUME, "emptyDir": {}}]
    for container in spec["containers"]:
        if container["name"] == main:
            _capture(container, mount)
    for sidecar in spec.get("initContainers", []):
        if sidecar["name"] == progress.CONTAINER:
            sidecar["env"] = [*sidecar.get("env", []), _env("AICHOR_PROGRESS_LOG", _in(REPORTS))]
            sidecar["volumeMounts"] = [*sidecar.get("volumeMounts", []), mount]
    mounts = [mount, *_store_mounts(ctx, spec, main)]
    keeper = sidecar_of(ctx, who(ctx, group, replica, main), mounts)
    spec["initContainers"] = [keeper, *spec.get("initContainers", [])]
    return template


def _capture(container: dict[str, Any], mount: dict[str, str]) -> None:
    """The container's command run under CAPTURE (one that runs its image's entrypoint: not
    known without the image, its output is not kept), the folder mounted, its path given."""
    container["volumeMounts"] = [*container.get("volumeMounts", []), mount]
    container["env"] = [*container.get("env", []), _env("AICHOR_KEEP_DIR", DIR)]
    if "command" in container:
        argv = [*container["command"], *container.pop("args", [])]
        container["command"] = ["/bin/sh", "-c", shell.k8s_escape(CAPTURE), "aichor-keep", *argv]


def _in(name: str) -> str:
    return posixpath.join(DIR, name)


def _env(name: str, value: str) -> dict[str, str]:
    return {"name": name, "value": shell.k8s_escape(value)}


def _store_mounts(ctx: Context, spec: dict[str, Any], main: str) -> list[dict[str, Any]]:
    """A folder store's volume, mounted where the main container mounts it; or refused."""
    history = ctx.settings.history
    if not history or not (history.startswith("/") or history.startswith("file:")):
        return []
    path = history.removeprefix("file://")
    container = next(c for c in spec["containers"] if c["name"] == main)
    mounts = container.get("volumeMounts", [])
    for mount in mounts:
        if path == mount["mountPath"] or path.startswith(mount["mountPath"].rstrip("/") + "/"):
            return [{k: v for k, v in mount.items() if k != "readOnly"}]
    where = ", ".join(m["mountPath"] for m in mounts) or "none"
    why = f"{path} is on no volume the pods mount (their mounts: {where}): give a path on one"
    raise ManifestError("stack config", [Problem("aichor:history", why)])


def who(ctx: Context, group: Group, replica: int | None, main: str) -> dict[str, Any]:
    """Who the pod is, for its keeper: its experiment, its Job, role and main container,
    whether it is the entry point's (the one that writes to MLflow), its trial and how its
    objective's metrics are printed (and the objective, for the record read back)."""
    trial = ctx.blueprint.manifest.trial
    person: dict[str, Any] = {
        "namespace": ctx.names.namespace,
        "experiment": ctx.names.experiment,
        "job": ctx.job_name(group, replica),
        "role": group.role,
        "container": main,
        "entry": group.role == ctx.plan.entry_point and replica in (None, 0),
        "framework": ctx.plan.framework,
        "image": ctx.spec.image,
        "mlflowExperiment": ctx.settings.mlflow_experiment,
        "trial": None,
        "metrics": None,
    }
    if ctx.stack:  # (its MLflow runs' aichor.stack tag)
        person["stack"] = ctx.stack
    if trial is not None:
        parameters = dict(trial.values)
        person["trial"] = {"sweep": trial.sweep, "index": trial.index, "parameters": parameters}
        objective = trial.objective
        if objective is not None:  # (read back with the record: `observe.stored`)
            person["objective"] = json.loads(json.dumps(dataclasses.asdict(objective)))
        if objective is not None and objective.formats is not None:
            person["metrics"] = {
                "names": [objective.metric, *objective.additional],
                "formats": list(objective.formats),
                "marker": MARKER if objective.file else "",
                "json": objective.json,
            }
    return person


def sidecar_of(
    ctx: Context, person: dict[str, Any], mounts: list[dict[str, Any]]
) -> dict[str, Any]:
    """The keeper's container (Kubernetes JSON): the receiver's image, its settings in its
    environment (credentials from the Secrets' keys), the project's security."""
    settings = ctx.settings
    env = [
        _env("AICHOR_KEEP_DIR", DIR),
        _env("AICHOR_KEEP", json.dumps(person, sort_keys=True)),
        _field("AICHOR_POD_NAME", "metadata.name"),
        _field("AICHOR_KEEP_KEY", JOB_UID),
    ]
    for name, value in _store_env(ctx).items():
        env.append(_env(name, value))
    azure = (settings.history or "").startswith("az://")
    stores = [("az" if azure else "history", settings.history_secret)]
    for concern, secret in [*stores, ("mlflow", settings.mlflow_secret)]:
        for key in SECRET_KEYS[concern] if secret else ():
            ref = {"name": secret, "key": key, "optional": True}
            env.append({"name": key, "valueFrom": {"secretKeyRef": ref}})
    resources = {"requests": RESOURCES, "limits": RESOURCES}
    return {
        "name": CONTAINER,
        "image": settings.progress_image or ctx.spec.image,
        "restartPolicy": "Always",
        "command": ["/bin/sh", "-c", _RUN, CONTAINER, shell.k8s_escape(pods.source("keeper"))],
        "env": env,
        "resources": resources,
        "securityContext": kinds.as_json(container_security(ctx.spec)),
        "volumeMounts": mounts,
    }


def _field(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _store_env(ctx: Context) -> dict[str, str]:
    """The stores' URLs, and the bucket's endpoint and region as the AWS SDKs read them (a
    gs:// bucket: GCS's XML API, which takes S3's requests with HMAC keys)."""
    settings, env = ctx.settings, {}
    if history := settings.history:
        if history.startswith("gs://"):
            history = "s3://" + history.removeprefix("gs://")
            env["AWS_ENDPOINT_URL"] = settings.history_endpoint or GCS_ENDPOINT
        env["AICHOR_HISTORY"] = history.removeprefix("file://")
        if settings.history_endpoint:
            azure = history.startswith("az://")
            env[AZURE_ENDPOINT if azure else "AWS_ENDPOINT_URL"] = settings.history_endpoint
        if settings.history_region:
            env["AWS_REGION"] = settings.history_region
    if settings.mlflow:
        env["AICHOR_MLFLOW"] = settings.mlflow
    return dict(sorted(env.items()))
