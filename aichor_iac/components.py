"""One Pulumi component per framework. They are thin: the framework's planner decides, the
`k8s` layer builds the objects, and `ExperimentComponent` registers them in order.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import pulumi
import pulumi_random
import pulumi_tls
from pulumi_kubernetes.batch.v1 import Job

from . import planning
from .credentials import Credentials, progress_credentials, sweep_credentials
from .experiment.model import Experiment
from .frameworks import Plan
from .k8s import jupyter, layout, progress, tensorboard
from .k8s.context import Context
from .problems import ManifestError, Problem
from .settings import Settings
from .sweep_order import Made, after_job, failed_counts, say_kept, sweep_gate

# The resource each kind of child is registered as (a PodGroup is a custom resource), as
# (pulumi_kubernetes module, class): imported when an experiment has one, since each module
# takes a tenth of a second to import and most experiments need core/v1 and batch/v1 alone.
RESOURCES: dict[str, tuple[str, str]] = {
    "Namespace": ("core.v1", "Namespace"),
    "Secret": ("core.v1", "Secret"),
    "ConfigMap": ("core.v1", "ConfigMap"),
    "PersistentVolumeClaim": ("core.v1", "PersistentVolumeClaim"),
    "NetworkPolicy": ("networking.v1", "NetworkPolicy"),
    "ServiceAccount": ("core.v1", "ServiceAccount"),
    "Role": ("rbac.v1", "Role"),
    "RoleBinding": ("rbac.v1", "RoleBinding"),
    "Ingress": ("networking.v1", "Ingress"),
    "PodGroup": ("apiextensions", "CustomResource"),
    "Service": ("core.v1", "Service"),
    "Job": ("batch.v1", "Job"),
    "Deployment": ("apps.v1", "Deployment"),
}


def resource_class(kind: str) -> Callable[..., pulumi.CustomResource]:
    """The pulumi_kubernetes resource a child of `kind` is registered as."""
    module, name = RESOURCES[kind]
    return getattr(importlib.import_module(f"pulumi_kubernetes.{module}"), name)


# What an object is created after: a resource, or a gate (`sweep_gate`: an output that
# resolves, to nothing, once the object may be created; Pulumi awaits a dependency's outputs)
Wait = pulumi.Input[pulumi.Resource] | pulumi.Output[None]


class ExperimentComponent(pulumi.ComponentResource):
    """An AIchor experiment as Kubernetes objects: a headless Service and one Indexed Job per
    replica group, created in dependency order. `name` is the experiment name (shortened
    deterministically if Kubernetes host names derived from it would be too long)."""

    TYPE: ClassVar[str]
    OPERATORS: ClassVar[tuple[str, ...]]

    experiment: str
    namespace: str
    retained: list[str]  # `Kind/name` of what `pulumi destroy` leaves in the cluster
    plan: Plan
    jobs: dict[str, Job]  # by group (`worker-0`, … where each replica has one), created in order
    jobs_after: dict[str, list[str]]  # each Job's Jobs it is created after (their awaits held)
    sweep_objects: list[pulumi.Resource]  # its sweep's, as its first trial: the others wait
    outputs: dict[str, Any]

    def __init__(
        self,
        name: str,
        manifest: Experiment,
        settings: Settings | None = None,
        opts: pulumi.ResourceOptions | None = None,
        after: Sequence[Wait] = (),
        progress_values: Credentials | None = None,
    ) -> None:
        """`after`: resources every object waits for (the namespace another experiment of
        the stack creates); `progress_values`: the progress receiver's credentials, made once
        for all the trials of a sweep (else the experiment makes its own)."""
        operator = manifest.spec.operator
        if operator not in self.OPERATORS:
            raise ValueError(
                f"{type(self).__name__} runs operator {', '.join(self.OPERATORS)}, not "
                f"'{operator}': use components.experiment() to pick the component"
            )
        settings = settings or Settings.default()
        # Every problem is raised here, before anything is registered: nothing is half-created.
        ctx = Context(planning.blueprint(manifest, settings, name), pulumi.get_stack())
        children = layout.build(ctx, settings.create_namespace)
        names = ctx.names
        self.experiment, self.namespace, self.plan = names.experiment, names.namespace, ctx.plan
        super().__init__(self.TYPE, name, None, opts)
        for warning in _warnings(ctx, children):
            pulumi.log.warn(warning, resource=self)
        self.retained = [f"{c.kind}/{c.object['metadata']['name']}" for c in children if c.retain]
        generated = {  # (the experiment's Secret and its sweep's: the values to put in)
            c: c.arguments["string_data"]
            for c in children
            if c.kind == "Secret" and c.suffix in (layout.GENERATED_SECRET, layout.SWEEP_SECRET)
        }
        keys = [k for data in generated.values() for k in data]
        self.secrets = self._secret_data(name, ctx, keys, progress_values)
        registered: dict[layout.Child, pulumi.Resource] = {}
        for child in children:
            depends_on = [*after, *(registered[c] for c in child.after)]
            args = child.arguments
            options = self._child(depends_on, child.timeout, child.retain)
            resource_name = f"{name}-{child.suffix}"
            if child.kind == "Namespace":
                # Named for the namespace, not the experiment: renaming the experiment on a
                # live stack must not create the namespace again (AlreadyExists) and then
                # delete it, with the new experiment in it, as the old name's resource. Its
                # name before is an alias: stacks created earlier keep their namespace.
                resource_name = f"namespace-{names.namespace}"
                options = pulumi.ResourceOptions.merge(
                    options,
                    pulumi.ResourceOptions(aliases=[pulumi.Alias(name=f"{name}-namespace")]),
                )
            if child in generated:
                args = {**args, "string_data": {k: self.secrets[k] for k in generated[child]}}
            elif child.kind == "Secret":  # a user's, given beside a custom resource
                values = ("data", "string_data")
                args = {k: pulumi.Output.secret(v) if k in values else v for k, v in args.items()}
            registered[child] = resource_class(child.kind)(resource_name, **args, opts=options)
        self._keep(ctx, children, registered)
        self.outputs = stack_outputs(ctx, self.secrets)
        self.register_outputs(self.outputs)

    def _keep(
        self, ctx: Context, children: list[layout.Child], registered: dict[layout.Child, Any]
    ) -> None:
        """The registered resources a program (or a later trial) refers to."""
        jobs = [c for c in children if c.kind == "Job"]
        self.jobs = {c.suffix: registered[c] for c in jobs}
        self.jobs_after = {c.suffix: [a.suffix for a in c.after if a.kind == "Job"] for c in jobs}
        self.created_namespace = next(
            (registered[c] for c in children if c.kind == "Namespace"), None
        )
        self.sweep_objects = [registered[c] for c in children if c.shared]
        # (what a later trial of a sweep waits for: `awaits.ENDED`)
        entry = ctx.entry_job()
        self.entry_job = next(registered[c] for c in jobs if c.object["metadata"]["name"] == entry)

    def _child(
        self,
        depends_on: Sequence[Wait] | None = None,
        timeout: int | None = None,
        retain: bool = False,
    ) -> pulumi.ResourceOptions:
        """Children have fixed names, so a change that replaces one deletes it first;
        `timeout` bounds an awaited one's create and update."""
        timeouts = None
        if timeout:
            timeouts = pulumi.CustomTimeouts(create=f"{timeout}s", update=f"{timeout}s")
        return pulumi.ResourceOptions(
            parent=self,
            depends_on=list(depends_on) if depends_on else None,  # type: ignore[arg-type]
            delete_before_replace=True,
            custom_timeouts=timeouts,
            retain_on_delete=retain or None,
        )

    def _secret_data(
        self, name: str, ctx: Context, keys: list[str], progress_values: Credentials | None
    ) -> dict[str, pulumi.Output[str]]:
        """Values for `keys` of the experiment's Secrets (its own, its sweep's), from Pulumi
        resources created once per stack (Ray's password, MPI's SSH key pair, Jupyter's token,
        the progress receiver's credentials), marked secret."""
        values: dict[str, pulumi.Output[str]] = {}
        if "password" in keys:
            values["password"] = self._password(f"{name}-password", 32)
        if "ssh-privatekey" in keys:
            key = pulumi_tls.PrivateKey(f"{name}-ssh-key", algorithm="ED25519", opts=self._child())
            values["ssh-privatekey"] = key.private_key_openssh
            values["ssh-publickey"] = key.public_key_openssh
        if jupyter.TOKEN_KEY in keys:
            values[jupyter.TOKEN_KEY] = self._password(f"{name}-jupyter-token", 48)
        marked: dict[str, pulumi.Output[str]] = {
            k: pulumi.Output.secret(v) for k, v in values.items()
        }
        if progress.TOKEN in keys:  # (marked where they are made: once for a whole sweep)
            marked |= progress_values or progress_credentials(
                name, [progress.host(ctx)], self._child()
            )
        return marked

    def _password(self, name: str, length: int) -> pulumi.Output[str]:
        return pulumi_random.RandomPassword(
            name, length=length, special=False, opts=self._child()
        ).result


