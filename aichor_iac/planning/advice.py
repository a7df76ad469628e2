"""What is valid but most likely not what the user meant (`warnings()`): shown by
`validate`, `render`, `preview` and `pulumi up`, each located in the manifest or naming the
`aichor:` key to change. Pure: no Pulumi or Kubernetes import."""

from __future__ import annotations

from ..problems import Problem
from ..reading.podtemplate import KUEUE_LABEL
from .blueprints import OBJECT_STORAGE, Blueprint

# Node labels that common node labellers set to a GPU's product name: NVIDIA's GPU feature
# discovery (and GPU Operator), GKE, EKS (cluster-autoscaler's), Karpenter on AWS, AMD's labeller.
GPU_PRODUCT_LABELS = (
    "nvidia.com/gpu.product",
    "cloud.google.com/gke-accelerator",
    "k8s.amazonaws.com/accelerator",
    "karpenter.k8s.aws/instance-gpu-name",
    "amd.com/gpu.product-name",
)


def warnings(blueprint: Blueprint) -> list[Problem]:
    """What is valid but most likely not what the user meant, located in the manifest (or
    naming the `aichor:` key): shown by `validate`, `render`, `preview` and `pulumi up`."""
    spec, settings = blueprint.spec, blueprint.settings
    found = []
    gpus = [g.spec.resources.accelerators.gpu for g in blueprint.plan.groups]
    products = sorted({gpu.product for gpu in gpus if gpu and gpu.count and gpu.product})
    if products and settings.gpu_product_label not in GPU_PRODUCT_LABELS:
        found.append(
            Problem(
                "aichor:gpuProductLabel",
                f"{settings.gpu_product_label} is no label a common node labeller sets, so no "
                f"node may match {', '.join(products)} and the GPU pods stay Pending: use the "
                f"one your nodes carry (kubectl get nodes --show-labels), e.g. "
                f"{', '.join(GPU_PRODUCT_LABELS[:2])}",
            )
        )
    deadline = spec.timeout_seconds
    if deadline is not None and deadline < settings.peer_wait_seconds:
        field = "spec.timeout" if spec.timeout is not None else "spec.activeDeadlineSeconds"
        found.append(
            Problem(
                field,
                f"{deadline} s is shorter than aichor:peerWaitSeconds ({settings.peer_wait_seconds}"
                " s): replicas waiting for slow peers (pods Pending while nodes scale up) use "
                "the whole deadline and the run ends as DeadlineExceeded, not as a peer that "
                "never came; lower aichor:peerWaitSeconds below it",
            )
        )
    if blueprint.network_policy and not settings.egress_cidrs:
        for i, var in enumerate(spec.env):
            if var.value and OBJECT_STORAGE.match(var.value):
                found.append(
                    Problem(
                        f"spec.env.{i}.value",
                        f"{var.value} looks like object storage, which the experiment's "
                        "NetworkPolicy does not let pods reach (only each other and DNS): set "
                        "aichor:egressCIDRs to its address ranges, or aichor:networkPolicy: false",
                    )
                )
    found += _gang_warnings(blueprint)
    found += _autoscaling_warnings(blueprint)
    found += _queue_warnings(blueprint)
    found += _store_warnings(blueprint)
    return blueprint.manifest.located(found)


def _store_warnings(blueprint: Blueprint) -> list[Problem]:
    """A bucket or container with no Secret for its keys: the keeper's writes go unsigned,
    which object stores refuse (moto takes an object's first and refuses the next), so the
    record never gets its end."""
    settings = blueprint.settings
    scheme = (settings.history or "").partition("://")[0]
    if scheme not in ("s3", "gs", "az") or settings.history_secret:
        return []
    keys = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    if scheme == "az":
        keys = "AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY"
    reason = (
        f"no Secret gives {settings.history}'s keys, so the pods write to it unsigned, which "
        "a store refuses unless anyone may write there: name a Secret holding "
        f"{keys} (run --local reads them from your shell's environment)"
    )
    return [Problem("aichor:historySecret", reason)]


def _queue_warnings(blueprint: Blueprint) -> list[Problem]:
    """A custom resource labelled for a Kueue queue the stack does not queue its Jobs in:
    the queue is the stack's (`aichor:kueueQueue`), which says so."""
    origin, queue = blueprint.spec.origin, blueprint.settings.kueue_queue
    wanted = origin.queue if origin else None
    if not wanted or wanted == queue:
        return []
    now = f"they go to {queue}" if queue else "they are not queued"
    reason = (
        f"asks Kueue's queue {wanted}, which the stack's aichor:kueueQueue names for every Job "
        f"({now}): set aichor:kueueQueue: {wanted}"
    )
    return [Problem(f"metadata.labels.{KUEUE_LABEL}", reason)]


def _autoscaling_warnings(blueprint: Blueprint) -> list[Problem]:
    """A custom resource that asks for an autoscaler, which no operator runs here: say what
    size each group runs at instead (a KubeRay cluster's autoscaler, a PyTorchJob's
    HorizontalPodAutoscaler)."""
    origin = blueprint.spec.origin
    if origin is not None and (origin.fields.get("elasticPolicy") or {}).get("metrics"):
        workers = blueprint.spec.types.get("Worker")
        count = workers.count if workers else 0
        return [
            Problem(
                "spec.elasticPolicy.metrics",
                "the HorizontalPodAutoscaler that would scale the Workers is not created here "
                f"(no operator): they run at their replicas ({count}) for the whole run; "
                "change replicas and `pulumi up` to resize",
            )
        ]
    fields = origin.ray.autoscaling if origin and origin.ray else None
    if not fields:
        return []
    pools = blueprint.spec.types.get("Workers") or []
    sizes = ", ".join(f"{pool.name} {pool.count}" for pool in pools) or "no worker group"
    return [
        Problem(
            fields[0],
            "the Ray autoscaler is not run here (no KubeRay operator): each worker group runs "
            f"at its declared size (replicas within min and max; {sizes}) for the whole run "
            "and autoscalerOptions are not used; change replicas and `pulumi up` to resize",
        )
    ]


def _gang_warnings(blueprint: Blueprint) -> list[Problem]:
    """A coscheduling gang that leaves groups out (`Gang`): say which, and why."""
    chosen = blueprint.gang
    if chosen is None or not chosen.left_out:
        return []
    jobs = ", ".join(blueprint.names.job(role) for role in chosen.left_out)
    pods = f"{chosen.size} pod" + ("s" if chosen.size != 1 else "")
    kept = f"a PodGroup of {pods} for the rest" if chosen.roles else "no PodGroup"
    return [
        Problem(
            "aichor:gangScheduler",
            f"the pods of {jobs} come and go (more completions than parallelism) and the "
            "coscheduling plugin counts only pods that have not ended, so no gang of them "
            f"could hold once the first ends: they are scheduled one by one ({kept}); use "
            "volcano, which counts succeeded pods, to start them as a gang too",
        )
    ]
