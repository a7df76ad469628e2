"""A seeded fuzzer of every front door: half of the cases are mutations of the AIchor examples
(wrong types, huge and tiny numbers, unicode, shell metacharacters, empty and missing values,
unknown, repeated and deep keys, other operators, and plausible edits — counts, resources,
selectors, tolerations, env — that keep many manifests valid), half mutations of whole custom
resource files, every door's examples (Kubeflow, MPIJob, KubeRay, JobSet, TrainJob with its
runtime and the objects beside it: wrong types, deleted keys, doubled items, odd values, shell
payloads in data fields, plausible edits). Each runs through what `aichor-iac validate` runs,
and is classified as

- `accepted`: valid; a sample is also rendered through Pulumi's (mock) engine, as `render`
  does, and every object must pass `kubernetes-validate` strict and the API server's rules
  (`aichor_iac.rules.limits`), else the case is `api-rejected`;
- `refused`: a clean `ManifestError` (exit 2, one line per problem, each naming the file);
- `disagree`: `validate` and `render` (sampled) decided differently: always a bug;
- `crash`: any other exception (a traceback for the user): always a bug;
- `hang`: a case that took more than CASE_SECONDS: always a bug;
- `injection`: a rendered script holds a user's `$(...)` where the shell would run it
  (outside single quotes), from any field but the command (which is a shell command line and
  runs as written; tests/k8s/test_shell_safety.py runs the scripts): always a bug.

Each case is bounded in time (SIGALRM) and its growth of the process's peak memory is
measured (`peak MiB` in the table; MAX_CASE_MIB is the bound). `python tests/fuzz.py [CASES]
[SEED]` prints the table (`make fuzz`: 100,000 cases); tests/test_fuzz.py runs 5,000.
"""

from __future__ import annotations

import contextlib
import copy
import random
import resource
import signal
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes_validate
import schemas
import yaml

from aichor_iac import doors, engine, planning
from aichor_iac.k8s import layout
from aichor_iac.k8s.context import Context
from aichor_iac.problems import ManifestError
from aichor_iac.rules import limits
from aichor_iac.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def _read(path: Path) -> list:
    """A file's YAML documents, read by libyaml (every test process reads these files when it
    collects the tests: PyYAML's own parser took a second of it)."""
    return list(yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader))


