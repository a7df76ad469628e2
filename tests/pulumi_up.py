"""`pulumi up` as the real engine runs it, over the registrations the offline engine records
(`aichor_iac.engine`), against a cluster: `Model` (pods as rules, instant) or `Live` (real
processes on the local cluster, aichor_iac/local.py).

The mock monitor answers every registration at once; the real engine does not. Each rule here
follows the provider or Kubernetes:

- A resource is created once every resource it depends on is created *and its await holds*
  (Pulumi registers dependents after their dependencies' Create returns; pulumi-kubernetes'
  Create returns only when the object's await condition holds).
- Awaits (pulumi-kubernetes `provider/pkg/await`): `pulumi.com/skipAwait: "true"` holds at
  once; `pulumi.com/waitFor` replaces the built-in await and holds when its JSONPath matches
  the live object (`waitfor_holds`: the provider's own parse and match rules over an RFC 9535
  evaluation, as in 4.24+); it never fails early, a failed Job just never matches. Without
  either, a Job is awaited until its `Complete` condition, and `up` fails at once on its
  `Failed` condition (`await/job.go`); a Deployment until its pod runs; Secrets, ConfigMaps,
  NetworkPolicies, Services and custom resources hold at once.
- Pods (Kubernetes, `Model`): the Job controller makes a Job's pods once it is created (and,
  with a Kueue queue-name label, once Kueue admits its Workload: the Job's pods at once,
  min(parallelism, completions), within the queue's quota of pods), at most `parallelism` of
  them at a time; with a gang scheduler (coscheduling / Volcano PodGroup) a gang's pods are
  scheduled only once `minMember` of them exist, counting only pods that have not ended under
  coscheduling (kube-scheduler's informer leaves finished pods out) and succeeded ones too
  under Volcano (its `ReadyTaskNum`); a pod first waits for its targets (a
  host: its pod was scheduled, as the headless Service publishes not-ready addresses; a port:
  that pod's command runs), then runs its command; a pod is Ready once its command runs. (The
  wait runs in the main container, so a real pod without a readiness probe is Ready already
  while it waits: the model is Ready later, never sooner, so an `up` it finishes also
  finishes for real.) `Live` gets all of this from aichor_iac/local.py and real programs instead.
- Programs (the frameworks' contracts, `Model`): replicas that rendezvous (every framework but
  jobset and batchjob) run until every replica of the experiment runs, then the entry point
  ends; a follower ends once the entry point it has seen is gone; jobset and batchjob pods end
  on their own.
- Lost nodes (`Model(losing=N)`): the first N running members of the plan's `rejoining` roles
  (an elastic job's; or of `losers`) each lose their node once: under `restartPolicy: OnFailure` the kubelet
  restarts the container in place (the pod waits for its targets and runs again, the others
  wait for it: torchrun's re-rendezvous), each restart counted against the Job's backoffLimit
  (Kubernetes: with OnFailure, the retries are the containers' restarts); otherwise the pod
  fails, and so does its Job.
- An update of a Job (`create` of a name it holds: a second `up` that resizes an elastic
  Indexed Job, completions and parallelism together): its pods below the new completions keep
  running as they are, those at or above it are removed (not failed), new indexes are made.

`up()` returns the creation order, raises `Deadlock` naming what waits for what when nothing
can move any more (`Model`: no rule applies; `Live`: nothing has changed for `stall`
seconds), or `Failed` when an awaited Job fails, as `pulumi up` does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from kube import KUEUE_QUEUE, gang_of

from aichor_iac.engine import Rendering, Resource
from aichor_iac.frameworks import Endpoint, Plan
from aichor_iac.k8s import awaits
from aichor_iac.local.prepare import Gate

INDEPENDENT = ("jobset", "batchjob")  # pods that end on their own: no rendezvous
ENDED = ("succeeded", "failed")  # a pod's states once its program has ended


def unarranged(plan: Any, settings: Any, trial: Any = None) -> Any:
    """`planning.arrange` as it was before it existed: each framework's own order (the tests
    that show that order deadlocking put it back)."""
    return plan


class Deadlock(Exception):
    """`pulumi up` would never finish: one line per wait that cannot end."""


class Failed(Exception):
    """`pulumi up` fails: an awaited Job failed."""


class Cluster(Protocol):
    """What `up()` needs from a cluster."""

    def create(self, obj: dict[str, Any]) -> None: ...
    def job_status(self, name: str) -> dict[str, Any]: ...
    def describe(self, name: str) -> str: ...
    def step(self, progressed: bool) -> bool:
        """Let the cluster act; False once nothing can change any more."""
        ...


def up(
    rendering: Rendering,
    cluster: Cluster,
    gates: dict[str, Gate] | None = None,
    before: set[str] = frozenset(),
) -> list[str]:
    """The order `pulumi up` creates the Kubernetes objects in (`Kind/name`), each created only
    once its dependencies' awaits hold, and a sweep's trial unless its sweep has failed
    (`gates`: `local.prepare.sweep_gates`); `Deadlock` when it would never finish, `Failed`
    when an awaited Job fails or a trial's gate refuses it. `before`: the URNs an earlier `up`
    created, unchanged: the engine neither creates them again nor waits for them."""
    objects = [r for r in rendering.resources if r.is_kubernetes and r.urn not in before]
    urns = {r.urn for r in objects}
    jobs = {r.inputs["metadata"]["name"]: r.urn for r in objects if r.kind == "Job"}
    # what each waits for: its dependencies, and a trial's gate the trials it counts (the
    # program holds its registration until each has ended: `sweep_order.sweep_gate`)
    waits = {
        r.urn: [d for d in r.dependencies if d in urns]  # (not `before`'s: held already)
        + [jobs[n] for n in (gates or {}).get(_instance(r), (0, []))[1] if n in jobs]
        for r in objects
    }
    created: list[Resource] = []
    done: set[str] = set()
    while True:
        progressed = False
        made = {r.urn for r in created}  # (a set: a sweep has thousands of objects)
        for r in objects:
            if r.urn in done:
                continue
            if r.urn not in made and all(d in done for d in waits[r.urn]):
                _check_gate(r, gates or {}, cluster)
                created.append(r)
                made.add(r.urn)
                cluster.create(r.inputs)
                progressed = True
            if r.urn in made and _await_holds(r, cluster):
                done.add(r.urn)
                progressed = True
        if len(done) == len(objects):
            return [_name(r) for r in created]
        if not cluster.step(progressed):
            raise Deadlock("\n".join(_diagnosis(objects, created, done, cluster)))


def _check_gate(r: Resource, gates: dict[str, Gate], cluster: Cluster) -> None:
    """`Failed` when `r` is of a trial whose sweep has failed: the program's registration of it
    raises (`sweep_order.sweep_gate`), and `up` fails."""
    limit, counted = gates.get(_instance(r), (0, []))
    failed = [n for n in counted if awaits.job_failed(cluster.job_status(n))]
    if counted and len(failed) >= limit:
        raise Failed(f"sweep failed ({', '.join(failed)}): {_name(r)} is not created")


def _instance(r: Resource) -> str | None:
    """The experiment an object is of."""
    return (r.inputs["metadata"].get("labels") or {}).get("app.kubernetes.io/instance")


def awaited(r: Resource) -> str:
    """What pulumi-kubernetes waits for before it reports `r` created."""
    return awaits.awaited(r.inputs)


def _await_holds(r: Resource, cluster: Cluster) -> bool:
    if awaits.awaited(r.inputs) in ("nothing", "its pod to run"):
        return True
    name = r.inputs["metadata"]["name"]
    try:
        return awaits.holds(r.inputs, cluster.job_status(name))
    except awaits.AwaitFailed:
        raise Failed(f"{_name(r)} failed ({cluster.describe(name)})") from None


def _name(r: Resource) -> str:
    return f"{r.kind}/{r.inputs['metadata']['name']}"


def _diagnosis(objects, created, done, cluster: Cluster) -> list[str]:
    lines = []
    for r in (r for r in created if r.urn not in done):
        held = [_name(o) for o in objects if o not in created and r.urn in o.dependencies]
        what = f"{_name(r)} (awaited until {awaited(r)}; pods: "
        what += f"{cluster.describe(r.inputs['metadata']['name'])})"
        if held:
            lines += [f"deadlock: {h} waits for {what}" for h in held]
        else:
            lines.append(f"deadlock: pulumi up waits for {what}")
    ended = [r for r in created if r.urn in done and r.kind == "Job"]  # (what they wait on)
    beside = [
        f"  beside it: {_name(r)} ({cluster.describe(r.inputs['metadata']['name'])})" for r in ended
    ]
    return (lines or ["deadlock: nothing can be created"]) + beside


@dataclass
class Pod:
    role: str
    index: int
    gang: str | None
    job: str = ""  # the Job that made it (the group's, or its replica's own)
    state: str = "pending"  # pending → waiting (for its targets) → running → ENDED
    seen_entry: bool = False
    created: bool = False  # made by the Job controller (pending until scheduled)
    restarts: int = 0  # its container's, in place (restartPolicy OnFailure)


@dataclass
class Model:
    """The experiment's pods under the rules in this module's docstring; `kueue_quota`: the
    pods Kueue's queue admits at once (None: any); `failing`: its entry point's pods fail
    where they would succeed."""

    plan: Plan
    experiment: str
    kueue_quota: int | None = None
    failing: bool = False  # its entry point's program fails (its Job gets `Failed`)
    losing: int = 0  # members of its `rejoining` roles that lose their node once each
    losers: tuple[str, ...] | None = None  # those roles, if not the plan's `rejoining`
    gangs: dict[str, tuple[int, bool]] = field(default_factory=dict)  # minMember, Volcano's
    pods: dict[tuple[str, int], Pod] = field(default_factory=dict)
    parallelism: dict[str, int] = field(default_factory=dict)  # Job -> its parallelism
    queued: dict[str, int] = field(default_factory=dict)  # Job -> its Workload's pods
    admitted: set[str] = field(default_factory=set)  # Jobs
    in_place: dict[str, int] = field(default_factory=dict)  # OnFailure Job -> its backoffLimit
    lost: int = 0  # members that have lost their node
    resized: dict[str, int] = field(default_factory=dict)  # role -> its count since an update

    def create(self, obj: dict[str, Any]) -> None:
        if obj["kind"] == "PodGroup":
            volcano = "volcano" in obj["apiVersion"]
            self.gangs[obj["metadata"]["name"]] = (int(obj["spec"]["minMember"]), volcano)
        if obj["kind"] != "Job":
            return
        name, spec = obj["metadata"]["name"], obj["spec"]
        role = obj["metadata"]["labels"]["app.kubernetes.io/component"]
        if name in self.parallelism:  # an update: the Job controller resizes it
            self._resize(obj, role)
            return
        self.parallelism[name] = spec["parallelism"]
        if spec["template"]["spec"].get("restartPolicy") == "OnFailure":
            self.in_place[name] = spec.get("backoffLimit", 6)
        if KUEUE_QUEUE in (obj["metadata"].get("labels") or {}):
            self.queued[name] = min(spec["parallelism"], spec["completions"])
        if spec["completionMode"] == "Indexed":
            indices = range(spec["completions"])
        else:  # a replica's Job of its own: one pod, with that replica's host name
            indices = [int(spec["template"]["spec"]["hostname"].rsplit("-", 1)[1])]
        for i in indices:
            self.pods[(role, i)] = Pod(role, i, gang_of(obj), name)

    def _resize(self, obj: dict[str, Any], role: str) -> None:
        """An Indexed Job's new completions (and parallelism): the indexes past it removed,
        new ones made pending; the others' pods untouched."""
        name, spec = obj["metadata"]["name"], obj["spec"]
        self.parallelism[name], self.resized[role] = spec["parallelism"], spec["completions"]
        for key in [k for k, p in self.pods.items() if p.job == name]:
            if key[1] >= spec["completions"]:
                del self.pods[key]
        for i in range(spec["completions"]):
            self.pods.setdefault((role, i), Pod(role, i, gang_of(obj), name))

    def of_job(self, name: str) -> list[Pod]:
        return [p for p in self.pods.values() if p.job == name]

    def job_status(self, name: str) -> dict[str, Any]:
        pods = self.of_job(name)
        status = {
            "active": sum(p.state in ("waiting", "running") for p in pods),
            "ready": sum(p.state == "running" for p in pods),
            "succeeded": sum(p.state == "succeeded" for p in pods),
            "failed": sum(p.state == "failed" for p in pods),
        }
        spent = name in self.in_place and sum(p.restarts for p in pods) > self.in_place[name]
        if status["failed"] or spent:  # (no retry: the program fails alike each time)
            status["conditions"] = [{"type": "Failed", "status": "True"}]
        elif pods and status["succeeded"] == len(pods):
            status["conditions"] = [{"type": "Complete", "status": "True"}]
        return {k: v for k, v in status.items() if v}

    def describe(self, name: str) -> str:
        return ", ".join(
            f"{p.role}-{p.index} {p.state}" + (f" ({self._why(p)})" if p.state == "pending" else "")
            for p in self.of_job(name)
        )

    def _why(self, pod: Pod) -> str:
        """Why a pending pod waits (as `LocalCluster.why_pending` says it)."""
        if pod.job in self.queued and pod.job not in self.admitted:
            return "its Job is suspended until Kueue admits it"
        if not pod.created:
            return f"not created: the Job runs {self.parallelism[pod.job]} pods at a time"
        if pod.gang and not self._gang_holds(pod.gang):
            size = self.gangs[pod.gang][0]
            return f"unschedulable: PodGroup {pod.gang} has {self._gang_count(pod.gang)} of {size} pods"
        return "scheduled"

    def group(self, role: str) -> list[Pod]:
        return [p for p in self.pods.values() if p.role == role]

    def pod_at(self, host: str) -> list[Pod]:
        """The pods a host stands for: a pod's host, a group's `$i` pattern, a group's
        Service (Ray's head)."""
        first = host.split(".")[0]
        for service, role in self.plan.services.items():
            if first == service:
                return self.group(role) or [Pod(role, -1, None)]
        for role in sorted({g.role for g in self.plan.groups}, key=len, reverse=True):
            index = first.removeprefix(f"{self.experiment}-{role}-")
            if index == "$i":
                return self.group(role) or [Pod(role, -1, None)]
            if index.isdigit():
                return [self.pods.get((role, int(index)), Pod(role, int(index), None))]
        raise AssertionError(f"no pod is {host}")

    def step(self, progressed: bool) -> bool:
        """One round of what the cluster does; whether anything changed."""
        changed = self._admit() or progressed
        groups = {g.role: g for g in self.plan.groups}
        for pod in list(self.pods.values()):
            group = groups[pod.role]
            if pod.state == "pending":
                if pod.job in self.queued and pod.job not in self.admitted:
                    continue  # suspended by Kueue
                if not pod.created:
                    active = [p for p in self.of_job(pod.job) if p.created and p.state not in ENDED]
                    if len(active) >= self.parallelism[pod.job]:  # the Job's parallelism
                        continue
                    pod.created, changed = True, True
                if self._gang_holds(pod.gang):
                    pod.state, changed = "waiting", True
            elif pod.state == "waiting":
                if all(self._holds(t, pod) for t in group.waits):
                    pod.state, changed = "running", True
            elif pod.state == "running" and self._loses(pod):
                changed = True
            elif pod.state == "running":
                entry = self.pod_at(group.follows) if group.follows else []
                if entry and entry[0] is not pod:  # one following its own host just runs
                    if entry[0].state == "running" and not pod.seen_entry:
                        pod.seen_entry, changed = True, True
                    gone = entry[0].state in ENDED
                    if gone and (pod.seen_entry or group.sees_entry_first):
                        pod.state, changed = "succeeded", True
                elif self._done(pod):
                    fails = self.failing and pod.role == self.plan.entry_point
                    pod.state, changed = "failed" if fails else "succeeded", True
        return changed

    def _loses(self, pod: Pod) -> bool:
        """Whether the running pod loses its node now (`losing`): restarted in place under
        OnFailure (it waits for its targets again), else failed."""
        roles = self.plan.rejoining if self.losers is None else self.losers
        if self.lost >= self.losing or pod.role not in roles or pod.restarts:
            return False
        self.lost += 1
        if pod.job in self.in_place:
            pod.state, pod.restarts = "waiting", pod.restarts + 1
        else:
            pod.state = "failed"
        return True

    def _admit(self) -> bool:
        """Kueue admits the queued Jobs whose Workloads fit what finished Jobs left free."""
        done = {job for job in self.admitted if self.job_status(job).get("conditions")}
        used = sum(self.queued[j] for j in self.admitted - done)
        admitted = False
        for job, pods in self.queued.items():
            if job not in self.admitted and (
                self.kueue_quota is None or used + pods <= self.kueue_quota
            ):
                self.admitted.add(job)
                used, admitted = used + pods, True
        return admitted

    def _gang_holds(self, gang: str | None) -> bool:
        """Whether the gang's pods are scheduled: `minMember` of them exist (made by the Job
        controller), counting succeeded ones only under Volcano."""
        return gang is None or self._gang_count(gang) >= self.gangs[gang][0]

    def _gang_count(self, gang: str) -> int:
        ended = ("failed",) if self.gangs[gang][1] else ENDED
        members = [p for p in self.pods.values() if p.gang == gang and p.created]
        return sum(p.state not in ended for p in members)

    def _holds(self, target: Endpoint, me: Pod) -> bool:
        pods = [p for p in self.pod_at(target.host) if (p.role, p.index) != (me.role, me.index)]
        if target.port is None:  # resolves: the pod exists and was scheduled
            return all(p.state != "pending" and p.index >= 0 for p in pods)
        return all(p.state == "running" for p in pods)

    def _done(self, pod: Pod) -> bool:
        """A pod that follows nobody (an entry point, or independent work) ends when its
        program does: at once when independent, else once every replica runs."""
        if self.plan.framework in INDEPENDENT:
            return True
        counts = {g.role: self.resized.get(g.role, g.count) for g in self.plan.groups}
        everyone = [(role, i) for role, count in counts.items() for i in range(count)]
        return all(
            key in self.pods and self.pods[key].state in ("running", *ENDED) for key in everyone
        )


