"""The one way in: a file or text, its YAML documents, and the door that reads them, picked by
`apiVersion` (an AIchor manifest has none, or AIchor's own). Each door returns the neutral
`Experiment`; nothing here knows any door's fields.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..experiment.model import Experiment
from ..experiment.trial import NONE_ENDED, Ended
from ..problems import ManifestError, Problem, line_for, one_line
from ..reading import companions, crd, text
from . import aichor, several
from .identities import (
    DOORS,
    ENTRANCES,
    JOB,
    RUNTIME_KINDS,
    SWEEPS,
    TRAINER,
    TRAINER_KINDS,
    is_runtime,
)
from .several import AICHOR

# The API groups of custom resources a file may hold (each read by its door, `DOORS`; the
# Trainer's also takes the runtimes given beside the TrainJob)
CR_GROUPS = tuple(DOORS)
TRAINER_GROUP = TRAINER.split("/")[0] + "/"
# Retired versions of the custom resources the doors read, and the version that replaced each
# (Kubeflow's operators served v1 from Kubeflow 1.0; the MPI Operator v2beta1; KubeRay ray.io/v1
# from 1.0, v1alpha1 before).
RETIRED = {
    **{
        (f"kubeflow.org/{version}", kind): f"kubeflow.org/v1 {kind}"
        for version in ("v1alpha1", "v1alpha2", "v1beta1", "v1beta2")
        for kind in ("TFJob", "PyTorchJob")
    },
    ("kubeflow.org/v1alpha1", "XGBoostJob"): "kubeflow.org/v1 XGBoostJob",
    ("kubeflow.org/v1alpha1", "MPIJob"): "kubeflow.org/v2beta1 MPIJob",
    ("kubeflow.org/v1alpha2", "MPIJob"): "kubeflow.org/v2beta1 MPIJob",
    ("tensorflow.org/v1alpha1", "TfJob"): "kubeflow.org/v1 TFJob",
    ("ray.io/v1alpha1", "RayJob"): "ray.io/v1 RayJob",
    ("ray.io/v1alpha1", "RayCluster"): "ray.io/v1 RayCluster",
}
# The Trainer v2 proposal's draft API (KEP-2170), which no release served
DRAFTS = {
    ("kubeflow.org/v2alpha1", kind): f"{TRAINER} {kind}"
    for kind in (*TRAINER_KINDS, *RUNTIME_KINDS)
}


def experiment_of(manifest: Experiment | str | Path) -> Experiment:
    """What `render`, `up` and a local run take: an Experiment, or a file's path (`load`)."""
    return manifest if isinstance(manifest, Experiment) else load(manifest)


def load(path: str | Path) -> Experiment:
    """The experiment in a file; `-` is standard input (as `kubectl apply -f -` reads it)."""
    data, source = text.read(path)
    return parse(data, source=source)


def load_all(path: str | Path, ended: Ended = NONE_ENDED) -> tuple[Experiment, ...]:
    """Every experiment in a file (`parse_all`), or in the YAML files of a directory (each
    file's own, in the order of their names); their names differ. `ended`: the objectives of
    the trials that have ended, by name, from which a sweep that learns asks its next."""
    if str(path) == "-" or not Path(path).is_dir():
        data, source = text.read(path)
        return parse_all(data, source, ended)
    files = sorted(f for f in Path(path).iterdir() if f.suffix in (".yaml", ".yml"))
    if not files:
        reason = "holds no YAML file (*.yaml, *.yml): give a directory of experiments"
        raise ManifestError(str(path), [Problem("", reason)])
    found: list[Experiment] = []
    problems: list[Problem] = []
    for file in files:  # (every file's problems, not the first file's alone)
        try:
            found += load_all(file, ended)
        except ManifestError as error:
            problems += [replace(p, source=p.source or error.source) for p in error.problems]
    problems = problems or _same_names(found)
    if problems:
        raise ManifestError(str(path), problems)
    return tuple(found)


def parse(data: str, source: str = "<manifest>") -> Experiment:
    """The experiment a YAML text describes: one document, or a custom resource with the
    ConfigMaps its pods mount beside it (KubeRay's samples ship their code so)."""
    experiments = parse_all(data, source)
    if len(experiments) > 1:
        raise ManifestError(source, [several.refusal(experiments)])
    return experiments[0]