# The AIchor examples (the custom resources among the examples are in RESOURCES' folders' kind)
EXAMPLES = [
    data
    for data in (_read(p)[0] for p in sorted((ROOT / "examples").glob("*.yaml")))
    if data.get("kind", "AIchorManifest") == "AIchorManifest"
]
# Kubeflow custom resources (the public examples) are manifests too: a quarter of the cases.
RESOURCES = (
    [_read(p)[0] for p in sorted((ROOT / "tests/kubeflow").glob("*.yaml"))]
    + [  # KubeRay's samples: their RayJob or RayCluster
        next(d for d in _read(p) if d.get("apiVersion") == "ray.io/v1")
        for p in sorted((ROOT / "tests/kuberay").glob("*.yaml"))
    ]
    + [  # JobSet's examples and Trainer's TrainJobs (their first document), and our own seeds
        _read(p)[0]
        for folder in (
            "tests/jobset",
            "tests/trainer",
            "tests/trainer_optimization",
            "tests/fuzz_seeds",
        )
        for p in sorted((ROOT / folder).glob("*.yaml"))
    ]
)
# Every custom resource file whole (a TrainJob with its runtime, a RayJob with its RayCluster, a
# resource with its ConfigMaps): each door's examples, half of `run()`'s cases (issue 39)
FILES = (
    [
        [d for d in _read(p) if d is not None]
        for folder in ("kubeflow", "kuberay", "jobset", "trainer", "trainer_shapes", "fuzz_seeds")
        for p in sorted((ROOT / "tests" / folder).glob("*.yaml"))
    ]
    + [  # Katib's examples as sweeps of 3 trials that run whatever fails (issue 41)
        [{**d, "spec": {**d["spec"], "maxTrialCount": 3, "maxFailedTrialCount": 3}}]
        for p in sorted((ROOT / "tests" / "katib").glob("*.yaml"))
        for d in _read(p)
        if d is not None
    ]
    + [  # Trainer's OptimizationJobs as sweeps of 3 trials (issue 54)
        [{**d, "spec": {**d["spec"], "numTrials": 3, "parallelTrials": 2}}]
        for p in sorted((ROOT / "tests" / "trainer_optimization").glob("*.yaml"))
        for d in _read(p)
    ]
)
CR_GROUPS = ("kubeflow.org/", "ray.io/", "jobset.x-k8s.io/", "trainer.kubeflow.org/")
CASE_SECONDS = 60  # a case slower than this is a hang (rendering 1,000 jobset Jobs takes ~13 s)
MAX_CASE_MIB = 256  # what one case may add to the process's peak memory
OUTCOMES = ("accepted", "refused", "disagree", "crash", "hang", "api-rejected", "injection")
BUGS = OUTCOMES[2:]
HOSTILE = "$(touch /tmp/aichor-fuzz-escaped)"
# (Drawn with deepcopy: an edit inside a drawn `[]` or `{}` must not change the next case's.)
VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 2, 3, 0.0001, 0.5, 1e308, 2**31, 2**63, 10**30,
    float("inf"), float("nan"), "", " ", "0", "1", "2h", "abc", "ÄÖü", "名前", "🚀",
    "a" * 300, HOSTILE, "`id`", "; rm -rf /", "x\ny", "x\0y",
    "'\"\\", "--head", "Worker", "worker", "pytorch", "ray", "kuberay", "mpi", "jobset",
    "nvidia.com/gpu", "mig-1g.10gb", "2x2", "0.0.0.0/0", [], {}, [1, 2], {"a": 1},
]  # fmt: skip
KEYS = ["count", "cpus", "ramRatio", "memory", "shmSizeGB", "name", "image", "command",
        "Worker", "worker", "Master", "Head", "Workers", "Job", "timeout", "env", "gpu",
        "rayStartParams", "completions", "parallelisms", "debug", "ünknown", "a" * 64]  # fmt: skip
OPERATORS = [
    "pytorch",
    "xgboost",
    "jax",
    "paddle",
    "tf",
    "mpi",
    "ray",
    "kuberay",
    "jobset",
    "batchjob",
]
# Strings of the shapes users write where labels, names and values go, good and bad.
LABELISH = ["pool-1", "A100", "a.b_c-d", "x" * 63, "x" * 64, "-x", "x-", "a b", "a/b",
            "example.com/pool", "Bad_Prefix/x", "", "名前", "v1.2", "$(X)", "a\nb"]  # fmt: skip


