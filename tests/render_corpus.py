"""Every input the product reads, rendered, as one digest per case: what a refactor must leave
byte-identical (issue 26). A case is an input file (or a fuzzed text) with stack settings; its
outcome is everything `pulumi up` would register (each resource's type, name, parent,
dependencies, inputs and options, in creation order), the stack outputs and the warnings — or
the error, word for word.

    python tests/render_corpus.py           # which cases differ from tests/golden/renders.json
    python tests/render_corpus.py --write   # record the current outcomes there
    python tests/render_corpus.py --progress   # what aichor:progress changes in each case

tests/test_render_corpus.py checks each case against the record.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

import yaml

from aichor_iac import doors, engine
from aichor_iac.k8s import progress
from aichor_iac.problems import ManifestError
from aichor_iac.settings import Settings, load_stack_file

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "renders.json"
FUZZED = 400  # mutated texts of the fuzzer's seeds (tests/fuzz.py, seed 0)
# The stack settings every example is also rendered under (beside its own stack file).
VARIANTS: dict[str, dict[str, Any]] = {
    "ready": {"wait": "ready"},
    "complete": {"wait": "complete"},
    "coscheduling": {"gang_scheduler": "coscheduling"},
    "volcano": {"gang_scheduler": "volcano", "wait": "complete"},
    "kueue": {"kueue_queue": "ml", "wait": "ready"},
    "restarts": {"max_restarts": 2, "permanent_exit_codes": [3], "wait": "complete"},
}


@functools.cache
def cases() -> dict[str, tuple[str, Settings, str]]:
    """Case name -> (input text, settings, experiment name); made once per process, when a
    test first asks (the tests are named from the record: collecting them costs nothing)."""
    found: dict[str, tuple[str, Settings, str]] = {}
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        settings, _ = load_stack_file(ROOT / "stacks" / f"Pulumi.{path.stem}.yaml")
        text = path.read_text()
        found[f"examples/{path.name}"] = (text, settings, path.stem)
        for variant, update in VARIANTS.items():
            found[f"examples/{path.name} {variant}"] = (
                text,
                settings.model_copy(update=update),
                path.stem,
            )
    folders = ("aichor", "kubeflow", "kuberay", "jobset", "trainer", "trainer_shapes")
    for folder in (*folders, "trainer_optimization"):
        for path in sorted((ROOT / "tests" / folder).glob("*.yaml")):
            found[f"tests/{folder}/{path.name}"] = (path.read_text(), Settings(), "exp")
    for path in sorted((ROOT / "tests" / "katib").glob("*.yaml")):
        text = path.read_text()
        found[f"tests/katib/{path.name}"] = (text, Settings(), "exp")
        sweep = yaml.safe_load(text)  # (as the tests run it: every trial runs whatever fails)
        sweep["spec"].pop("maxFailedTrialCount", None)
        found[f"tests/katib/{path.name} running every trial"] = (
            yaml.safe_dump(sweep),
            Settings(wait="complete"),
            "exp",
        )
        found[f"tests/katib/{path.name} running every trial, wait none"] = (
            yaml.safe_dump(sweep),
            Settings(),
            "exp",
        )
    for path, fixed in _runnable():
        found[f"tests/kubeflow/{path.name} as the tests run it"] = (
            yaml.safe_dump(fixed),
            Settings(),
            "exp",
        )
        fixed["spec"].setdefault("runPolicy", {})["backoffLimit"] = 2  # the group's restart
        found[f"tests/kubeflow/{path.name} with a backoffLimit"] = (
            yaml.safe_dump(fixed),
            Settings(),
            "exp",
        )
    for i, text in enumerate(_fuzzed(FUZZED)):
        found[f"fuzz {i}"] = (text, Settings(), "fuzz")
    return found


def _runnable() -> list[tuple[Path, dict[str, Any]]]:
    """The public Kubeflow examples with the fixes their errors ask for, as the tests run
    them (tests/conftest.py `runnable`)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import KUBEFLOW_EXAMPLES, runnable

    return [(path, runnable(path)[0]) for path in KUBEFLOW_EXAMPLES]


def _fuzzed(count: int) -> list[str]:
    """The first `count` texts the fuzzer draws from its seeds (the examples and the custom
    resources), as `tests/fuzz.py` draws them."""
    sys.path.insert(0, str(ROOT / "tests"))
    import fuzz

    rng = random.Random(0)
    return [
        fuzz.text_of(
            fuzz.mutate(rng.choice(fuzz.RESOURCES if i % 4 == 3 else fuzz.EXAMPLES), rng), rng
        )
        for i in range(count)
    ]


