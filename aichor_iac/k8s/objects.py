"""A `Plan` as typed `pulumi_kubernetes` arguments: the headless Service and one Indexed Job
per replica group (DESIGN §4). Pure: builds argument objects, registers nothing.
"""

from __future__ import annotations

import re
from typing import Any

from .. import planning
from ..experiment.groups import TPU_RESOURCE, TPU_SELECTORS, Resources
from ..experiment.model import Spec
from ..experiment.origin import PERMANENT_EXIT_CODES, Kept
from ..frameworks import Group
from ..frameworks.base import INDEX_VAR, Env
from ..pods import LIFELINE_PORT
from ..pods.regroup import GAVE_UP
from ..settings import Settings
from . import commands, given, jupyter, keeping, kinds, progress, services, shell, tensorboard
from .awaits import COMPLETION, ENDED, NOTHING, SKIP_AWAIT, Await, Mode
from .context import Context, container_security, secret_env

INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
NETWORKS = "k8s.v1.cni.cncf.io/networks"
DELETION = "pulumi.com/deletionPropagationPolicy"
COMPLETION_MARGIN = 300  # seconds pulumi up waits past a Job's deadline to see it fail


def service(ctx: Context) -> dict:
    """Headless Service giving every replica a stable DNS name, resolvable before it is Ready."""
    metadata = ctx.metadata(ctx.names.service, annotations={SKIP_AWAIT: "true"})
    return _headless(metadata, ctx.selector(), ctx.plan.ports)


def role_service(ctx: Context, name: str, role: str) -> dict:
    """A headless Service for one group (Ray's head): its ports by name, resolvable at once."""
    group = next(g for g in ctx.plan.groups if g.role == role)
    selector = {**ctx.selector(), "app.kubernetes.io/component": role}
    return _headless(ctx.metadata(name, role, {SKIP_AWAIT: "true"}), selector, group.ports)


def _headless(
    metadata: kinds.ObjectMetaArgs, selector: dict[str, str], ports: tuple[tuple[str, int], ...]
) -> dict:
    """A headless Service: DNS records for the selected pods, published before they are Ready."""
    return dict(
        metadata=metadata,
        spec=kinds.ServiceSpecArgs(
            cluster_ip="None",
            publish_not_ready_addresses=True,
            selector=selector,
            ports=[
                kinds.ServicePortArgs(name=name, port=port, target_port=port, protocol="TCP")
                for name, port in ports
            ],
        ),
    )


def job_await(ctx: Context, group: Group, pods: int | None = None) -> Await:
    """How `pulumi up` waits for this group's Job, per `aichor:wait` (DESIGN §4). A group with
    a readiness port is always awaited: the groups created after it need it up (Ray's head,
    MPI's workers). A suspended custom resource's Jobs are not awaited at all. `pods`: the
    Job's (default: the group's; 1 where each replica has a Job)."""
    wait = ctx.settings.wait
    if ctx.spec.origin and ctx.spec.origin.suspend:  # no pod runs until someone resumes it
        return NOTHING
    if (trial := ctx.blueprint.manifest.trial) and group.role == ctx.plan.entry_point:
        if trial.stops_sweep and (trial.gates or wait == "complete"):
            return COMPLETION  # a failure fails `pulumi up`: no later trial is created
        if trial.gates or wait == "complete":  # a later trial waits for its end, whatever it is
            return Await(Mode.CONDITION, ENDED)
    # Independent pods (jobset, batchjob) may end before all have run, or run a few at a time
    # (`parallelisms`): their Jobs have no "all Ready" to wait for, so `ready` waits for none.
    if group.gate == "complete":  # the Jobs after it wait until it completes
        return COMPLETION
    # Where the groups that complete the experiment are created last (`planning.arrange`),
    # the others cannot be up before those exist: their end is awaited instead.
    last = planning.created_last(ctx.plan, ctx.settings, trial)
    if (wait == "ready" and not ctx.plan.independent and not last) or group.gates:
        if pods is not None:
            return Await(Mode.CONDITION, ready_or_finished(pods))
        return Await(Mode.CONDITION, ready_or_finished(group.at_once, group.count))
    if wait == "complete" and group.role in ctx.plan.completes:
        return COMPLETION  # the provider's Job await: succeeds on Complete, fails on Failed
    return NOTHING