def paths(node: Any, path: tuple = ()) -> list[tuple]:
    """Every path into the document (keys and list indexes)."""
    found = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            found += paths(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += paths(value, (*path, i))
    return found


def mutate(document: dict, rng: random.Random) -> dict:
    """One to three random edits of a copy of the document: half of the time hostile ones,
    otherwise plausible ones."""
    document = copy.deepcopy(document)
    edit = hostile if rng.random() < 0.5 else plausible
    for _ in range(rng.randint(1, 3)):
        edit(document, rng)
    return document


def hostile(document: dict, rng: random.Random) -> None:
    path = rng.choice(paths(document)[1:] or [("spec",)])
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    action = rng.randrange(6)
    if action == 0:  # another value
        parent[last] = copy.deepcopy(rng.choice(VALUES))
    elif action == 1 and isinstance(parent, dict):  # gone
        parent.pop(last, None)
    elif action == 2 and isinstance(parent, dict):  # another key beside it
        parent[rng.choice(KEYS)] = copy.deepcopy(rng.choice(VALUES))
    elif action == 3:  # nested deeper
        parent[last] = {rng.choice(KEYS): parent[last]}
    elif action == 4 and isinstance(document.get("spec"), dict):  # another operator
        document["spec"]["operator"] = rng.choice(OPERATORS)
    else:  # a container of it
        parent[last] = [parent[last]] * rng.randint(0, 3)


def plausible(document: dict, rng: random.Random) -> None:
    """An edit of the kind users make: sizes, resources, selectors, tolerations, env, names."""
    if "kind" in document and document.get("kind") != "AIchorManifest":
        return plausible_resource(document, rng)
    spec = document.get("spec")
    types = spec.get("types") if isinstance(spec, dict) else None
    if not isinstance(types, dict) or not types:
        return
    group = types[rng.choice(sorted(types, key=str))]
    if isinstance(group, list):  # jobset: a list of replicated jobs
        group = rng.choice(group) if group else {}
    if not isinstance(group, dict):
        return
    resources = group.setdefault("resources", {})
    if not isinstance(resources, dict):
        return
    action = rng.randrange(9)
    if action == 0:
        group["count"] = rng.choice([0, 1, 2, 7, 64, 1000, 3000, 30_000, 100_000])
    elif action == 1:
        resources["cpus"] = rng.choice([0.001, 0.25, 1, 3.5, 96, 1000])
    elif action == 2:
        resources["shmSizeGB"] = rng.choice([0, 0.5, 16, 1024])
    elif action == 3:
        selectors = resources.setdefault("extraSelectors", {})
        if isinstance(selectors, dict):
            selectors[rng.choice(LABELISH)] = rng.choice(LABELISH)
    elif action == 4:
        toleration = {"key": rng.choice(LABELISH), "operator": rng.choice(["Exists", "Equal"])}
        if rng.random() < 0.5:
            toleration["value"] = rng.choice(LABELISH)
        if rng.random() < 0.3:
            toleration.update(effect=rng.choice(["NoSchedule", "NoExecute"]), tolerationSeconds=5)
        resources.setdefault("extraTolerations", []).append(toleration)
    elif action == 5:
        gpu = {"count": rng.choice([0, 1, 8]), "type": "gpu", "product": rng.choice(LABELISH)}
        resources["accelerators"] = {"gpu": gpu}
    elif action == 6:
        value = rng.choice([HOSTILE, "a b", "$(HOME)", "x" * 200_000, "", "名前", "'\"`"])
        spec.setdefault("env", []).append({"name": rng.choice(["A", "B_1", "x"]), "value": value})
    elif action == 7:
        document["name"] = rng.choice(["exp", "My_Exp", "名前", "..", "x" * 80, HOSTILE, "a b"])
    else:
        spec[rng.choice(["image", "command"])] = rng.choice(
            ["python:3.11", "a b", HOSTILE, "python train.py; echo done", "x" * 10_000, "\t"]
        )


def plausible_resource(document: dict, rng: random.Random) -> None:
    """The same kind of edit in a custom resource: replicas, a container's resources, command
    and env, node selectors, tolerations, restart and run policies, the name."""
    spec = document.get("spec")
    replicas = _replicas(spec) if isinstance(spec, dict) else []
    if not replicas:
        return
    replica = rng.choice(replicas)
    if "rayStartParams" in replica and rng.random() < 0.3:  # KubeRay's own fields
        if rng.random() < 0.5:
            params = replica["rayStartParams"]
            key = rng.choice(["num-cpus", "resources", "temp-dir", "block", "bad key", "x_y"])
            params[key] = rng.choice(
                [HOSTILE, '"{\\"TPU\\": 4}"', "a b", "true", "false", "$(id)", "'", 3, "{}"]
            )
        else:
            spec["entrypoint"] = rng.choice([HOSTILE, "", "python -c 'print(1)'", "a\nb", 3])
        return
    template = replica.get("template") if isinstance(replica, dict) else None
    pod = template.get("spec") if isinstance(template, dict) else None
    containers = pod.get("containers") if isinstance(pod, dict) else None
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], dict):
        return
    main = containers[0]
    action = rng.randrange(9)
    if action == 0:
        replica["replicas"] = rng.choice([0, 1, 2, 7, 64, 1000, 30_000, 100_000, 200_000])
    elif action == 1:
        limits = main.setdefault("resources", {}).setdefault("limits", {})
        if isinstance(limits, dict):
            key = rng.choice(["cpu", "memory", "nvidia.com/gpu", "example.com/x", "bad key"])
            limits[key] = rng.choice(["1", "500m", "4Gi", 8, "0.0001", "1e3", "x", "-1", 2**40])
    elif action == 2:
        pod.setdefault("nodeSelector", {})[rng.choice(LABELISH)] = rng.choice(LABELISH)
    elif action == 3:
        toleration = {"key": rng.choice(LABELISH), "operator": rng.choice(["Exists", "Equal"])}
        pod.setdefault("tolerations", []).append(toleration)
    elif action == 4:
        value = rng.choice([HOSTILE, "a b", "$(HOME)", "$(MASTER_ADDR)", "", "名前", "'\"`"])
        entry = {"name": rng.choice(["A", "B_1", "x", "RANK", "a.b"]), "value": value}
        main.setdefault("env", []).append(entry)
    elif action == 5:
        main["command"] = rng.choice(
            [
                ["python3", HOSTILE],
                ["sh", "-c", "echo $(RANK); exit 3"],
                [HOSTILE],
                [],
                ["x" * 200_000],
            ]
        )
    elif action == 6:
        replica["restartPolicy"] = rng.choice(["Never", "OnFailure", "ExitCode", "Always", "x"])
    elif action == 7:
        run = spec.setdefault("runPolicy", {})
        key = rng.choice(["backoffLimit", "ttlSecondsAfterFinished", "activeDeadlineSeconds"])
        run[key] = rng.choice([0, 1, 3600, -1, 2**31, "x"])
    else:
        document.setdefault("metadata", {})["name"] = rng.choice(
            ["exp", "My_Exp", "名前", "..", "x" * 80, HOSTILE, "a b", "a" * 50]
        )