def outcome(text: str, settings: Settings, name: str) -> str:
    """Everything the case gives, as canonical JSON text (or its error)."""
    try:
        models = doors.parse_all(text, source="case.yaml")
        if len(models) == 1:
            rendering = engine.expand(models[0], settings, name=name)
        else:  # (a sweep's trials, several experiments: each named by its own name)
            rendering = engine.expand(list(models), settings)
    except ManifestError as error:
        return f"error: {error}"
    resources = [
        {
            "type": r.type,
            "name": r.name,
            "parent": r.parent,
            "dependencies": r.dependencies,
            "inputs": r.inputs,
            "options": r.options,
        }
        for r in rendering.resources
    ]
    document = {
        "resources": resources,
        "outputs": rendering.outputs,
        "warnings": rendering.warnings,
    }
    return json.dumps(document, sort_keys=True, default=str, indent=1)


def digest(text: str, settings: Settings, name: str) -> str:
    return hashlib.sha256(outcome(text, settings, name).encode()).hexdigest()


def recorded() -> dict[str, str]:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


# What `aichor:progress` adds to an experiment (issue 52; aichor_iac/k8s/progress.py): the
# receiver's credentials (made per experiment, or once for a sweep's trials), its Secret keys,
# its NetworkPolicy, Trainer's variables and files in every training container, the sidecar
# and its volume on the entry point's pod, and the sidecar's requests in a PodGroup's sum.
CREDENTIALS = ("-progress-ca-key", "-progress-ca", "-progress-key", "-progress-request")
CREDENTIALS += ("-progress-cert", "-progress-token")
VOLUMES = (progress.TRAINER_FILES.name, progress.RECEIVER_FILES.name)


def without_progress(document: dict[str, Any]) -> dict[str, Any]:
    """A case's outcome (`outcome`, read back) with what `aichor:progress` adds taken out:
    with the setting on, this is the outcome with it off, or the setting changed more."""
    dropped = set()
    kept = []
    for resource in document.get("resources", []):
        inputs = resource["inputs"]
        name = inputs.get("metadata", {}).get("name", "")
        secret = inputs.get("stringData", {})
        for key in progress.KEYS:
            secret.pop(key, None)
        if (
            resource["name"].endswith(CREDENTIALS)
            or (inputs.get("kind") == "NetworkPolicy" and name.endswith("-progress"))
            or (inputs.get("kind") == "Secret" and "stringData" in inputs and not secret)
        ):
            dropped.add(resource["urn"] if "urn" in resource else resource["name"])
            continue
        _pods_without_progress(inputs)
        kept.append(resource)
    for resource in kept:
        resource["dependencies"] = [
            d for d in resource["dependencies"] if d.rsplit("::", 1)[-1] not in dropped
        ]
    return {**document, "resources": kept}


def _pods_without_progress(value: Any) -> None:
    """Each pod spec in `value` without Trainer's variables and files and the receiver."""
    if isinstance(value, list):
        for item in value:
            _pods_without_progress(item)
        return
    if not isinstance(value, dict):
        return
    if "containers" in value:
        _drop(value, "initContainers", lambda c: c["name"] == progress.CONTAINER)
        _drop(value, "volumes", lambda v: v["name"] in VOLUMES)
        for container in value["containers"] + value.get("initContainers", []):
            _drop(container, "env", lambda e: e["name"].startswith("KUBEFLOW_TRAINER_SERVER_"))
            _drop(container, "volumeMounts", lambda m: m["name"] in VOLUMES)
    for item in value.values():
        _pods_without_progress(item)


def _drop(value: dict[str, Any], key: str, added: Any) -> None:
    """`value[key]` without the items the setting `added` (the key too, if none is left)."""
    if key in value:
        value[key] = [item for item in value[key] if not added(item)]
        if not value[key]:
            del value[key]


def progress_change(case: str) -> str:
    """What `aichor:progress` changes in the case: "nothing", "the receiver" (its outcome with
    the setting off is its outcome with it on, without what the setting adds, in the same
    order), else "more"."""
    text, settings, name = cases()[case]
    on = outcome(text, settings.model_copy(update={"progress": True}), name)
    off = outcome(text, settings.model_copy(update={"progress": False}), name)
    if on == off:
        return "nothing"
    if on.startswith("error") or off.startswith("error"):
        return "more"
    stripped, before = without_progress(json.loads(on)), json.loads(off)
    return "the receiver" if stripped == before else "more"


def progress_changes() -> int:
    """`progress_change` of every case, listed."""
    found: dict[str, list[str]] = {}
    for case in cases():
        found.setdefault(progress_change(case), []).append(case)
    for change, listed in sorted(found.items()):
        for case in listed:
            print(f"{change}: {case}")
    print(f"{len(cases())} cases: " + ", ".join(f"{len(v)} {k}" for k, v in sorted(found.items())))
    return 1 if "more" in found else 0


def main() -> int:
    if sys.argv[1:] == ["--progress"]:
        return progress_changes()
    current = {case: digest(*args) for case, args in cases().items()}
    if sys.argv[1:] == ["--write"]:
        GOLDEN.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
        print(f"{len(current)} cases recorded in {GOLDEN.relative_to(ROOT)}")
        return 0
    before = recorded()
    changed = sorted(c for c in current.keys() | before.keys() if current.get(c) != before.get(c))
    for case in changed:
        print(f"changed: {case}")
    print(f"{len(current)} cases, {len(changed)} changed")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
