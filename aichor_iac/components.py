"""One Pulumi component per framework. They are thin: the framework's planner decides, the
`k8s` layer builds the objects, and `Experiment` registers them in order.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pulumi
from pulumi_kubernetes.batch.v1 import Job
from pulumi_kubernetes.core.v1 import Namespace, Service
from pulumi_kubernetes.meta.v1 import ObjectMetaArgs

from . import naming
from .frameworks import PLANNERS, Names, Plan
from .k8s import objects
from .manifest import Manifest
from .settings import Settings


class Experiment(pulumi.ComponentResource):
    """An AIchor experiment as Kubernetes objects: a headless Service and one Indexed Job per
    replica group, created in dependency order. `name` is the experiment name (shortened
    deterministically if Kubernetes host names derived from it would be too long)."""

    TYPE: ClassVar[str]
    OPERATORS: ClassVar[tuple[str, ...]]

    experiment: str
    namespace: str
    plan: Plan
    jobs: dict[str, Job]
    outputs: dict[str, Any]

    def __init__(
        self,
        name: str,
        manifest: Manifest,
        settings: Settings | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        operator = manifest.spec.operator
        if operator not in self.OPERATORS:
            raise ValueError(
                f"{type(self).__name__} runs operator {', '.join(self.OPERATORS)}, "
                f"not '{operator}': use {COMPONENTS[operator].__name__}"
                if operator in COMPONENTS
                else f"operator '{operator}' is not supported yet"
            )
        super().__init__(self.TYPE, name, None, opts)
        settings = settings or Settings()
        names = Names(
            naming.experiment_name(name, manifest), settings.namespace, settings.cluster_domain
        )
        self.experiment, self.namespace = names.experiment, names.namespace
        self.plan = PLANNERS[operator](manifest.spec, names)
        ctx = objects.Context(manifest.spec, self.plan, names, settings)

        first: list[pulumi.Resource] = []
        if settings.create_namespace:
            first.append(
                Namespace(
                    f"{name}-namespace",
                    metadata=ObjectMetaArgs(
                        name=names.namespace, labels={"app.kubernetes.io/part-of": "aichor"}
                    ),
                    opts=self._child(),
                )
            )
        service = Service(f"{name}-service", **objects.service(ctx), opts=self._child(first))
        self.jobs = {}
        for group in self.plan.groups:
            after = [service, *(self.jobs[role] for role in group.after)]
            self.jobs[group.role] = Job(
                f"{name}-{group.role}",
                **objects.job(ctx, group),
                opts=self._child(after, manifest.spec.timeout_seconds, settings.wait),
            )
        self.outputs = self._outputs(names)
        self.register_outputs(self.outputs)

    def _child(
        self,
        depends_on: list[pulumi.Resource] | None = None,
        timeout: int | None = None,
        wait: str = "none",
    ) -> pulumi.ResourceOptions:
        """Children have fixed names, so a change that replaces one deletes it first."""
        timeouts = None
        if timeout and wait != "none":
            timeouts = pulumi.CustomTimeouts(create=f"{timeout}s", update=f"{timeout}s")
        return pulumi.ResourceOptions(
            parent=self,
            depends_on=depends_on or None,
            delete_before_replace=True,
            custom_timeouts=timeouts,
        )

    def _outputs(self, names: Names) -> dict[str, Any]:
        entry = names.job(self.plan.entry_point)
        return {
            "experiment": names.experiment,
            "namespace": names.namespace,
            "framework": self.plan.framework,
            "entryPoint": entry,
            "addresses": dict(self.plan.addresses),
            "logs": f"kubectl logs -n {names.namespace} -f job/{entry}",
            **self.plan.totals(),
        }


class PyTorchJob(Experiment):
    """PyTorch distributed data parallel (Kubeflow PyTorchJob contract): `Master` + `Worker`
    or a single `worker` group; `MASTER_ADDR`/`RANK`/`WORLD_SIZE` and torchrun's `PET_*`."""

    TYPE = "aichor:index:PyTorchJob"
    OPERATORS = ("pytorch",)


class XGBoostJob(Experiment):
    """Distributed XGBoost (Kubeflow XGBoostJob contract): `Master` + `Worker` or a single
    `worker` group; rank 0 hosts the Rabit tracker (`MASTER_*`, `WORKER_*`, `DMLC_*`)."""

    TYPE = "aichor:index:XGBoostJob"
    OPERATORS = ("xgboost",)


class JaxJob(Experiment):
    """Multi-process JAX: `Worker` × N; `jax.distributed.initialize()` works with no arguments
    (`JAX_*`) and with AIchor's `JAXOPERATOR_*` names."""

    TYPE = "aichor:index:JaxJob"
    OPERATORS = ("jax",)


class TFJob(Experiment):
    """TensorFlow (Kubeflow TFJob contract): `Chief`, `PS`, `Worker`, `Evaluator`, each replica
    with its `TF_CONFIG`; the other replicas end with the chief (or worker 0)."""

    TYPE = "aichor:index:TFJob"
    OPERATORS = ("tf",)


COMPONENTS: dict[str, type[Experiment]] = {
    op: cls for cls in (PyTorchJob, XGBoostJob, JaxJob, TFJob) for op in cls.OPERATORS
}


def experiment(
    name: str,
    manifest: Manifest,
    settings: Settings | None = None,
    opts: pulumi.ResourceOptions | None = None,
) -> Experiment:
    """The component for the manifest's operator."""
    operator = manifest.spec.operator
    if operator not in COMPONENTS:
        raise ValueError(f"operator '{operator}' is not supported yet")
    return COMPONENTS[operator](name, manifest, settings, opts)