def _replicas(spec: dict) -> list[dict]:
    """The replica specs of a Kubeflow resource, or a KubeRay resource's head and groups."""
    specs = next((v for k, v in spec.items() if k.endswith("ReplicaSpecs")), None)
    if isinstance(specs, dict):
        return [v for v in specs.values() if isinstance(v, dict)]
    cluster = spec.get("rayClusterSpec", spec)
    if not isinstance(cluster, dict):
        return []
    groups = cluster.get("workerGroupSpecs")
    found = [cluster.get("headGroupSpec"), *(groups if isinstance(groups, list) else [])]
    return [g for g in found if isinstance(g, dict) and isinstance(g.get("rayStartParams"), dict)]


# Odd values of every type, for a field of a custom resource (its CRD's schema decides)
ODD: list[Any] = [
    -1, 0, -(2**31) - 1, 2**31 - 1, 2**31, 2**63, 10**30, 1e308, -0.5, 1.5, float("nan"),
    "", " ", "-1", "0x10", "1e3", "a" * 1000, "x" * 70_000, "名前🚀", "\u202e", "A_B", "a.b",
    HOSTILE, "`id`", "$(id)", "'; rm -rf / #", '"$(id)"', "${HOME}", "a\nb", True, None,
]  # fmt: skip


def mutate_file(documents: list[dict], rng: random.Random) -> list[dict]:
    """One to three edits of a copy of a custom resource's file, mostly of the resource: a
    wrong type, a key deleted (any key, at any depth), an item doubled, an odd value, a
    plausible edit."""
    documents = copy.deepcopy(documents)
    custom = [d for d in documents if str(d.get("apiVersion")).startswith(CR_GROUPS)]
    for _ in range(rng.randint(1, 3)):
        target = rng.choice(custom if custom and rng.random() < 0.8 else documents)
        action = rng.randrange(7)
        if action == 0:
            hostile(target, rng)
        elif action == 6:
            zero_counted(target, rng)
        elif action == 5:
            deleted(target, rng)
        elif action == 1:
            with contextlib.suppress(TypeError, AttributeError):  # (on an edit already mangled:
                plausible_resource(target, rng)  # a field no longer a map or list, left as is)
        elif action == 2:
            doubled(target, rng)
        else:
            odd(target, rng)
    return documents


