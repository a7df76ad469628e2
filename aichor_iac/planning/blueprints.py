"""From a validated manifest and the stack config to what the layers below read: the
experiment's names, its framework's plan and its platform env, or every problem that only shows
once they meet. The one path that decides validity: `aichor-iac validate`, `render`, `preview`
and `pulumi up` all go through `blueprint()`, so they agree on every input.

Pure: no Pulumi or Kubernetes import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Literal

from ..experiment.groups import MAX_JOBS
from ..experiment.model import Experiment, FailurePolicy, Spec
from ..experiment.trial import Trial
from ..frameworks import PLANNERS, Group, Names, Plan
from ..frameworks.base import INDEX_VAR
from ..problems import Problem
from ..settings import Settings
from . import naming
from .entrypoints import told_entrypoints
from .failures import failure_policy, restart_problems
from .gangs import Gang, gang

# Variables every replica gets from aichor-iac whatever the framework.
PLATFORM_VARS = (INDEX_VAR, "NVIDIA_VISIBLE_DEVICES")
# The types that may be multi-host TPU slices (one Job per slice, GKE's TPU variables).
TPU_SLICES = {("jax", "Worker"), ("ray", "Workers"), ("kuberay", "Workers")}
# Paths replicas (and TensorBoard) reach over the network: s3://, gs://, az://, hdfs://, …
OBJECT_STORAGE = re.compile(r"[a-z][a-z0-9+.-]*://")
# Where replicas write TensorBoard logs when TensorBoard has a volume of its own (a local
# directory of each replica, shipped to that volume as it grows).
TENSORBOARD_DIR = "/aichor/tensorboard"


@dataclass(frozen=True)
class TensorboardLogs:
    """Where an experiment's TensorBoard logs go, and why (docs/services.md, TensorBoard)."""

    source: Literal["path", "shared", "volume"]
    path: str  # AICHOR_TENSORBOARD_PATH of every replica, and what TensorBoard reads
    why: str


@dataclass(frozen=True)
class Blueprint:
    """One experiment, decided: what `k8s` turns into objects and components register."""

    manifest: Experiment
    settings: Settings
    names: Names
    plan: Plan
    platform_env: dict[str, str]  # AICHOR_* values, in a fixed order
    tensorboard: TensorboardLogs | None  # None: TensorBoard is not enabled
    jupyter: str | None  # the role whose pods run a Jupyter server (spec.debug.jupyter)

    @property
    def spec(self) -> Spec:
        return self.manifest.spec

    def apart(self, group: Group) -> bool:
        """Whether each of the group's replicas has a Job of its own: its container runs the
        image's entrypoint (nothing to compute in) and needs a value Kubernetes cannot derive
        from the completion index (RANK = index + 1, a value for replica 0 only). The
        operator makes one pod per replica with literal env; so does this, for that group."""
        origin = self.spec.origin
        kept = origin.kept.get(group.replica_type) if origin else None
        return kept is not None and kept.argv is None and bool(group.computed)

    @cached_property
    def failure(self) -> FailurePolicy:
        """The group restart it runs with (`max_restarts` 0: none)."""
        return failure_policy(self.spec, self.settings)

    @cached_property
    def gang(self) -> Gang | None:
        return gang(self.plan, self.settings)

    @property
    def network_policy(self) -> bool:
        """`aichor:networkPolicy`, by default on for an AIchor manifest and off for a custom
        resource (its operator adds no NetworkPolicy: its pods may fetch their data)."""
        if self.settings.network_policy is not None:
            return self.settings.network_policy
        return self.spec.origin is None


def blueprint(manifest: Experiment, settings: Settings | None = None, name: str = "") -> Blueprint:
    """The experiment named `name` (shortened if host names derived from it would not be DNS
    labels), or ManifestError naming each problem with the manifest's file and line."""
    settings = settings or Settings.default()
    planner = PLANNERS[manifest.spec.operator]
    draft = draft_plan(manifest, settings)
    manifest = told_entrypoints(manifest, draft, failure_policy(manifest.spec, settings), settings)
    spec = manifest.spec
    experiment = naming.experiment_name(
        name or manifest.name_in("experiment"), [(g.role, g.count) for g in draft.groups]
    )
    subdomain = spec.origin.subdomain if spec.origin else None
    names = Names(experiment, settings.namespace, settings.cluster_domain, subdomain)
    logs = tensorboard_logs(spec, settings)
    env = platform_env(spec, settings, logs)
    plan = arrange(planner(spec, names), settings, manifest.trial)
    result = Blueprint(manifest, settings, names, plan, env, logs, jupyter_role(spec, plan))
    problems = _problems(result)
    if problems:
        raise manifest.error(problems)
    return result


