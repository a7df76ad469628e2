"""`pulumi up` as the real engine runs it, modelled over the registrations the offline engine
records (`aichor_iac.engine`), with the experiment's pods as a cluster would run them.

The mock monitor answers every registration at once; the real engine does not. Each rule here
follows the provider or Kubernetes:

- A resource is created once every resource it depends on is created *and its await holds*
  (Pulumi registers dependents after their dependencies' Create returns; pulumi-kubernetes'
  Create returns only when the object's await condition holds).
- Awaits (pulumi-kubernetes `await` package, `pulumi.com/*` annotations): `skipAwait: "true"`
  holds at once; `waitFor: jsonpath={.status.ready}=N` replaces the built-in await and holds
  when N pods of the Job are Ready; a Job without either is awaited until it completes (all its
  pods succeeded); Secrets, ConfigMaps, NetworkPolicies and custom resources hold at once; a
  Deployment holds once its pod runs.
- Pods (Kubernetes): a Job's pods exist once it is created, at most `parallelism` of them
  running at once (the others wait for a finished one); with a gang scheduler
  (coscheduling / Volcano PodGroup), a gang's pods are scheduled only once `minMember` of them
  exist; a pod's init containers wait for their targets (a host: its pod exists, the headless
  Service publishes not-ready addresses; a port: that pod's main container runs); a pod is
  Ready while its main container runs.
- Programs (the frameworks' contracts): replicas that rendezvous (every framework but jobset
  and batchjob) run until every replica of the experiment runs, then the entry point ends;
  a follower ends once the entry point it has seen is gone; jobset and batchjob pods end on
  their own.

`up()` returns the creation order, or raises `Deadlock` naming what waits for what.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from aichor_iac.engine import Rendering
from aichor_iac.frameworks import Endpoint, Plan

INDEPENDENT = ("jobset", "batchjob")  # pods that end on their own: no rendezvous


class Deadlock(Exception):
    """`pulumi up` would never finish: one line per wait that cannot end."""


@dataclass
class Pod:
    role: str
    index: int
    gang: str | None
    state: str = "pending"  # pending → waiting (init) → running → succeeded
    seen_entry: bool = False


@dataclass
class Cluster:
    plan: Plan
    experiment: str
    gang_sizes: dict[str, int]
    pods: dict[tuple[str, int], Pod] = field(default_factory=dict)
    parallelism: dict[str, int] = field(default_factory=dict)

    def create(self, role: str, count: int, parallelism: int, gang: str | None) -> None:
        self.parallelism[role] = parallelism
        for i in range(count):
            self.pods[(role, i)] = Pod(role, i, gang)

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

    def step(self) -> bool:
        """One round of what the cluster does; whether anything changed."""
        changed = False
        groups = {g.role: g for g in self.plan.groups}
        for pod in list(self.pods.values()):
            group = groups[pod.role]
            if pod.state == "pending":
                members = [p for p in self.pods.values() if p.gang == pod.gang]
                active = [p for p in self.group(pod.role) if p.state in ("waiting", "running")]
                if len(active) >= self.parallelism[pod.role]:  # the Job's parallelism
                    continue
                if pod.gang is None or len(members) >= self.gang_sizes[pod.gang]:
                    pod.state, changed = "waiting", True
            elif pod.state == "waiting":
                targets = list(group.waits_for)
                if group.follows and group.leader_first:  # starts once the entry resolves
                    targets.append(Endpoint(group.follows))
                if all(self._holds(t, pod) for t in targets):
                    pod.state, changed = "running", True
            elif pod.state == "running":
                entry = self.pod_at(group.follows) if group.follows else []
                if entry and entry[0] is not pod:  # one following its own host just runs
                    if entry[0].state == "running" and not pod.seen_entry:
                        pod.seen_entry, changed = True, True
                    gone = entry[0].state == "succeeded"
                    if gone and (pod.seen_entry or group.leader_first):
                        pod.state, changed = "succeeded", True
                elif self._done(pod):
                    pod.state, changed = "succeeded", True
        return changed

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
        everyone = [(g.role, i) for g in self.plan.groups for i in range(g.count)]
        return all(
            key in self.pods and self.pods[key].state in ("running", "succeeded")
            for key in everyone
        )


def up(rendering: Rendering, plan: Plan, experiment: str, rounds: int = 1000) -> list[str]:
    """The order `pulumi up` creates the Kubernetes objects in (`Kind/name`), each created only
    once its dependencies' awaits hold; `Deadlock` when it would never finish."""
    objects = [r for r in rendering.resources if r.is_kubernetes]
    name = {r.urn: f"{r.kind}/{r.inputs['metadata']['name']}" for r in objects}
    by_urn = {r.urn: r for r in objects}
    gangs = {
        r.inputs["metadata"]["name"]: int(r.inputs["spec"]["minMember"])
        for r in objects
        if r.kind == "PodGroup"
    }
    cluster = Cluster(plan, experiment, gangs)
    role_of = {f"{experiment}-{g.role}": g for g in plan.groups}
    created: list[str] = []
    done: set[str] = set()
    for _ in range(rounds):
        progressed = cluster.step()
        for r in objects:
            if r.urn in done:
                continue
            if r.urn not in created and all(d in done for d in r.dependencies if d in by_urn):
                created.append(r.urn)
                progressed = True
                if r.kind == "Job":
                    group = role_of[r.inputs["metadata"]["name"]]
                    labels = r.inputs["spec"]["template"]["metadata"]["labels"]
                    annotations = r.inputs["spec"]["template"]["metadata"].get("annotations") or {}
                    gang = labels.get("scheduling.x-k8s.io/pod-group") or annotations.get(
                        "scheduling.k8s.io/group-name"
                    )
                    spec = r.inputs["spec"]
                    cluster.create(group.role, spec["completions"], spec["parallelism"], gang)
            if r.urn in created and _await_holds(r, cluster, role_of):
                done.add(r.urn)
                progressed = True
        if len(done) == len(objects):
            return [name[u] for u in created]
        if not progressed:
            break
    raise Deadlock("\n".join(_diagnosis(objects, name, created, done, cluster, role_of)))