@dataclass
class Trials:
    """The trials of a sweep on one cluster, each its own `Model` (routed by the
    `app.kubernetes.io/instance` label); `running`: the most trials that ever had pods not
    ended at once."""

    models: dict[str, Model]  # by experiment
    jobs: dict[str, Model] = field(default_factory=dict)  # by Job
    running: int = 0

    def create(self, obj: dict[str, Any]) -> None:
        trial = obj["metadata"]["labels"].get("app.kubernetes.io/instance")
        if trial is None:  # (the sweep's own: its progress Secret and NetworkPolicy)
            return
        model = self.models[trial]
        model.create(obj)
        if obj["kind"] == "Job":
            self.jobs[obj["metadata"]["name"]] = model

    def job_status(self, name: str) -> dict[str, Any]:
        return self.jobs[name].job_status(name)

    def describe(self, name: str) -> str:
        return self.jobs[name].describe(name)

    def step(self, progressed: bool) -> bool:
        changed = [model.step(progressed) for model in self.models.values()]
        now = sum(
            any(p.state not in ENDED for p in model.pods.values()) for model in self.models.values()
        )
        self.running = max(self.running, now)
        return any(changed)


class Live:
    """The cluster's answers from real processes: `aichor_iac/local.py`'s `LocalCluster` runs each
    Job's pods from the moment `up()` creates it. Nothing can change any more once no pod has
    changed state (and `up()` has created or seen nothing new) for `stall` seconds (a minute
    unless a case says: a restart's stop and a framework's start can take 20 s on busy cores)."""

    def __init__(self, local: Any, stall: float = 60.0) -> None:
        self.local, self.stall = local, stall
        self.last_change, self.seen = time.monotonic(), dict(local.state)

    def create(self, obj: dict[str, Any]) -> None:
        if obj["kind"] == "Job":
            self.local.start(obj["metadata"]["name"], timeout=600)

    def job_status(self, name: str) -> dict[str, Any]:
        return self.local.job_status(name)

    def describe(self, name: str) -> str:
        """Each pod of Job `name`: its state, and its last lines (what a stall is waiting on)."""
        said = []
        for pod, state in self.local.state.items():
            if pod.rsplit("-", 1)[0] != name:
                continue
            why = f" ({self.local.why_pending(pod)})" if state == "pending" else ""
            last = self.local.node.files.output(pod).splitlines()[-3:]
            said.append(f"{pod} {state}{why}" + (f": {' | '.join(last)}" if last else ""))
        return ", ".join(said)

    def step(self, progressed: bool) -> bool:
        time.sleep(0.2)
        now, states = time.monotonic(), dict(self.local.state)
        if progressed or states != self.seen:
            self.last_change, self.seen = now, states
        return now - self.last_change < self.stall