# The counts of every door's resources (Kubeflow's and KubeRay's replicas, a JobSet's
# replicated Jobs and their Jobs' pods, a TrainJob's nodes, a sweep's trials, MPI's slots)
COUNTS = {
    "replicas", "minReplicas", "maxReplicas", "completions", "parallelism", "numNodes",
    "numProcPerNode", "maxTrialCount", "parallelTrialCount", "maxFailedTrialCount",
    "slotsPerWorker", "count", "minAvailable", "jobIndex", "podIndex",
}  # fmt: skip


def zero_counted(document: dict, rng: random.Random) -> None:
    """One of the resource's counts (`COUNTS`, at any depth) set to 0."""
    if found := counts(document):
        node, key = rng.choice(found)
        node[key] = 0


def counts(document: dict) -> list[tuple[dict, str]]:
    """Each count of the document (`COUNTS`, at any depth): the map holding it, its key."""
    found: list[tuple[dict, str]] = []
    stack: list[Any] = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found += [(node, k) for k in sorted(node) if k in COUNTS and type(node[k]) is int]
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def zero_cases() -> list[tuple[str, str]]:
    """Every custom resource file with one of its resources' counts set to 0, each count of
    each file in turn: (door, text)."""
    cases = []
    for documents in FILES:
        for i, document in enumerate(documents):
            if not str(document.get("apiVersion")).startswith(CR_GROUPS):
                continue
            for n in range(len(counts(document))):
                mutated = copy.deepcopy(documents)
                node, key = counts(mutated[i])[n]
                node[key] = 0
                text = yaml.safe_dump_all(mutated, sort_keys=False)
                cases.append((door_of(text), text))
    return cases


def deleted(document: dict, rng: random.Random) -> None:
    """A key deleted at any depth: half of the time one whose value is a map or list (a pod
    template's `spec`: a fuzzer outside the project found three crashes there)."""
    keys = [p for p in paths(document)[1:] if isinstance(_at(document, p[:-1]), dict)]
    whole = [p for p in keys if isinstance(_at(document, p), dict | list)]
    if keys:
        path = rng.choice(whole if whole and rng.random() < 0.5 else keys)
        del _at(document, path[:-1])[path[-1]]


def doubled(document: dict, rng: random.Random) -> None:
    """A list item given twice (a container, an env entry, a replicated Job, a port, ...)."""
    lists = [p for p in paths(document) if isinstance(_at(document, p), list) and _at(document, p)]
    if lists:
        items = _at(document, rng.choice(lists))
        items.insert(rng.randrange(len(items) + 1), copy.deepcopy(rng.choice(items)))


def odd(document: dict, rng: random.Random) -> None:
    """A field (a leaf, mostly) set to an odd value: huge, negative, empty, long, unicode, a
    shell payload, another type."""
    leaves = [p for p in paths(document)[1:] if not isinstance(_at(document, p), dict | list)]
    path = rng.choice(leaves or paths(document)[1:] or [("spec",)])
    parent = _at(document, path[:-1])
    if isinstance(parent, dict | list):
        parent[path[-1]] = copy.deepcopy(rng.choice(ODD))


def _at(document: Any, path: tuple) -> Any:
    for step in path:
        document = document[step]
    return document