class PyTorchJob(ExperimentComponent):
    """PyTorch distributed data parallel (Kubeflow PyTorchJob contract): `Master` + `Worker`
    or a single `worker` group; `MASTER_ADDR`/`RANK`/`WORLD_SIZE` and torchrun's `PET_*`."""

    TYPE = "aichor:index:PyTorchJob"
    OPERATORS = ("pytorch",)


class XGBoostJob(ExperimentComponent):
    """Distributed XGBoost (Kubeflow XGBoostJob contract): `Master` + `Worker` or a single
    `worker` group; rank 0 hosts the Rabit tracker (`MASTER_*`, `WORKER_*`, `DMLC_*`)."""

    TYPE = "aichor:index:XGBoostJob"
    OPERATORS = ("xgboost",)


class JaxJob(ExperimentComponent):
    """Multi-process JAX: `Worker` × N; each process passes `JAX_COORDINATOR_ADDRESS`,
    `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID` (or AIchor's `JAXOPERATOR_*`) to
    `jax.distributed.initialize()` (docs/frameworks/jax.md: why a call without them cannot
    work)."""

    TYPE = "aichor:index:JaxJob"
    OPERATORS = ("jax",)


class PaddleJob(ExperimentComponent):
    """PaddlePaddle (Kubeflow PaddleJob contract): `Worker` × N (collective) or `Master`
    parameter servers + `Worker` trainers; `python -m paddle.distributed.launch` finds rank 0
    through `PADDLE_MASTER` (`PADDLE_JOB_ID`, `PADDLE_NNODES`, …)."""

    TYPE = "aichor:index:PaddleJob"
    OPERATORS = ("paddle",)