def draft_plan(manifest: Experiment, settings: Settings) -> Plan:
    """The framework's plan of the experiment before it is named: its groups, their roles,
    programs and counts."""
    names = Names("x", settings.namespace, settings.cluster_domain)
    return PLANNERS[manifest.spec.operator](manifest.spec, names)


def tensorboard_logs(spec: Spec, settings: Settings) -> TensorboardLogs | None:
    """The log location TensorBoard reads: the configured path, else the shared volume, else a
    volume of TensorBoard's own that every replica's logs are shipped to."""
    if not spec.tensorboard.enabled:
        return None
    if settings.tensorboard_path:
        why = "aichor:tensorboardPath is set: replicas write there and TensorBoard reads it"
        return TensorboardLogs("path", settings.tensorboard_path, why)
    shared = spec.storage.shared_volume
    if shared:
        path = f"{shared.mount_point.rstrip('/')}/tensorboard"
        why = "the shared volume: every replica writes there and TensorBoard mounts it read-only"
        return TensorboardLogs("shared", path, why)
    why = (
        "no log location is configured: each replica writes to a local directory whose new "
        "bytes are shipped to TensorBoard's own ReadWriteOnce volume"
    )
    return TensorboardLogs("volume", TENSORBOARD_DIR, why)


def arrange(plan: Plan, settings: Settings, trial: Trial | None = None) -> Plan:
    """The order Pulumi creates the groups' Jobs in, such that `pulumi up` never waits on
    itself. The provider holds every resource until the awaits of the resources it depends on
    hold (DESIGN §7), so:

    - with a gang scheduler, no Job waits for another: the gang's pods are scheduled only once
      all exist, so a Job held back (behind the Ray head's or MPI workers' readiness, or any
      group under `wait: ready`) would hold back the whole gang, its gate included;
    - under `wait: complete`, the Jobs awaited until they complete come after every other
      group, so nothing waits for them (their peers must run for them to complete); Jobs
      that do not need each other to run (jobset) keep the order they were given. So does a
      sweep's trial that a later one waits for (its entry point awaited until it ends): a
      master created after its workers, which it needs to end.

    Followers keep waiting (before their command) for the entry point's host even when it is now
    created after them: nothing awaits their pods before the entry point is created, and a
    follower that has seen the entry point resolve before its command starts cannot miss an
    entry point that ends quickly (a follower that must count it gone only once it has seen
    it, `leader_first=False`, stays that way only where the entry point's creation awaits
    the follower's readiness: Ray's head and pools, MPI's workers)."""
    if settings.gang_scheduler != "none":
        held = {g.role for g in plan.groups}  # every Job is created at once
    elif not (held := created_last(plan, settings, trial)):
        return plan
    groups = []
    for group in plan.groups:
        after = tuple(r for r in group.after if r not in held)
        if settings.gang_scheduler == "none" and group.role in held:  # last, after its peers
            after = tuple(g.role for g in plan.groups if g.role not in held)
        groups.append(replace(group, after=after))
    return replace(plan, groups=tuple(_topological(groups)))


def created_last(plan: Plan, settings: Settings, trial: Trial | None = None) -> set[str]:
    """The groups `arrange` creates after all the others, awaited until they end: those
    that complete the experiment, under `wait: complete` or in a trial a later one waits
    for (none with a gang scheduler, which creates every Job at once, or independent pods)."""
    if settings.gang_scheduler != "none" or plan.independent:
        return set()
    if settings.wait == "complete" or (trial is not None and trial.gates):
        return set(plan.completes)
    return set()


def _topological(groups: list[Group]) -> list[Group]:
    """The groups, each after the groups it is created after (stable otherwise)."""
    placed: list[Group] = []
    while len(placed) < len(groups):
        roles = {g.role for g in placed}
        ready = [g for g in groups if g not in placed and set(g.after) <= roles]
        if not ready:
            raise ValueError(f"groups created after each other: {[g.role for g in groups]}")
        placed += ready
    return placed


