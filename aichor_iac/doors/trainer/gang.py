"""A Trainer runtime's `podGroupPolicy` (v2.3.0, its coscheduling and volcano plugins): the
gang scheduler it asks for, and what its PodGroup holds beside minMember. The experiment's gang
(`gangs.Gang`) makes the PodGroup; the stack's `aichor:gangScheduler` must be the one named.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, PrivateAttr

from ...experiment.groups import Model
from ...reading import podtemplate as templates
from ...rules.limits import INT32

VOLCANO_QUEUE = "scheduling.volcano.sh/queue-name"


class Coscheduling(Model):
    schedule_timeout_seconds: int = Field(60, ge=0, le=INT32)


class Volcano(Model):
    network_topology: dict[str, Any] | None = None


class PodGroupPolicy(Model):
    """The runtime's gang (Trainer's coscheduling and volcano plugins): the scheduler it asks
    for, and what its PodGroup's spec holds beside minMember (the experiment's gang)."""

    coscheduling: Coscheduling | None = None
    volcano: Volcano | None = None
    _queue: str | None = PrivateAttr(None)  # (the runtime's Volcano queue annotation)

    where: ClassVar[str] = "spec.runtimeRef"  # (the runtime's, as its webhook reports it)
    min_available: ClassVar[None] = None

    @property
    def scheduler(self) -> str:
        return "volcano" if self.volcano is not None else "coscheduling"

    def pod_group(self, scheduler: str) -> dict[str, Any]:
        """scheduler-plugins' timeout, or Volcano's queue and network topology."""
        if self.coscheduling is not None:
            timeout = self.coscheduling.schedule_timeout_seconds
            return {"scheduleTimeoutSeconds": timeout} if timeout else {}
        spec: dict[str, Any] = {"queue": self._queue} if self._queue else {}
        if self.volcano and self.volcano.network_topology:
            spec["networkTopology"] = self.volcano.network_topology
        return spec


def with_queue(policy: PodGroupPolicy | None, metadata: Any) -> PodGroupPolicy | None:
    """The policy, with the Volcano queue the runtime template's annotation names."""
    if policy is None or policy.volcano is None:
        return policy
    annotations = templates.mapping(templates.mapping(metadata).get("annotations"))
    queue = annotations.get(VOLCANO_QUEUE)
    policy = policy.model_copy()
    policy._queue = queue if isinstance(queue, str) else None
    return policy