def ready_or_finished(pods: int, finished: int | None = None) -> str:
    """The `waitFor` of a Job awaited until its pods are up: all `pods` Ready (those that
    run at once), or all (`finished`, default `pods`) succeeded. The second half means a Job
    that has already finished is not awaited again: a `pulumi up` after `pulumi refresh`
    (which marks a still-running gated Job unfinished) or an in-place update of a finished
    stack (a changed label or `aichor:wait`) passes at once instead of waiting its whole
    timeout for pods that will never be Ready again.

    An RFC 9535 filter over the Job's top-level members, of which only `.status` has `ready`
    and `succeeded`; it selects that map, which pulumi-kubernetes counts as a match
    (provider/pkg/jsonpath: a non-primitive result with no `=value` matches). RFC 9535
    paths need pulumi-kubernetes 4.24."""
    return f"jsonpath={{$[?@.ready=={pods} || @.succeeded=={finished or pods}]}}"


def await_timeout(ctx: Context, group: Group) -> int | None:
    """How long `pulumi up` may wait for this group's Job (its custom create/update timeout),
    so that no await falls back to the provider's 10-minute default: readiness within
    `aichor:peerWaitSeconds` (or the manifest's shorter `timeout`), as long as the replicas
    that need the group wait for it, so that a group that fails before it is up fails `up`
    then (a `waitFor` condition cannot see a failed Job: the provider waits it out); completion
    within the manifest's `timeout` plus `COMPLETION_MARGIN` (the Job's own deadline fails it
    first, and `up` reports that failure), else `aichor:waitTimeoutSeconds`. None: not
    awaited."""
    awaited, deadline = job_await(ctx, group), ctx.spec.timeout_seconds
    if awaited.until_up:
        return min(deadline or ctx.settings.peer_wait_seconds, ctx.settings.peer_wait_seconds)
    if awaited.mode is not Mode.NOTHING:  # awaited until it has ended
        return deadline + COMPLETION_MARGIN if deadline else ctx.settings.wait_timeout_seconds
    return None


def _job_metadata(
    ctx: Context, group: Group, held: Kept | None, replica: int | None
) -> kinds.ObjectMetaArgs:
    """A Job's name, labels and annotations: aichor-iac's, the Kueue queue, the Job's own
    where the resource gives them (a JobSet's Job template, a batch/v1 Job), and for a
    JobSet's Job the controller's labels and annotations (as on its pods)."""
    own = ctx.labels(group.role)
    labels = dict(held.job_labels) if held else {}
    annotations = dict(held.job_annotations) if held else {}
    if group.labels_on_job:
        labels.update(group.labels)
        annotations.update(group.annotations)
    labels = {k: v for k, v in labels.items() if k not in own}
    if queue := ctx.settings.kueue_queue:
        labels["kueue.x-k8s.io/queue-name"] = queue
    # A replaced Job (fixed name: deleted, then created) goes at once, its pods after: with
    # foreground deletion the create can find it still there (pulumi-kubernetes #3154). The
    # annotation needs pulumi-kubernetes 4.12.
    annotations.update(job_await(ctx, group, None if replica is None else 1).annotations)
    annotations[DELETION] = "background"
    annotations.update(ctx.trial_annotations())
    name = ctx.job_name(group, replica)
    return ctx.metadata(name, group.role, annotations, labels=labels or None)


def job(ctx: Context, group: Group, replica: int | None = None) -> dict:
    """The group's Indexed Job, or (`replica`) the Job of one replica of a group whose
    replicas have a Job each (`Context.replicas`): one pod, with the group's host name for
    that replica and literal values where the Indexed Job's are computed."""
    spec, gang = ctx.spec, ctx.gang_metadata(group.role)
    annotations = {**gang.get("annotations", {}), **networks(ctx, group)}
    held = ctx.template(group)  # a custom resource's template, kept
    if held is None:
        restarts = _restarts(ctx)
        template: Any = kinds.PodTemplateSpecArgs(
            metadata=kinds.ObjectMetaArgs(
                labels={**ctx.labels(group.role), **gang.get("labels", {})},
                annotations=annotations or None,
            ),
            spec=pod_spec(ctx, group, replica),
        )
    else:
        restarts = job_restarts(held.restart_policy, held.backoff_limit, held.container)
        restarts.update({kinds.snake(key): value for key, value in held.job.items()})
        if (regroup := ctx.regroup) is not None:  # (its pods: restartPolicy Never)
            restarts.update(_regrouped(held, regroup.budget))
        mounts = [*group.mounts, *progress.mounts(ctx)]
        volumes = [services.projected_volume(ctx.names, mount) for mount in mounts]
        receiving, sidecars = progress.receiver_parts(ctx, group, replica)
        volumes += receiving
        sidecars = [kinds.as_json(sidecar) for sidecar in sidecars]
        env = operator_env(ctx, group, replica)
        template = given.template(ctx, group, held, env, annotations, (volumes, mounts, sidecars))
        if replica is not None:  # (a non-Indexed Job's pods keep the template's host name)
            template["spec"]["hostname"] = ctx.job_name(group, replica)
    if keeping.enabled(ctx):  # (its pods keep their run: a keeper beside each)
        main = held.container if held is not None else ctx.plan.framework
        template = keeping.kept(ctx, group, replica, kinds.as_json(template), main)
    origin = spec.origin
    pods = group.count if replica is None else 1
    return dict(
        metadata=_job_metadata(ctx, group, held, replica),
        spec=kinds.JobSpecArgs(
            completion_mode="Indexed" if replica is None else "NonIndexed",
            completions=pods,
            parallelism=(group.parallelism or pods) if replica is None else 1,
            **{"active_deadline_seconds": spec.timeout_seconds, **restarts},
            ttl_seconds_after_finished=origin.ttl_seconds_after_finished if origin else None,
            suspend=(origin.suspend or None) if origin else None,
            template=template,
        ),
    )


