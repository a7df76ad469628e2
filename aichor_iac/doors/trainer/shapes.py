"""TrainJobs written for the Trainer releases before `runtimePatches`, run as those releases ran
them: one `trainer.kubeflow.org/v1alpha1` API, three shapes of `spec` (DESIGN §9).

- v2.0.0: `labels` and `annotations` (the JobSet's, over the runtime template's) and
  `podSpecOverrides` (each a strategic merge of the override into the pod spec of every
  replicated Job it targets: `mergePodSpecOverrides` in pkg/runtime/core/trainingruntime.go);
- v2.1.0: the same labels and annotations, and `podTemplateOverrides` (the override's pod
  labels, annotations and spec, merged into the pod template: `mergePodTemplateOverrides`);
- v2.2.0+: `runtimePatches`, which say all of it: a strategic merge over the JobSet spec, patch
  by patch (`patches`).

Both earlier merges act on the runtime's template before the plugins, overrides in order, as
runtime patches do; so each override is the runtime patch that sets the same fields of the
Jobs it targets, and the TrainJob runs as its `runtimePatches` twin. A problem found in such a
patch is reported at the field the user wrote (`user_path`).
"""

from __future__ import annotations

import re
from typing import Any

PINNED = None  # (the pinned release's shape: runtimePatches)
V20, V21 = "v2.0.0", "v2.1.0"
MANAGER = "aichor-iac/{}"  # (a patch's manager: who wrote it, here the field it comes from)
POD = "trainingRuntimeSpec.template.spec.replicatedJobs"
# The fix for a field of one shape in a TrainJob of another (`reading.crd`'s unknown field),
# and for the runtime's fields written in a TrainJob (the API server refuses them there)
FIXES = {
    "spec.podSpecOverrides": "it is Trainer v2.0's; v2.1 renamed it podTemplateOverrides and "
    "v2.2 replaced it with runtimePatches: give one shape",
    "spec.podTemplateOverrides": "it is Trainer v2.1's, which v2.2 replaced with "
    "runtimePatches (this TrainJob gives runtimePatches too): write each override as a runtime "
    "patch (trainingRuntimeSpec.template.spec.replicatedJobs[].template.spec.template)",
    "spec.labels": "it is Trainer v2.0's and v2.1's, which v2.2 replaced with runtimePatches "
    "(this TrainJob gives runtimePatches too): give them in a runtime patch's "
    "trainingRuntimeSpec.template.metadata.labels",
    "spec.annotations": "it is Trainer v2.0's and v2.1's, which v2.2 replaced with "
    "runtimePatches (this TrainJob gives runtimePatches too): give them in a runtime patch's "
    "trainingRuntimeSpec.template.metadata.annotations",
    "spec.mlPolicy": "the ML policy belongs to the runtime (a TrainingRuntime's or "
    "ClusterTrainingRuntime's spec.mlPolicy), never to a TrainJob: move it there, or set "
    "spec.trainer.numNodes and numProcPerNode",
    "spec.podGroupPolicy": "the gang policy belongs to the runtime (a TrainingRuntime's or "
    "ClusterTrainingRuntime's spec.podGroupPolicy), never to a TrainJob: move it there",
}


def release(spec: Any) -> str | None:
    """The release whose TrainJob CRD `spec` is written for: v2.0.0 (podSpecOverrides), v2.1.0
    (podTemplateOverrides, or labels or annotations alone), else the pinned one (None)."""
    if not isinstance(spec, dict) or "runtimePatches" in spec:
        return PINNED
    if "podSpecOverrides" in spec and "podTemplateOverrides" not in spec:
        return V20
    if any(key in spec for key in ("podTemplateOverrides", "labels", "annotations")):
        return V21
    return PINNED


def as_patches(spec: dict[str, Any]) -> dict[str, Any]:
    """A TrainJob spec of an earlier shape (checked against its release's CRD) as the pinned
    release's: each override the runtime patch that sets the same fields of the Jobs it
    targets, in order; the labels and annotations the last patch's JobSet metadata."""
    old = ("labels", "annotations", "podSpecOverrides", "podTemplateOverrides")
    patches = [
        _patch(f"podSpecOverrides.{i}", override, _spec_override(override))
        for i, override in enumerate(spec.get("podSpecOverrides") or [])
    ] + [
        _patch(f"podTemplateOverrides.{i}", override, _template_override(override))
        for i, override in enumerate(spec.get("podTemplateOverrides") or [])
    ]
    metadata = {key: spec[key] for key in ("labels", "annotations") if spec.get(key)}
    if metadata:
        template = {"metadata": metadata}
        patches.append(
            {"manager": MANAGER.format("labels"), "trainingRuntimeSpec": {"template": template}}
        )
    kept = {key: value for key, value in spec.items() if key not in old}
    return {**kept, "runtimePatches": patches} if patches else kept


def _spec_override(override: dict[str, Any]) -> dict[str, Any]:
    """v2.0: the override is merged into the pod spec (its targetJobs, not a pod field, are
    dropped when the merge is decoded as a PodSpec)."""
    spec = {key: value for key, value in override.items() if key != "targetJobs"}
    return {"spec": spec} if spec else {}


def _template_override(override: dict[str, Any]) -> dict[str, Any]:
    """v2.1: the override's labels and annotations, and its spec, merged into the template."""
    template: dict[str, Any] = {}
    metadata = override.get("metadata") or {}
    kept = {key: metadata[key] for key in ("labels", "annotations") if key in metadata}
    if kept:
        template["metadata"] = kept
    if override.get("spec"):
        template["spec"] = override["spec"]
    return template


def _patch(field: str, override: dict[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    jobs = [
        {"name": target["name"], "template": {"spec": {"template": template}}}
        for target in override.get("targetJobs") or []
    ]
    spec = {"template": {"spec": {"replicatedJobs": jobs}}}
    return {"manager": MANAGER.format(field), "trainingRuntimeSpec": spec}


_PATCHED = re.compile(
    rf"spec\.runtimePatches\.(\d+)\.{re.escape(POD)}\.(\d+)"
    r"(?:\.(name)|\.template\.spec\.template(?:\.(spec|metadata))?)?(.*)"
)


def user_path(path: str, spec: dict[str, Any]) -> str:
    """Where a problem found in a patch made from an override is in the TrainJob as written
    (`spec` as given): a target Job's name, the override's spec or metadata."""
    match = _PATCHED.fullmatch(path)
    if match is None:
        return path
    i, j, name, part, rest = match.groups()
    overrides = [
        *(
            (f"spec.podSpecOverrides.{k}", V20)
            for k in range(len(spec.get("podSpecOverrides") or []))
        ),
        *(
            (f"spec.podTemplateOverrides.{k}", V21)
            for k in range(len(spec.get("podTemplateOverrides") or []))
        ),
    ]
    if int(i) >= len(overrides) or "runtimePatches" in spec:
        return path
    where, shape = overrides[int(i)]
    if name:
        return f"{where}.targetJobs.{j}.name"
    if shape == V20:
        return f"{where}{rest}"
    return f"{where}.{part}{rest}" if part else where