class TFJob(ExperimentComponent):
    """TensorFlow (Kubeflow TFJob contract): `Chief`, `PS`, `Worker`, `Evaluator`, each replica
    with its `TF_CONFIG`; the other replicas end with the chief (or worker 0)."""

    TYPE = "aichor:index:TFJob"
    OPERATORS = ("tf",)


class MPIJob(ExperimentComponent):
    """MPI over SSH (Kubeflow MPI Operator v2 contract): `Worker` replicas run sshd, the
    `Launcher` runs the command (`mpirun …`) with the generated key and the hostfile, once
    every worker accepts SSH; the workers stop when the launcher has ended."""

    TYPE = "aichor:index:MPIJob"
    OPERATORS = ("mpi",)


class RayCluster(ExperimentComponent):
    """A Ray cluster for one experiment: the head (awaited until its GCS accepts connections),
    the worker pools, then the job that runs the command once every node has joined (or, for
    kuberay and a RayJob, the submitter); head and pools stop when the job ends (a RayJob's
    with `shutdownAfterJobFinishes`; a RayCluster's run until destroyed)."""

    TYPE = "aichor:index:RayCluster"
    OPERATORS = ("ray", "kuberay")


class JobSet(ExperimentComponent):
    """AIchor's jobset operator: each type is `count` Indexed Jobs `<exp>-<type>-<j>` of
    `completions` pods (`parallelisms` at once), with JobSet's variables (`JOB_INDEX`,
    `JOB_GLOBAL_INDEX`, …); the experiment succeeds when every Job has completed."""

    TYPE = "aichor:index:JobSet"
    OPERATORS = ("jobset",)