def parse_all(
    data: str, source: str = "<manifest>", ended: Ended = NONE_ENDED
) -> tuple[Experiment, ...]:
    """Every experiment a YAML text describes: each AIchor manifest, and each custom resource
    (a RayJob with the RayCluster it selects is one) with the objects given beside it that
    it uses (`several.users`)."""
    documents = text.documents(data, source)
    if not documents or not all(isinstance(d.data, dict) for d in documents):
        raise ManifestError(source, [Problem("", "a manifest is a YAML mapping with a spec")])
    documents = _every_checked(documents, source)  # (each custom resource by its own CRD)
    runtimes = [d for d in documents if is_runtime(d.data)]  # read with the TrainJob
    documents = _with_clusters([d for d in documents if d not in runtimes] or runtimes[:1])
    mains = [d for d in documents if _is_experiment(d.data)] or documents[:1]
    beside = [d for d in documents if d not in mains]
    others = [d for d in beside if not companions.is_companion(d.data)]
    custom = any(_api_version(d.data).startswith(CR_GROUPS) for d in mains)
    if beside and (others or not custom):
        problems = [Problem("", companions.refusal(d.data), d.line) for d in others]
        reason = (
            "holds several YAML documents: give one AIchor manifest, or one custom resource "
            "(kubeflow.org, ray.io, jobset.x-k8s.io) with the objects its pods use (ConfigMaps, "
            "Services, …)"
        )
        which = problems if custom else [Problem("", reason, beside[0].line)]
        raise ManifestError(source, which)
    kept, invalid = companions.read(beside)
    trainer = [d for d in mains if _api_version(d.data).startswith(TRAINER_GROUP)]
    if runtimes and not trainer:
        reason = "a Trainer runtime is read beside the TrainJob that names it, not beside this"
        raise ManifestError(source, [Problem("kind", reason, d.line) for d in runtimes])
    uses, problems = several.users(mains, beside, list(kept))
    found: list[tuple[Experiment, text.Document]] = []
    problems, read = problems + invalid, []
    for document, used in zip(mains, uses, strict=True):
        given = runtimes if document in trainer else []
        try:  # (every problem of the file at once)
            if _is_sweep(document.data):
                trials = _sweep(document, source, used, given, ended)
                found += [(t, document) for t in trials]
            else:
                found.append((_experiment(document, source, used, given, checked=True), document))
        except ManifestError as error:
            read += error.problems
    problems = read + problems
    if not read:  # (every experiment read: their names)
        experiments, documents = [e for e, _ in found], [d for _, d in found]
        problems += several.unnamed(experiments, documents)
        problems += _same_names(experiments, [d.line for d in documents])
    if problems:
        raise ManifestError(source, problems)
    return tuple(e for e, _ in found)


def _is_sweep(data: dict[str, Any]) -> bool:
    kind = data.get("kind")  # (any YAML value)
    return isinstance(kind, str) and (_api_version(data), kind) in SWEEPS


def _sweep(
    document: text.Document,
    source: str,
    companions: list[dict[str, Any]],
    runtimes: list[text.Document],
    ended: Ended,
) -> list[Experiment]:
    """A sweep's trials (a Katib Experiment's, an OptimizationJob's), each read by the door of
    its custom resource (the template's problems, found in the first trial, at the template's
    lines; a TrainJob with the `runtimes` beside the sweep)."""
    door, where = SWEEPS[_api_version(document.data), document.data.get("kind")]
    lines = {
        path[len(where) :]: n for path, n in document.lines.items() if path[: len(where)] == where
    }
    found = []
    trials = _door(door).trials(document.data, source, document.lines, tuple(companions), ended)
    for data, place in trials:
        trial = text.Document(data, lines, line_for(where, document.lines) or document.line)
        try:
            if (data.get("apiVersion"), data.get("kind")) == JOB:  # (a trial only: a Job
                experiment = _door("job").validate(data, source, lines, [])  # beside is kept)
            else:
                experiment = _experiment(trial, source, [], runtimes, checked=False)
        except ManifestError as error:
            prefix = ".".join(where)
            raise ManifestError(
                source, [replace(p, path=f"{prefix}.{p.path}".rstrip(".")) for p in error.problems]
            ) from None
        found.append(experiment.as_trial(place))
    return found


def _is_experiment(data: dict[str, Any]) -> bool:
    """Whether a document of a file is an experiment of its own: a custom resource a door
    reads, or an AIchor manifest."""
    return _api_version(data).startswith(CR_GROUPS) or data.get("kind", AICHOR) == AICHOR


def _with_clusters(documents: list[text.Document]) -> list[text.Document]:
    """The documents with each RayJob and the RayCluster beside it that it selects merged
    into one (`kuberay.on_cluster`): one experiment."""
    kinds = [d.data.get("kind") for d in documents]
    if "RayJob" not in kinds or "RayCluster" not in kinds:
        return documents
    kuberay, out, used = _door("kuberay.door"), [], set()
    for job in documents:
        if job.data.get("kind") != "RayJob":
            continue
        for i, cluster in enumerate(documents):
            if i not in used and (merged := kuberay.on_cluster(job, cluster)):
                used.add(i)
                out.append((documents.index(job), merged))
                break
    merged_at = dict(out)
    return [merged_at.get(i, d) for i, d in enumerate(documents) if i not in used or i in merged_at]