def _restarts(ctx: Context) -> dict:
    """The retries of an AIchor Job: the manifest's backoffLimit; under the group restart, the
    budget (a pod whose container died as a whole is made again, its replica joining the
    group's next attempt), a replica that gave up (GAVE_UP) failing the Job at once."""
    if (regroup := ctx.regroup) is not None:
        return job_restarts("Never", regroup.budget, ctx.plan.framework, [GAVE_UP])
    return job_restarts("Never", ctx.spec.restart_policy.backoff_limit, None)


def job_restarts(
    restart_policy: str, backoff_limit: int, container: str | None, fails: list[int] | None = None
) -> dict:
    """A Job's retries (`backoffLimit`) and pod failure policy. A pod evicted by a node drain
    or preempted is replaced without counting as a failure (`backoffLimit` counts the
    program's failures), as JobSet users expect; with `ExitCode` the program's own failure
    (exit 1-127 of `container`) fails the Job at once, as do the exit codes `fails`. Pods
    restarted in place (`OnFailure`) can have no pod failure policy."""
    if restart_policy == "OnFailure":
        return dict(backoff_limit=backoff_limit)
    codes = list(PERMANENT_EXIT_CODES) if restart_policy == "ExitCode" else fails
    rules = _failure_rules(container, codes or [])
    return dict(
        backoff_limit=backoff_limit, pod_failure_policy=kinds.PodFailurePolicyArgs(rules=rules)
    )


def _failure_rules(container: str | None, fails: list[int]) -> list[Any]:
    """Disruptions ignored; the exit codes `fails` of `container` failing the Job at once."""
    rules = [
        kinds.PodFailurePolicyRuleArgs(
            action="Ignore",
            on_pod_conditions=[
                kinds.PodFailurePolicyOnPodConditionsPatternArgs(
                    type="DisruptionTarget", status="True"
                )
            ],
        )
    ]
    if fails:
        rules.append(
            kinds.PodFailurePolicyRuleArgs(
                action="FailJob",
                on_exit_codes=kinds.PodFailurePolicyOnExitCodesRequirementArgs(
                    container_name=container, operator="In", values=fails
                ),
            )
        )
    return rules


def _regrouped(held: Kept, budget: int) -> dict:
    """A kept Job's retries under the group restart: disruptions ignored and a replica that
    gave up (GAVE_UP) failing the Job, before the Job's own rules; at least the budget."""
    own = (held.job.get("podFailurePolicy") or {}).get("rules", [])
    rules = [*_failure_rules(held.container, [GAVE_UP]), *own]
    return dict(
        backoff_limit=max(budget, held.backoff_limit),
        pod_failure_policy=kinds.PodFailurePolicyArgs(rules=rules),
    )


def pod_spec(ctx: Context, group: Group, replica: int | None = None) -> kinds.PodSpecArgs:
    resources = group.spec.resources
    volumes, mounts = services.storage(ctx)
    if resources.shm_size_gb:
        volumes.append(
            kinds.VolumeArgs(
                name="dshm",
                empty_dir=kinds.EmptyDirVolumeSourceArgs(
                    medium="Memory", size_limit=gib(resources.shm_size_gb)
                ),
            )
        )
        mounts.append(kinds.VolumeMountArgs(name="dshm", mount_path="/dev/shm"))
    for mount in [*group.mounts, *progress.mounts(ctx)]:
        volumes.append(services.projected_volume(ctx.names, mount))
        mounts.append(kinds.VolumeMountArgs(name=mount.name, mount_path=mount.path, read_only=True))
    sidecars = []
    if logs := tensorboard.replica_volume(ctx):
        volumes.append(logs[0])
        mounts.append(logs[1])
        sidecars.append(tensorboard.shipper(ctx))
    if group.role == ctx.blueprint.jupyter:
        sidecars.append(jupyter.sidecar(ctx, list(mounts)))
    receiving, receivers = progress.receiver_parts(ctx, group, replica)
    volumes += receiving
    sidecars += receivers
    return kinds.PodSpecArgs(
        restart_policy="Never",
        subdomain=ctx.names.service,
        dns_config=kinds.PodDNSConfigArgs(searches=list(group.dns_searches))
        if group.dns_searches
        else None,
        affinity=_affinity(ctx, group),
        scheduler_name=ctx.scheduler_name,
        node_selector=node_selector(ctx.settings, resources) or None,
        tolerations=tolerations(resources) or None,
        init_containers=sidecars or None,
        containers=[_main_container(ctx, group, mounts)],
        volumes=volumes or None,
        **ctx.pod_defaults(),
    )