def file_text(documents: list[dict], rng: random.Random) -> str:
    """A file's documents as YAML (its first one as `text_of` writes one)."""
    first = text_of(documents[0], rng)
    rest = [yaml.safe_dump(d, sort_keys=False, allow_unicode=True) for d in documents[1:]]
    return "---\n".join([first, *rest])


def door_of(text: str) -> str:
    """The kind of input a case is, for the table: the custom resource's kind, else AIchor's."""
    for line in text.splitlines():
        if line.startswith("kind: ") and line[6:] in KINDS:
            return line[6:]
    return "AIchorManifest"


KINDS = ("PyTorchJob", "TFJob", "XGBoostJob", "JAXJob", "PaddleJob", "MPIJob", "RayJob")
KINDS += ("RayCluster", "JobSet", "TrainJob", "Experiment", "OptimizationJob")


def text_of(document: dict, rng: random.Random) -> str:
    """The document as YAML, sometimes with a key repeated or its bytes mangled."""
    text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    if rng.random() < 0.05:
        lines = text.splitlines()
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        text = "\n".join(lines) + "\n"
    return text


class Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Hang


def validate(text: str) -> str:
    """'' if `aichor-iac validate` accepts the text, else its error (ManifestError)."""
    try:
        models = doors.parse_all(text, source="fuzz.yaml")
        settings = Settings()
        for model in models:
            name = "fuzz" if len(models) == 1 else model.name_in("fuzz")
            layout.build(Context(planning.blueprint(model, settings, name)))
    except ManifestError as error:
        return str(error)
    return ""


def render(text: str) -> tuple[str, list[dict[str, Any]]]:
    """What `aichor-iac render` gives: (error, objects)."""
    try:
        models = doors.parse_all(text, source="fuzz.yaml")
        name = "fuzz" if len(models) == 1 else None
        return "", engine.expand(list(models), Settings(), name=name).objects
    except ManifestError as error:
        return str(error), []


def check(text: str, render_it: bool) -> tuple[str, str]:
    """(outcome, detail) for one manifest text."""
    try:
        error = validate(text)
        if error:
            lines = error.splitlines()
            if not lines or any(not line.startswith("fuzz.yaml") for line in lines):
                return "crash", f"not one line per problem: {error}"
        if not render_it:
            return ("refused" if error else "accepted"), ""
        rendered_error, objects = render(text)
        if rendered_error != error:
            return "disagree", f"validate: {error!r}\nrender: {rendered_error!r}"
        if error:
            return "refused", ""
        # A manifest's command is a shell command line: it may run HOSTILE (after its wait), and
        # so may a RayJob's entrypoint (KubeRay submits it as one). A custom resource's argv
        # runs as an argv: nothing of it may reach a shell as code.
        if HOSTILE not in shell_text(text) and (where := injected(objects)):
            return "injection", where
        problems = limits.check(objects)
        for obj in objects:
            try:
                schemas.validate(obj)
            except kubernetes_validate.ValidationError as invalid:
                problems.append(str(invalid))
        return ("api-rejected", "\n".join(problems)) if problems else ("accepted", "")
    except Hang:
        raise
    except Exception:
        return "crash", traceback.format_exc()


def shell_text(text: str) -> str:
    """The fields of an input that are shell command lines by definition, as written."""
    found = []
    for document in yaml.safe_load_all(text):
        spec = document.get("spec") if isinstance(document, dict) else None
        if isinstance(spec, dict):
            key = "entrypoint" if document.get("kind") == "RayJob" else "command"
            found.append(str(spec.get(key, "")))
    return "\n".join(found)


def injected(objects: list[dict[str, Any]]) -> str:
    """The container whose shell script would run HOSTILE, or ''. A script is the `-c`
    argument of a shell (what follows it are data: `$1`, ...); Kubernetes turns `$$` into `$`."""
    for obj in objects:
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            argv = [*container.get("command", []), *container.get("args", [])]
            for i, arg in enumerate(argv[:-1]):
                if arg == "-c" and _unquoted(argv[i + 1].replace("$$", "$"), HOSTILE):
                    return f"{obj['metadata']['name']}/{container['name']}: {argv[i + 1]}"
    return ""