class BatchJob(ExperimentComponent):
    """AIchor's batchjob operator: the `Worker` type as one Indexed Job; each pod sees its
    `JOB_COMPLETION_INDEX`."""

    TYPE = "aichor:index:BatchJob"
    OPERATORS = ("batchjob",)


# The component of each operator: each class above says its own (`OPERATORS`)
COMPONENTS: dict[str, type[ExperimentComponent]] = {
    op: cls for cls in ExperimentComponent.__subclasses__() for op in cls.OPERATORS
}


def stack_outputs(ctx: Context, secrets: dict[str, pulumi.Output[str]]) -> dict[str, Any]:
    """The stack outputs contract (docs/outputs.md); `secrets`: the generated Secret's values."""
    names = ctx.names
    entry = ctx.entry_job()
    outputs: dict[str, Any] = {
        "experiment": names.experiment,
        "namespace": names.namespace,
        "framework": ctx.plan.framework,
        "entryPoint": entry,
        "addresses": dict(ctx.plan.addresses),
        "logs": f"kubectl logs -n {names.namespace} -f job/{entry}",
        **ctx.plan.totals(),
        **ctx.plan.outputs,
    }
    if len(ctx.plan.completes) > 1:  # several Jobs make the experiment: follow them all
        outputs["logs"] = (
            f"kubectl logs -n {names.namespace} -f --prefix --max-log-requests "
            f"{ctx.plan.pods} -l training.kubeflow.org/job-name={names.experiment}"
        )
    if ctx.blueprint.tensorboard:
        outputs["tensorboard"] = (
            f"kubectl port-forward -n {names.namespace} "
            f"svc/{tensorboard.name(ctx)} {tensorboard.PORT}"
        )
        logs = ctx.blueprint.tensorboard
        outputs["tensorboardLogs"] = f"{logs.path} ({logs.source}: {logs.why})"
    if ctx.shared_volume_claim:
        outputs["sharedVolume"] = ctx.shared_volume_claim
    if ctx.blueprint.jupyter:
        outputs["jupyter"] = (
            f"kubectl port-forward -n {names.namespace} svc/{jupyter.name(ctx)} "
            f"{jupyter.PORT}, then http://localhost:{jupyter.PORT}/?token=<jupyterToken>"
        )
        outputs["jupyterToken"] = secrets[jupyter.TOKEN_KEY]
    return outputs


def export(
    name: str, manifest: Experiment, settings: Settings | None = None
) -> ExperimentComponent:
    """The Pulumi program's body (`__main__.py`, `aichor_iac.up`): the experiment's component,
    a warning about what `pulumi destroy` keeps, its outputs as the stack's."""
    component = experiment(name, manifest, settings)
    _warn_kept(component)
    for key, value in component.outputs.items():
        pulumi.export(key, value)
    return component


def export_all(
    manifests: Sequence[Experiment], settings: Settings | None = None, stack: str = "dev"
) -> dict[str, ExperimentComponent]:
    """`export` for the experiments of a stack's manifest: one alone as `export` does; several
    (`experiments`) each with its outputs as one stack output named for it."""
    settings = settings or Settings.default()
    if len(manifests) == 1 and not (manifests[0].trial and manifests[0].trial.kept):
        (manifest,) = manifests
        name = settings.experiment_name or manifest.name_in(stack)
        return {name: export(name, manifest, settings)}
    found = experiments(manifests, settings, stack)
    for name, component in found.items():
        _warn_kept(component)
        pulumi.export(name, component.outputs)
    return found