def _main_container(
    ctx: Context, group: Group, mounts: list[kinds.VolumeMountArgs]
) -> kinds.ContainerArgs:
    """The framework's container: the group's command after its waits, its env, ports,
    readiness probe, resources and security."""
    resources = group.spec.resources
    rdma = ("IPC_LOCK",) if resources.rdma else ()  # RDMA pins (locks) its buffers' memory
    security = container_security(ctx.spec, (*group.capabilities, *rdma))
    ready = group.ready_port
    ports = [*group.ports, *([("lifeline", LIFELINE_PORT)] if commands.listens(ctx, group) else [])]
    return kinds.ContainerArgs(
        name=ctx.plan.framework,
        image=ctx.spec.image,
        command=commands.container_command(
            ctx, group, group.program or ctx.spec.command, spec_restarts(ctx.spec)
        ),
        env=env(ctx, group),
        ports=[kinds.ContainerPortArgs(name=n, container_port=p, protocol="TCP") for n, p in ports]
        or None,
        readiness_probe=kinds.ProbeArgs(
            tcp_socket=kinds.TCPSocketActionArgs(port=ready), period_seconds=5, failure_threshold=1
        )
        if ready
        else None,
        resources=requirements(resources, ctx.settings.rdma_resource_prefix),
        volume_mounts=mounts or None,
        security_context=security,
        termination_message_policy=commands.TAIL_ON_ERROR,
    )


def _affinity(ctx: Context, group: Group) -> kinds.AffinityArgs | None:
    """Every pod of a group on one node pool when it must be (e.g. the hosts of a TPU slice)."""
    if (colocation := ctx.colocation(group)) is None:
        return None
    labels, topology = colocation
    return kinds.AffinityArgs(
        pod_affinity=kinds.PodAffinityArgs(
            required_during_scheduling_ignored_during_execution=[
                kinds.PodAffinityTermArgs(
                    label_selector=kinds.LabelSelectorArgs(match_labels=labels),
                    topology_key=topology,
                )
            ]
        )
    )


def spec_restarts(spec: Spec) -> bool:
    """Whether a failed replica's Job starts it again (so a failure is not yet the end)."""
    return spec.restart_policy.backoff_limit > 0


def env(ctx: Context, group: Group) -> list[kinds.EnvVarArgs]:
    """The replica index first (downward API), then the framework's variables (those that are
    the index plus an offset are computed by the command's prelude), AICHOR_* ones, and the
    manifest's `spec.env` (Secrets by reference only)."""
    entries = operator_env(ctx, group)
    if not group.spec.resources.gpus:
        # CUDA images set NVIDIA_VISIBLE_DEVICES=all: a replica without GPUs must not see any.
        entries.append(kinds.EnvVarArgs(name="NVIDIA_VISIBLE_DEVICES", value="void"))
    return entries + user_env(ctx.spec)


def operator_env(ctx: Context, group: Group, replica: int | None = None) -> list[kinds.EnvVarArgs]:
    """What the operator gives a replica: its index, the framework's variables, and the
    stack's AICHOR_* values. With `replica` (a Job of its own) every value is literal."""
    if replica is None:
        index_path = f"metadata.annotations['{INDEX_ANNOTATION}']"
        source = kinds.EnvVarSourceArgs(
            field_ref=kinds.ObjectFieldSelectorArgs(field_path=index_path)
        )
        entries = [kinds.EnvVarArgs(name=INDEX_VAR, value_from=source)]
    else:
        entries = [kinds.EnvVarArgs(name=INDEX_VAR, value=str(replica))]
    for var in group.env:
        if var.only_first and replica not in (None, 0):
            continue
        if var.field_path is not None:
            source = kinds.EnvVarSourceArgs(
                field_ref=kinds.ObjectFieldSelectorArgs(field_path=var.field_path)
            )
            entries.append(kinds.EnvVarArgs(name=var.name, value_from=source))
        elif var.secret_key is not None:
            entries.append(
                secret_env(var.name, var.secret_name or ctx.names.secret, var.secret_key)
            )
        elif replica is not None:
            entries.append(kinds.EnvVarArgs(name=var.name, value=_literal(var, replica)))
        elif var.index_offset is None:
            entries.append(kinds.EnvVarArgs(name=var.name, value=var.value))
        elif var.index_offset == 0:
            entries.append(kinds.EnvVarArgs(name=var.name, value=f"$({INDEX_VAR})"))
    for name, value in {**ctx.platform_env(), **progress.env(ctx)}.items():
        entries.append(kinds.EnvVarArgs(name=name, value=shell.k8s_escape(value)))
    return entries