def _await(r: Any) -> str:
    """What pulumi-kubernetes waits for before it reports `r` created."""
    annotations = r.inputs["metadata"].get("annotations") or {}
    if annotations.get("pulumi.com/skipAwait") == "true":
        return "nothing"
    if "pulumi.com/waitFor" in annotations:
        return annotations["pulumi.com/waitFor"]
    return {"Job": "completion", "Deployment": "its pod to run"}.get(r.kind, "nothing")


def _await_holds(r: Any, cluster: Cluster, role_of: dict) -> bool:
    condition = _await(r)
    if condition in ("nothing", "its pod to run"):
        return True
    pods = cluster.group(role_of[r.inputs["metadata"]["name"]].role)
    if condition == "completion":
        return bool(pods) and all(p.state == "succeeded" for p in pods)
    match = re.fullmatch(r"jsonpath=\{\.status\.ready\}=(\d+)", condition)
    assert match, f"no model for {condition}"
    return sum(p.state == "running" for p in pods) >= int(match.group(1))


def _diagnosis(objects, name, created, done, cluster, role_of) -> list[str]:
    lines = []
    stuck = [r for r in objects if r.urn in created and r.urn not in done]
    for r in stuck:
        pods = cluster.group(role_of[r.inputs["metadata"]["name"]].role)
        states = ", ".join(f"{p.role}-{p.index} {p.state}" for p in pods)
        held = [name[o.urn] for o in objects if o.urn not in created and r.urn in o.dependencies]
        what = f"{name[r.urn]} (awaited until {_await(r)}; pods: {states})"
        if held:
            lines += [f"deadlock: {h} waits for {what}" for h in held]
        else:
            lines.append(f"deadlock: pulumi up waits for {what}")
    return lines or ["deadlock: nothing can be created"]
