"""What a custom resource says beyond the AIchor manifest: the parts of the neutral description
of an experiment that only the Kubeflow and KubeRay front doors fill in.

Every front door produces one validated `Spec` (framework, groups with their counts and
resources, policies). A Kubeflow or KubeRay custom resource also brings, for each replica type,
the pod template its user wrote, which is kept as it is; and options the operator reads (run
policy, PyTorch's elastic policy). `Spec.origin` holds them; None for an AIchor manifest, whose
pods aichor-iac builds from the manifest's resources. Pure data: no Pulumi or Kubernetes import.
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .options import JobSetOptions, RayOptions

RestartPolicy = Literal["Never", "OnFailure", "ExitCode"]
# Exit codes the Training Operator counts as permanent under `restartPolicy: ExitCode`
# (1-127: the program's own failure); 128 and above (killed by a signal) are retried.
PERMANENT_EXIT_CODES = tuple(range(1, 128))


@dataclass(frozen=True)
class Kept:
    """One replica type's pod template, as the user wrote it (Kubernetes JSON).

    `container` names the operator's container (PyTorchJob's `pytorch`, or the first): it gets
    the operator's env and ports, and runs its command after the wait for peers. With
    `ExitCode`, exit codes 1-127 fail the experiment at once and others are retried, as the
    Training Operator does; `backoff_limit` counts the retries of the replica type's Job."""

    path: str  # where the custom resource gives it (spec.pytorchReplicaSpecs.Worker)
    template: dict[str, Any]
    container: str
    restart_policy: RestartPolicy
    backoff_limit: int
    # The Job's own fields the resource gives beside (a JobSet's Job template: its pod failure
    # policy, deadline, …): Kubernetes' Job controller runs them, kept as written
    job: dict[str, Any] = field(default_factory=dict)
    # The Job objects' own labels and annotations (a JobSet's Job template metadata)
    job_labels: dict[str, str] = field(default_factory=dict)
    job_annotations: dict[str, str] = field(default_factory=dict)
    # Where the resource gives the template, when not at `{path}.template` (a RayJob's
    # submitterPodTemplate); and the fields of the operator's container it gives elsewhere (a
    # TrainJob's trainer: `resources` -> `spec.trainer.resourcesPerNode`)
    template_path: str | None = None
    given: dict[str, str] = field(default_factory=dict)

    def placed(self, where: str) -> str:
        """The field of the resource that a path of the template comes from, `where` as
        `limits` names it (`spec.containers[node].resources`): list items by their index in
        the template as written, the operator container's given fields where they are."""
        steps = [s for s in re.split(r"\.|(\[[^\]]*\])", where) if s]
        node: Any = self.template
        out: list[str] = []
        for i, step in enumerate(steps):
            if step.startswith("[") and isinstance(node, list):
                key = step[1:-1]
                names = [item.get("name") if isinstance(item, dict) else None for item in node]
                index = names.index(key) if key in names else int(key) if key.isdigit() else -1
                if not 0 <= index < len(node):
                    break
                if out[-1:] == ["containers"] and key == self.container:
                    field_name = steps[i + 1] if i + 1 < len(steps) else None
                    if field_name in self.given:
                        return self.given[field_name]
                out.append(str(index))
                node = node[index]
            elif step.startswith("[") and isinstance(node, dict):  # a map's key (`['a/b']`)
                out.append(str(ast.literal_eval(step[1:-1])))
                break
            elif isinstance(node, dict) and step in node:
                out.append(step)
                node = node[step]
            else:
                out.append(step)
                break
        return ".".join([self.template_path or f"{self.path}.template", *out])

    @property
    def main(self) -> dict[str, Any]:
        return next(c for c in self.template["spec"]["containers"] if c["name"] == self.container)

    @property
    def index(self) -> int:
        """The position of the operator's container in the template's containers."""
        names = [c["name"] for c in self.template["spec"]["containers"]]
        return names.index(self.container)

    @property
    def argv(self) -> list[str] | None:
        """The container's command and args, or None when it runs the image's entrypoint."""
        main = self.main
        if not main.get("command"):
            return None
        return [*main["command"], *main.get("args", [])]

    def running(self, entrypoint: list[str]) -> Kept:
        """This template with its container running `entrypoint` (what its image runs,
        as the user tells it) as its command, its args after it as Kubernetes runs them."""
        template = copy.deepcopy(self.template)
        main = next(c for c in template["spec"]["containers"] if c["name"] == self.container)
        # (`$$`: Kubernetes expands `$(VAR)` in a command, never in an image's entrypoint)
        main["command"] = [word.replace("$", "$$") for word in entrypoint]
        return replace(self, template=template)


@dataclass(frozen=True)
class Origin:
    """A custom resource the experiment was written as (`kind` of `api_version`)."""

    api_version: str
    kind: str
    kept: dict[str, Kept]  # replica type (canonical, e.g. Worker) -> its template
    ttl_seconds_after_finished: int | None = None
    suspend: bool = False
    # What the framework reads beside the templates: a Kubeflow kind's own spec fields as
    # written (camelCase), a KubeRay or JobSet resource's options, a batch/v1 Job's parallelism
    fields: dict[str, Any] = field(default_factory=dict)
    ray: RayOptions | None = None
    jobset: JobSetOptions | None = None
    parallelism: int | None = None
    queue: str | None = None  # the Kueue queue its label asks for
    # Objects given beside the resource (Kubernetes JSON: ConfigMaps, Services, Secrets, …,
    # `reading.companions`), created in the experiment's namespace before its pods
    companions: tuple[dict[str, Any], ...] = ()
    # The gang's PodGroup as the resource asks for it (`pod_group(scheduler)`: its spec)
    scheduling: Any = None
    # The pods' headless Service, when the resource names it (JobSet's `network.subdomain`)
    subdomain: str | None = None
    # Companions kept when the stack is destroyed (a JobSet's claims that say Retain)
    retained: tuple[str, ...] = ()

    def port(self, type_name: str, name: str) -> int:
        """The number of the port `name` on a replica type's operator container (the operator's
        defaulting has put it there unless the user did)."""
        ports = self.kept[type_name].main["ports"]
        return int(next(p["containerPort"] for p in ports if p.get("name") == name))

    @property
    def source(self) -> str:
        return f"{self.api_version} {self.kind}"