def _literal(var: Env, replica: int) -> str:
    """A variable's value for one replica, where the prelude would compute it: the index plus
    the offset, or replica 0's own value (whose `$VAR`s, earlier entries, Kubernetes expands
    as `$(VAR)`)."""
    if var.index_offset is not None:
        return str(replica + var.index_offset)
    if var.first is not None and replica == 0:
        return re.sub(r"\$([A-Za-z_][A-Za-z0-9_]*)", r"$(\1)", var.first)
    return var.value


def user_env(spec: Spec) -> list[kinds.EnvVarArgs]:
    """`spec.env`: literal values (protected from `$(VAR)` expansion) and Secret references."""
    entries = []
    for var in spec.env:
        if var.secret_key_ref is not None:
            entries.append(secret_env(var.name, var.secret_key_ref.name, var.secret_key_ref.key))
        else:
            entries.append(kinds.EnvVarArgs(name=var.name, value=shell.k8s_escape(var.value or "")))
    return entries


def requirements(
    resources: Resources, rdma_prefix: str = "intel.com"
) -> kinds.ResourceRequirementsArgs:
    memory = resources.memory_gib
    requests = {"cpu": cpu(resources.cpus), "memory": gib(memory)}
    # A memory-backed /dev/shm is charged to the container: make room for it in the limit.
    limits = {
        "cpu": cpu(resources.cpus * resources.cpu_limit_ratio),
        "memory": gib(memory + resources.shm_size_gb),
    }
    gpu, tpu = resources.accelerators.gpu, resources.accelerators.tpu
    if gpu and gpu.count:
        limits[gpu.resource_name] = str(gpu.count)
    if tpu:
        limits[TPU_RESOURCE] = str(tpu.tpu_chips_count)
    for device in resources.rdma.devices if resources.rdma else ():
        limits[f"{rdma_prefix}/{device}"] = "1"  # one virtual function of each NIC
    return kinds.ResourceRequirementsArgs(requests=requests, limits=limits)


def networks(ctx: Context, group: Group) -> dict[str, str]:
    """Multus' annotation attaching the network of each RDMA device the group requests."""
    rdma = group.spec.resources.rdma
    if rdma is None:
        return {}
    return {NETWORKS: ",".join(ctx.settings.rdma_network(d) for d in rdma.devices)}


def node_selector(settings: Settings, resources: Resources) -> dict[str, str]:
    selector = dict(sorted(resources.extra_selectors.items()))
    gpu, tpu = resources.accelerators.gpu, resources.accelerators.tpu
    if gpu and gpu.count and gpu.product:
        selector[settings.gpu_product_label] = gpu.product
    if tpu:
        selector.update(zip(TPU_SELECTORS, (tpu.type, tpu.topology), strict=True))
    return selector


def tolerations(resources: Resources) -> list[kinds.TolerationArgs]:
    result = []
    gpu, tpu = resources.accelerators.gpu, resources.accelerators.tpu
    if gpu and gpu.count:
        result.append(
            kinds.TolerationArgs(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
        )
    if tpu:
        result.append(
            kinds.TolerationArgs(key=TPU_RESOURCE, operator="Exists", effect="NoSchedule")
        )
    result += [
        kinds.TolerationArgs(**t.model_dump(exclude_none=True)) for t in resources.extra_tolerations
    ]
    return result


def cpu(value: float) -> str:
    """A CPU quantity: whole cores as integers, otherwise millicores."""
    return str(int(value)) if float(value).is_integer() else f"{round(value * 1000)}m"


def gib(value: float) -> str:
    """A memory quantity from GiB: whole GiB as `Gi`, otherwise rounded to `Mi`."""
    return f"{int(value)}Gi" if float(value).is_integer() else f"{round(value * 1024)}Mi"