def _warn_kept(component: ExperimentComponent) -> None:
    """What `pulumi destroy` keeps, and how a later `pulumi up` finds it again."""
    if component.retained and not pulumi.Config("kubernetes").get_bool("upsertExistingObjects"):
        # pulumi-kubernetes 4.29+ refuses to create what exists: a later `pulumi up` of this
        # stack would fail on what `pulumi destroy` leaves, instead of finding it again.
        pulumi.log.warn(
            f"`pulumi destroy` keeps {', '.join(component.retained)}; to find it again in a later "
            "`pulumi up` of this stack, run `pulumi config set kubernetes:upsertExistingObjects "
            "true` (or set aichor:deleteSharedVolume true to delete it)"
        )


def _warnings(ctx: Context, children: list[layout.Child]) -> list[str]:
    """What `pulumi up` logs on the component: the experiment's warnings (as `aichor-iac
    validate` shows them), and with aichor:check what would block it on the default
    provider's cluster (its `kubernetes:` config), so that a preview in review shows it."""
    blueprint = ctx.blueprint
    found = [
        w.format(planning.about(w, blueprint.manifest.source, "Pulumi config"))
        for w in planning.warnings(blueprint)
    ]
    if blueprint.settings.check:
        from .check import cluster

        kubernetes = pulumi.Config("kubernetes")
        connection = kubernetes.get("kubeconfig"), kubernetes.get("context")
        found += cluster.warnings([c.object for c in children], blueprint.settings, *connection)
    return found


def experiment(
    name: str,
    manifest: Experiment,
    settings: Settings | None = None,
    opts: pulumi.ResourceOptions | None = None,
    after: Sequence[Wait] = (),
    progress_values: Credentials | None = None,
) -> ExperimentComponent:
    """The component for the manifest's operator."""
    component = COMPONENTS[manifest.spec.operator]
    return component(name, manifest, settings, opts, after, progress_values)


def experiments(
    manifests: Sequence[Experiment], settings: Settings | None = None, stack: str = "dev"
) -> dict[str, ExperimentComponent]:
    """A component for each experiment of a stack, keyed by its name (each its own,
    `Experiment.name_in`): the stack's namespace, when the stack creates it, is created with
    the first and the others' objects wait for it; a sweep's objects (`layout.Child.shared`),
    with its first trial, and its other trials' objects wait for them. A trial that ended
    before (`Trial.kept`) has none."""
    settings = settings or Settings.default()
    if len(manifests) > 1 and settings.experiment_name:
        reason = (
            f"names one experiment, and the manifest holds {len(manifests)}: remove it (each "
            "experiment is named by its own name)"
        )
        raise ManifestError("Pulumi config", [Problem("aichor:experimentName", reason)])
    named = {settings.experiment_name or m.name_in(stack): m for m in manifests}
    shared = sweep_credentials(named, settings)
    found: dict[str, ExperimentComponent] = {}
    trials: dict[tuple[str, int], Made] = {}
    failures: dict[str, list[pulumi.Output[list[str]]]] = {}  # (`failed_counts`)
    after: list[pulumi.Resource] = []
    sweep_objects: dict[str, list[pulumi.Resource]] = {}  # (made with a sweep's first trial)
    say_kept(manifests)
    for name, manifest in named.items():
        trial = manifest.trial
        if trial is not None and trial.kept is not None:  # (ended before: not made again)
            trials[trial.sweep, trial.index] = (name, trial.kept)
            continue
        own = settings if not found else settings.updated("", create_namespace=False)
        waits: list[Wait] = list(after)
        if trial is not None:
            waits += sweep_objects.get(trial.sweep, [])
        if trial is not None and trial.waits_for is not None:  # (at most `parallel` at once)
            before = trials[trial.sweep, trial.waits_for]
            if isinstance(before, ExperimentComponent):
                waits.append(after_job(before.entry_job))
        if trial is not None and trial.counted:  # (created unless too many have failed)
            waits.append(sweep_gate(trial, failed_counts(trial, trials, failures)))
        credentials = shared.get(trial.sweep) if trial is not None else None
        found[name] = component = experiment(name, manifest, own, None, waits, credentials)
        if trial is not None:
            trials[trial.sweep, trial.index] = component
            sweep_objects.setdefault(trial.sweep, component.sweep_objects)
        if component.created_namespace is not None:
            after = [component.created_namespace]
    return found
