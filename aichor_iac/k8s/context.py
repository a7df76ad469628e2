"""What every object of one experiment shares: its blueprint, its labels, names and pod
defaults, the await annotations and the containers' security context."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..experiment.model import Spec
from ..experiment.origin import Kept
from ..frameworks import Group, Names, Plan
from ..planning import Blueprint
from ..settings import Settings
from . import kinds
from .restart import Regroup, regroup_of

ENGINE_LABEL = "aichor.ai/engine-name"
GANG_SCHEDULERS = {"coscheduling": "scheduler-plugins-scheduler", "volcano": "volcano"}


@dataclass(frozen=True)
class Context:
    """What every object of one experiment shares: its blueprint, and the stack it is made in
    (its pods' keepers tag their MLflow runs with it; "": none said)."""

    blueprint: Blueprint
    stack: str = ""

    @property
    def spec(self) -> Spec:
        return self.blueprint.spec

    @property
    def plan(self) -> Plan:
        return self.blueprint.plan

    @property
    def names(self) -> Names:
        return self.blueprint.names

    @property
    def settings(self) -> Settings:
        return self.blueprint.settings

    def template(self, group: Group) -> Kept | None:
        """The pod template a custom resource gave `group`'s replica type, kept as written."""
        origin = self.spec.origin
        return origin.kept.get(group.replica_type) if origin else None

    def replicas(self, group: Group) -> tuple[int | None, ...]:
        """The group's Jobs, by the replica each runs: `(None,)` for one Indexed Job of every
        replica, `(0, 1, …)` where each replica has a Job of its own (`Blueprint.apart`)."""
        return tuple(range(group.count)) if self.blueprint.apart(group) else (None,)

    def job_name(self, group: Group, replica: int | None = None) -> str:
        """The Job of `replica` (None: the group's one Job), named as the pod's host."""
        role = group.role
        return self.names.job(role) if replica is None else self.names.pod_host(role, replica)

    def entry_job(self) -> str:
        """The name of the Job whose end is the experiment's end (its first, if the entry
        point's replicas have a Job each)."""
        first = next(g for g in self.plan.groups if g.role == self.plan.entry_point)
        return self.job_name(first, self.replicas(first)[0])

    @cached_property  # (asked for by every group's Job, container and ports)
    def regroup(self) -> Regroup | None:
        """Every replica's part in the group restart, if the experiment restarts as a group."""
        return regroup_of(self.blueprint)

    def labels(self, role: str | None = None, replica: bool = True) -> dict[str, str]:
        """Recommended labels; replicas also carry Kubeflow's, which dashboards select on."""
        labels = {
            "app.kubernetes.io/name": self.plan.framework,
            **self.experiment_selector(),
            "app.kubernetes.io/managed-by": "pulumi",
        }
        if self.spec.engine_name:  # AIchor's choice of cluster, kept for the record
            labels[ENGINE_LABEL] = self.spec.engine_name
        if trial := self.blueprint.manifest.trial:  # (what its sweep's objects select)
            labels[trial.label] = trial.sweep
        if replica:
            labels["training.kubeflow.org/job-name"] = self.names.experiment
        if role:
            labels["app.kubernetes.io/component"] = role
            if replica:
                labels["training.kubeflow.org/replica-type"] = role
        return labels

    def trial_annotations(self) -> dict[str, str]:
        """What its door puts on each object of a sweep's trial (an OptimizationJob's: the
        trial's values), on its Jobs and pods."""
        trial = self.blueprint.manifest.trial
        return dict(trial.annotations) if trial else {}

    def experiment_selector(self) -> dict[str, str]:
        """Every pod of the experiment (replicas and TensorBoard)."""
        return {
            "app.kubernetes.io/instance": self.names.experiment,
            "app.kubernetes.io/part-of": "aichor",
        }

    def selector(self) -> dict[str, str]:
        """The replicas only: the pods the headless Service names."""
        return {
            **self.experiment_selector(),
            "training.kubeflow.org/job-name": self.names.experiment,
        }

    def colocation(self, group: Group) -> tuple[dict[str, str], str] | None:
        """The labels of the pods `group`'s must share a node pool with (its own) and the
        topology key naming it, when they must (the hosts of a TPU slice)."""
        if not group.colocate:
            return None
        return {**self.selector(), "app.kubernetes.io/component": group.role}, group.colocate

    def metadata(
        self,
        name: str,
        role: str | None = None,
        annotations: dict[str, str] | None = None,
        replica: bool = True,
        labels: dict[str, str] | None = None,
    ) -> kinds.ObjectMetaArgs:
        return kinds.ObjectMetaArgs(
            name=name,
            namespace=self.names.namespace,
            labels={**self.labels(role, replica), **(labels or {})},
            annotations=annotations or None,
        )

    @property
    def shared_volume_claim(self) -> str | None:
        return f"{self.names.experiment}-shared" if self.spec.storage.shared_volume else None

    def platform_env(self) -> dict[str, str]:
        return self.blueprint.platform_env

    def gang_metadata(self, role: str) -> dict[str, dict[str, str]]:
        """How the pods of group `role` name their PodGroup, per gang scheduler (nothing for
        a group outside the gang: `gangs.Gang`)."""
        gang, pod_group = self.blueprint.gang, self.names.experiment
        if gang is None or role not in gang.roles:
            return {}
        if gang.scheduler == "coscheduling":
            return {"labels": {"scheduling.x-k8s.io/pod-group": pod_group}}
        return {"annotations": {"scheduling.k8s.io/group-name": pod_group}}

    @property
    def scheduler_name(self) -> str | None:
        return self.settings.scheduler_name or GANG_SCHEDULERS.get(self.settings.gang_scheduler)

    def pod_defaults(self) -> dict:
        """Pod spec fields every pod of the experiment shares."""
        pull = [kinds.LocalObjectReferenceArgs(name=n) for n in self.settings.image_pull_secrets]
        return dict(
            automount_service_account_token=False,
            enable_service_links=False,
            security_context=kinds.PodSecurityContextArgs(
                seccomp_profile=kinds.SeccompProfileArgs(type="RuntimeDefault"),
                run_as_non_root=self.settings.run_as_non_root or None,
                run_as_user=self.settings.run_as_user,
                run_as_group=self.settings.run_as_group,
                fs_group=self.settings.fs_group,
            ),
            image_pull_secrets=pull or None,
            priority_class_name=self.settings.priority_class_name,
        )


def container_security(spec: Spec, capabilities: tuple[str, ...] = ()) -> kinds.SecurityContextArgs:
    """Pod Security Standards "baseline", and of "restricted" all that ML images allow: every
    capability dropped but those a group's program needs (sshd) and ptrace if asked for."""
    add = sorted({*capabilities, *(["SYS_PTRACE"] if spec.security_context.ptrace else [])})
    return kinds.SecurityContextArgs(
        allow_privilege_escalation=False,
        capabilities=kinds.CapabilitiesArgs(drop=["ALL"], add=add or None),
    )


def secret_env(name: str, secret: str, key: str) -> kinds.EnvVarArgs:
    """A variable read from a Secret's key by the kubelet: the value is never in the spec."""
    ref = kinds.SecretKeySelectorArgs(name=secret, key=key)
    return kinds.EnvVarArgs(name=name, value_from=kinds.EnvVarSourceArgs(secret_key_ref=ref))