def _same_names(experiments: list[Experiment], lines: list[int] | None = None) -> list[Problem]:
    """A problem for each experiment named as an earlier one (at `lines`, each one's): the
    experiments of a stack differ in name."""
    problems: list[Problem] = []
    first: dict[str, str] = {}
    at: list[int | None] = list(lines) if lines else [None] * len(experiments)
    for experiment, line in zip(experiments, at, strict=True):
        name = experiment.name or experiment.generate_name
        if not name:
            continue
        if name in first:
            reason = (
                f"a second experiment named {name!r} (the first is in {first[name]}): the "
                "experiments of a stack have names of their own; rename one"
            )
            problems.append(Problem("name", reason, line))
        first.setdefault(name, experiment.source if line is None else f"line {line}")
    return problems


def validate(
    data: dict[str, Any],
    source: str = "<manifest>",
    lines: dict | None = None,
    companions: list[dict[str, Any]] | None = None,
    runtimes: list[text.Document] | None = None,
) -> Experiment:
    """The experiment `data` describes, by its front door: an AIchor manifest, or a Kubeflow,
    KubeRay, JobSet or Trainer custom resource (with `companions`, the objects beside it, as
    read by `reading.companions`, and a TrainJob with the `runtimes` given beside it)."""
    document = text.Document(data, lines or {}, 1)
    return _experiment(document, source, companions or [], runtimes or [], checked=False)


def _experiment(
    document: text.Document,
    source: str,
    companions: list[dict[str, Any]],
    runtimes: list[text.Document],
    checked: bool,
) -> Experiment:
    """`validate()`, the custom resources already `checked` against their CRDs or not."""
    data, lines = document.data, document.lines
    api_version = _api_version(data)
    if (api_version, str(data.get("kind"))) in RETIRED | DRAFTS:  # (a kind: any YAML value)
        raise ManifestError(source, [_retired(data, lines)])
    if _is_sweep(data):
        which = "a Katib Experiment" if data.get("kind") == "Experiment" else "an OptimizationJob"
        reason = f"{which} is a sweep of several trials: read it with load_all"
        raise ManifestError(source, [Problem("kind", reason, line_for(("kind",), lines))])
    if is_runtime(data):
        reason = "a runtime is not an experiment: give the TrainJob that names it beside it"
        raise ManifestError(source, [Problem("kind", reason, line_for(("kind",), lines))])
    if api_version.startswith(CR_GROUPS) and not crd.served(api_version, data.get("kind")):
        raise ManifestError(source, [_not_read(data, lines)])  # (no door reads it unchecked)
    if not checked:
        data = _checked(document, source).data
        runtimes = [_checked(runtime, source, "runtime: ") for runtime in runtimes]
    if api_version.startswith(CR_GROUPS):
        return _door_of(api_version).validate(data, source, lines, companions, runtimes)
    if "/" in api_version or api_version == "v1":  # a Kubernetes resource, not a manifest
        raise ManifestError(source, [_unread(data, lines)])
    return aichor.read(data, source, lines)


def _every_checked(documents: list[text.Document], source: str) -> list[text.Document]:
    """Each custom resource of a file as `_checked` gives it (those beside the experiment's
    named in their problems: a runtime, another resource), or ManifestError naming every
    problem of them all."""
    kinds = {d.data.get("kind") for d in documents if isinstance(d.data.get("kind"), str)}
    main = "RayJob" if {"RayJob", "RayCluster"} <= kinds else None
    out, problems, first = [], [], True
    for document in documents:
        data, prefix = document.data, ""
        if is_runtime(data):
            prefix = "runtime: "
        elif crd.served(data.get("apiVersion"), data.get("kind")):
            if (main is not None and data.get("kind") != main) or (main is None and not first):
                name = (data.get("metadata") or {}).get("name", "(no name)")
                prefix = f"{data['kind']} {name}: "
            first = False
        try:
            out.append(_checked(document, source, prefix))
        except ManifestError as error:
            problems += error.problems
    if problems:
        raise ManifestError(source, problems)
    return out


def _checked(document: text.Document, source: str, prefix: str = "") -> text.Document:
    """A custom resource as the API server would store it once its CRD's schema and rules
    pass (`reading.crd`; a TrainJob of an earlier release: that release's CRD), or
    ManifestError naming every problem (its path after `prefix`, which names a document
    beside the experiment; with the door's own fixes); anything else as given."""
    data = document.data
    if not crd.served(data.get("apiVersion"), data.get("kind")):
        return document
    door = _door_of(data["apiVersion"])
    written, problems = crd.check(data, document.lines, door.release(data), door.fixes(data))
    if problems:
        raise ManifestError(source, [replace(p, path=prefix + p.path) for p in problems])
    return text.Document(written, document.lines, document.line)