def jupyter_role(spec: Spec, plan: Plan) -> str | None:
    """Where `debug.jupyter` puts its server: beside the entry point, and for Ray on the head,
    where the driver's cluster is."""
    if not spec.debug.jupyter:
        return None
    return plan.jupyter_role or plan.entry_point


def platform_env(
    spec: Spec, settings: Settings, logs: TensorboardLogs | None = None
) -> dict[str, str]:
    """AICHOR_* values: the stack config's, else paths on the shared volume if any, and
    TensorBoard's log location."""
    shared = spec.storage.shared_volume
    defaults = {}
    if shared:
        root = shared.mount_point.rstrip("/")
        for name in ("INPUT", "OUTPUT", "TENSORBOARD", "LOGS"):
            defaults[f"AICHOR_{name}_PATH"] = f"{root}/{name.lower()}"
    if logs:
        defaults["AICHOR_TENSORBOARD_PATH"] = logs.path
    return settings.platform_env(defaults)


def _problems(blueprint: Blueprint) -> list[Problem]:
    """Problems only visible once the plan and the stack config meet the manifest."""
    return [
        *_env_problems(blueprint),
        *_tpu_problems(blueprint.spec),
        *_scheduling_problems(blueprint),
        *_gang_order_problems(blueprint),
        *_settings_problems(blueprint),
        *_job_problems(blueprint),
        *restart_problems(blueprint.spec, blueprint.plan, blueprint.failure),
    ]


def _env_problems(blueprint: Blueprint) -> list[Problem]:
    """The manifest's env names that aichor-iac sets itself."""
    spec, plan = blueprint.spec, blueprint.plan
    reserved = {*PLATFORM_VARS, *blueprint.platform_env}
    reserved |= {var.name for group in plan.groups for var in group.env}
    return [
        Problem(
            f"spec.env.{i}.name",
            f"{var.name} is set by aichor-iac for operator '{spec.operator}'; choose another name",
        )
        for i, var in enumerate(spec.env)
        if var.name in reserved
    ]


def _tpu_problems(spec: Spec) -> list[Problem]:
    """Multi-host TPU slices where the framework cannot spread one over several pods."""
    problems = []
    for type_name, group in spec.types.present().items():
        for i, one in enumerate(group if isinstance(group, list) else [group]):
            tpu = one.resources.accelerators.tpu
            if tpu and tpu.hosts > 1 and (spec.operator, type_name) not in TPU_SLICES:
                where = f"spec.types.{type_name}" + (f".{i}" if isinstance(group, list) else "")
                problems.append(
                    Problem(
                        f"{where}.resources.accelerators.tpu",
                        f"a {tpu.topology} slice of {tpu.hosts} hosts is a multi-host TPU slice, "
                        f"which only jax Workers and Ray worker pools can be: use a single-host "
                        f"topology ({tpu.tpu_chips_count} chips) here",
                    )
                )
    return problems


def _settings_problems(blueprint: Blueprint) -> list[Problem]:
    """Stack settings the experiment cannot run with: object storage behind the
    NetworkPolicy, non-root MPI workers."""
    settings, problems = blueprint.settings, []
    if blueprint.network_policy and not settings.egress_cidrs:
        stores = {"aichor:history": settings.history, "aichor:mlflow": settings.mlflow}
        for setting, url in stores.items():
            if url and not url.startswith(("/", "file:")):
                why = (
                    f"{url} is outside the experiment's NetworkPolicy, which lets pods reach "
                    "only each other and DNS: set aichor:egressCIDRs to its address ranges, or "
                    "aichor:networkPolicy: false"
                )
                problems.append(Problem(setting, why))
        for key, value in blueprint.platform_env.items():
            if OBJECT_STORAGE.match(value):
                setting = f"aichor:{key.removeprefix('AICHOR_').removesuffix('_PATH').lower()}Path"
                problems.append(
                    Problem(
                        setting,
                        f"{value} is object storage, which the experiment's NetworkPolicy does "
                        "not let pods reach (only each other and DNS): set aichor:egressCIDRs "
                        "to the storage's address ranges (or 0.0.0.0/0), or "
                        "aichor:networkPolicy: false",
                    )
                )
    not_root = {"runAsNonRoot": settings.run_as_non_root, "runAsUser": settings.run_as_user}
    if why := blueprint.plan.runs_as_root:
        problems += [
            Problem(f"aichor:{key}", f"{why}: leave it unset for {blueprint.plan.framework}")
            for key, value in not_root.items()
            if value  # (runAsUser 0 is root: fine)
        ]
    return problems