def _unquoted(script: str, marker: str) -> bool:
    """Whether `marker` occurs in `script` where sh expands it: outside single quotes and not
    behind a backslash."""
    state, i = "", 0  # "": unquoted, "'": in single quotes, '"': in double quotes
    while i < len(script):
        char = script[i]
        if state == "'":
            state = "" if char == "'" else state
        elif script.startswith(marker, i):
            return True
        elif char == "\\":
            i += 1  # the next character is literal
        elif char == '"':
            state = "" if state == '"' else '"'
        elif char == "'" and not state:
            state = "'"
        i += 1
    return False


@dataclass
class Report:
    outcomes: Counter = field(default_factory=Counter)
    doors: Counter = field(default_factory=Counter)  # (door, outcome) -> cases
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # outcome, text, detail
    rendered: int = 0
    slowest: float = 0.0  # seconds
    peak_growth: float = 0.0  # MiB one case added to the process's peak memory


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def run(cases: int, seed: int = 0, renders: int = 50) -> Report:
    """`cases` mutations; the first `renders` accepted ones and every 50th refused one are
    also rendered (validate and render must agree)."""
    rng = random.Random(seed)
    report = Report()
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for case in range(cases):
            if case % 2:  # a custom resource's file, every door's
                text = file_text(mutate_file(rng.choice(FILES), rng), rng)
            else:
                text = text_of(mutate(rng.choice(EXAMPLES), rng), rng)
            render_it = report.rendered < renders or case % 50 == 0
            before, started = _peak_mib(), time.perf_counter()
            signal.alarm(CASE_SECONDS)
            try:
                outcome, detail = check(text, render_it)
            except Hang:
                outcome, detail = "hang", f"more than {CASE_SECONDS} s"
            finally:
                signal.alarm(0)
            report.slowest = max(report.slowest, time.perf_counter() - started)
            report.peak_growth = max(report.peak_growth, _peak_mib() - before)
            report.rendered += render_it and outcome == "accepted"
            report.outcomes[outcome] += 1
            report.doors[door_of(text), outcome] += 1
            if outcome in BUGS:
                report.failures.append((outcome, text, detail))
    finally:
        signal.signal(signal.SIGALRM, previous)
    return report


def table(report: Report, cases: int) -> str:
    rows = ["| outcome | cases | share |", "|---|---|---|"]
    for outcome in OUTCOMES:
        count = report.outcomes[outcome]
        rows.append(f"| {outcome} | {count:,} | {count / cases:.1%} |")
    rows += ["", "| door | cases | accepted | refused | bugs |", "|---|---|---|---|---|"]
    for door in sorted({d for d, _ in report.doors}):
        counts = {o: report.doors[door, o] for o in OUTCOMES}
        bugs = sum(counts[o] for o in BUGS)
        total = sum(counts.values())
        rows.append(
            f"| {door} | {total:,} | {counts['accepted']:,} | {counts['refused']:,} | {bugs} |"
        )
    rows.append(
        f"\n{report.rendered:,} accepted cases rendered and checked; slowest case "
        f"{report.slowest:.2f} s; largest growth of peak memory in one case "
        f"{report.peak_growth:.0f} MiB"
    )
    return "\n".join(rows)


def main() -> int:
    cases = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    # A case that tried to take the machine's memory fails here instead (MemoryError: crash).
    resource.setrlimit(resource.RLIMIT_AS, (8 * 1024**3, resource.RLIM_INFINITY))
    report = run(cases, seed, renders=max(50, cases // 100))
    print(table(report, cases))
    for outcome, text, detail in report.failures[:5]:
        print(f"--- {outcome}\n{text}{detail}")
    return 1 if report.failures or report.peak_growth > MAX_CASE_MIB else 0


if __name__ == "__main__":
    sys.exit(main())