def _retired(data: dict[str, Any], lines: dict) -> Problem:
    """A retired (or draft) version of a custom resource a door reads: which version
    replaced it."""
    api_version, kind = _api_version(data), str(data["kind"])
    if (api_version, kind) in DRAFTS:
        reason = (
            f"{api_version} {kind} is the Trainer v2 proposal's draft API, which no release "
            f"served: write it as {DRAFTS[api_version, kind]} (the docs' Coming from Trainer v2 "
            "lists what is read)"
        )
        return Problem("apiVersion", reason, line_for(("apiVersion",), lines))
    door = "Coming from KubeRay" if api_version.startswith("ray.io/") else "Coming from Kubeflow v1"
    return Problem(
        "apiVersion",
        f"{api_version} {kind} is a retired version: write it as {RETIRED[api_version, kind]} "
        f"(some fields moved: the docs' {door} lists what is read)",
        line_for(("apiVersion",), lines),
    )


def _unread(data: dict[str, Any], lines: dict) -> Problem:
    """Why a Kubernetes resource no door reads is refused, and what is read."""
    api_version, kind = _api_version(data), data.get("kind")
    reason = f"{api_version} {kind} is not an input aichor-iac reads: " + (
        _near(kind)
        or "give an AIchor manifest (kind: AIchorManifest) or one of "
        + ", ".join(f"{v} {k}" for v, k in _kinds_read())
    )
    return Problem(
        "kind",
        one_line(reason),
        line_for(("kind",), lines) or line_for(("apiVersion",), lines),
    )


def _not_read(data: dict[str, Any], lines: dict) -> Problem:
    """A resource of a door's API group that no CRD shipped serves: what that door reads."""
    api_version, kind = _api_version(data), data.get("kind")
    read = [e for e in ENTRANCES if api_version.startswith(e.group)]
    if len({e.api_version for e in read}) > 1:  # (Kubeflow's: versions of their own)
        known = ", ".join(
            f"{e.api_version} {e.kind}" + (" (Katib's, a sweep)" if e.door == "katib.door" else "")
            for e in read
        )
        known, kind = f"one of {known}", kind if isinstance(kind, str) else repr(kind)
    else:
        known = " or ".join(f"{e.api_version} {e.kind}" for e in read)
    reason = f"{api_version} {kind!s} is not a custom resource aichor-iac reads: "
    reason += _near(kind) or f"give {known}"
    return Problem("kind", reason, line_for(("kind",), lines))


def _kinds_read() -> list[tuple[str, str]]:
    """Every (apiVersion, kind) a door reads as an experiment (Katib's Experiment a sweep)."""
    return [(e.api_version, e.kind) for e in ENTRANCES]


def _near(kind: Any) -> str | None:
    """'did you mean ...' for a kind near one read (its case, a letter or two), or None."""
    read = {k.lower(): (v, k) for v, k in [*_kinds_read(), ("", AICHOR)]}
    if not isinstance(kind, str) or kind in (k for _, k in read.values()):  # (its version: below)
        return None
    near = difflib.get_close_matches(kind.lower(), list(read), n=1, cutoff=0.8)
    if not near:
        return None
    version, name = read[near[0]]
    return f"did you mean kind: {name}" + (f" (apiVersion: {version})?" if version else "?")


@runtime_checkable
class Door(Protocol):
    """What the router reads of the door of a custom resource's API group (`DOORS`)."""

    def release(self, data: dict[str, Any]) -> str | None:
        """The release of the CRD that checks `data` (None: the pinned one)."""

    def fixes(self, data: dict[str, Any]) -> Mapping[str, str]:
        """A fix for a field of `data` its CRD refuses, by path (one a later version moved)."""

    def validate(
        self,
        data: dict[str, Any],
        source: str,
        lines: dict,
        companions: list[dict[str, Any]],
        runtimes: Sequence[text.Document],
    ) -> Experiment:
        """The experiment of a resource its CRD passed, or ManifestError naming every problem."""


def _door_of(api_version: str) -> Door:
    """The door of a custom resource's API group."""
    return _door(next(door for group, door in DOORS.items() if api_version.startswith(group)))


def _door(name: str) -> Any:
    """A front door's module, imported when a file needs it (each costs its import)."""
    return importlib.import_module(f"{__package__}.{name}")


def _api_version(document: dict[str, Any]) -> str:
    return str(document.get("apiVersion", ""))