def _job_problems(blueprint: Blueprint) -> list[Problem]:
    """Too many Jobs, or two groups that would be the same Job."""
    plan, problems = blueprint.plan, []
    if plan.framework == "jobset" and len(plan.groups) > MAX_JOBS:
        problems.append(
            Problem(
                "spec.types",
                f"{len(plan.groups):,} Jobs in all (the types' counts); at most {MAX_JOBS:,}, "
                "each a resource of the stack: give a type more completions instead",
            )
        )
    apart = [g for g in plan.groups if blueprint.apart(g)]
    jobs = len(plan.groups) + sum(g.count - 1 for g in apart)
    if apart and jobs > MAX_JOBS:
        group = max(apart, key=lambda g: g.count)
        kept = blueprint.spec.origin.kept[group.replica_type]  # type: ignore[union-attr]
        reason = (
            f"{group.count:,} replicas whose image's entrypoint needs "
            f"{', '.join(group.computed)} per replica: a Job each, and at most {MAX_JOBS:,} "
            "Jobs in all (each a resource of the stack); give the entrypoint as the "
            "container's command to run them as one Indexed Job"
        )
        problems.append(Problem(f"{kept.path}.replicas", reason))
    roles = [g.role for g in plan.groups]
    for role in sorted({r for r in roles if roles.count(r) > 1}):
        problems.append(
            Problem(
                "spec.types",
                f"two groups would both be the Job {blueprint.names.job(role)}: rename one of them",
            )
        )
    return problems


def about(problem: Problem, manifest: str, stack: str | None = None) -> str:
    """The file a problem is about: the stack config for an `aichor:` key, else the
    manifest."""
    return (stack or "stack config") if problem.path.startswith("aichor:") else manifest


def _gang_order_problems(blueprint: Blueprint) -> list[Problem]:
    """A gang starts every pod at once: Jobs that must complete before others start (JobSet's
    `dependsOn: Complete`, a TrainJob's initializers) cannot be in one."""
    gang = blueprint.settings.gang_scheduler != "none"
    first = sorted({g.replica_type for g in blueprint.plan.groups if gang and g.gate == "complete"})
    reason = (
        "a gang starts every pod at once, and '{}' must complete before other Jobs are created "
        "(dependsOn: Complete): no gang can hold both; set aichor:gangScheduler: none, or run "
        "the earlier step in the same pods"
    )
    return [Problem("aichor:gangScheduler", reason.format(name)) for name in first]


def _scheduling_problems(blueprint: Blueprint) -> list[Problem]:
    """A custom resource's `schedulingPolicy` fills the gang's PodGroup: it needs one (its
    operator would ignore it without gang scheduling), and a gang it can complete."""
    origin, settings = blueprint.spec.origin, blueprint.settings
    policy = origin.scheduling if origin else None
    if policy is None:
        return []
    where, asked = policy.where, policy.scheduler
    if settings.gang_scheduler == "none":
        reason = (
            "fills the gang scheduler's PodGroup, and the stack schedules no gang: set "
            f"aichor:gangScheduler ({asked or 'volcano or coscheduling'}), or remove it"
        )
        return [Problem(where, reason)]
    if asked and asked != settings.gang_scheduler:
        reason = (
            f"asks for a {asked} gang, and the stack's aichor:gangScheduler is "
            f"{settings.gang_scheduler}: set it to {asked}"
        )
        return [Problem(where, reason)]
    size = blueprint.gang.size if blueprint.gang else 0
    if policy.min_available and policy.min_available > size:
        reason = (
            f"is more than the {size} pods of the gang that exist at once: no gang could ever "
            "start; give at most that many"
        )
        return [Problem(f"{where}.minAvailable", reason)]
    return []
