"""A seeded manifest fuzzer: mutations of the examples (wrong types, huge and tiny numbers,
unicode, shell metacharacters, empty and missing values, unknown, repeated and deep keys, other
operators) run through what `aichor-iac validate` runs, each classified as

- `accepted`: valid; a sample is also rendered, and every object must pass
  `kubernetes-validate` strict (the API server's schema);
- `refused`: a clean `ManifestError` (exit 2, one line per problem);
- `crash`: any other exception (a traceback for the user): always a bug.

`python tests/fuzz.py [CASES] [SEED]` prints the table (`make fuzz`: 100,000 cases);
tests/test_fuzz.py runs 5,000 in `make test`.
"""

from __future__ import annotations

import copy
import random
import sys
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from aichor_iac import engine, manifest, planning
from aichor_iac.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "examples").glob("*.yaml"))]
VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 2, 3, 0.0001, 0.5, 1e308, 2**31, 2**63, 10**30,
    float("inf"), float("nan"), "", " ", "0", "1", "2h", "abc", "ÄÖü", "名前", "🚀",
    "a" * 300, "$(touch /tmp/aichor-fuzz-escaped)", "`id`", "; rm -rf /", "x\ny", "x\0y",
    "'\"\\", "--head", "Worker", "worker", "pytorch", "ray", "kuberay", "mpi", "jobset",
    "nvidia.com/gpu", "mig-1g.10gb", "2x2", "0.0.0.0/0", [], {}, [1, 2], {"a": 1},
]  # fmt: skip
KEYS = ["count", "cpus", "ramRatio", "memory", "shmSizeGB", "name", "image", "command",
        "Worker", "worker", "Master", "Head", "Workers", "Job", "timeout", "env", "gpu",
        "rayStartParams", "completions", "parallelisms", "debug", "ünknown", "a" * 64]  # fmt: skip
OPERATORS = ["pytorch", "xgboost", "jax", "tf", "mpi", "ray", "kuberay", "jobset", "batchjob"]


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
    """One to three random edits of a copy of the document."""
    document = copy.deepcopy(document)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(paths(document)[1:] or [("spec",)])
        parent = document
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        action = rng.randrange(6)
        if action == 0:  # another value
            parent[last] = rng.choice(VALUES)
        elif action == 1 and isinstance(parent, dict):  # gone
            parent.pop(last, None)
        elif action == 2 and isinstance(parent, dict):  # another key beside it
            parent[rng.choice(KEYS)] = rng.choice(VALUES)
        elif action == 3:  # nested deeper
            parent[last] = {rng.choice(KEYS): parent[last]}
        elif action == 4 and isinstance(document.get("spec"), dict):  # another operator
            document["spec"]["operator"] = rng.choice(OPERATORS)
        else:  # a container of it
            parent[last] = [parent[last]] * rng.randint(0, 3)
    return document


def text_of(document: dict, rng: random.Random) -> str:
    """The document as YAML, sometimes with a key repeated or its bytes mangled."""
    text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    if rng.random() < 0.05:
        lines = text.splitlines()
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        text = "\n".join(lines) + "\n"
    return text


def check(text: str, render: bool) -> tuple[str, str]:
    """(outcome, detail) for one manifest text, as `aichor-iac validate` (and `render`) run it."""
    try:
        model = manifest.parse(text, source="fuzz.yaml")
        planning.blueprint(model, Settings(), "fuzz")
    except manifest.ManifestError as error:
        lines = str(error).splitlines()
        if not lines or any(not line.startswith("fuzz.yaml") for line in lines):
            return "crash", f"not one line per problem: {error}"
        return "refused", ""
    except Exception:
        return "crash", traceback.format_exc()
    if render:
        try:
            for obj in engine.expand(model, Settings(), name="fuzz").objects:
                kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
        except kubernetes_validate.ValidationError as error:
            return "api-rejected", str(error)
        except Exception:
            return "crash", traceback.format_exc()
    return "accepted", ""


def run(cases: int, seed: int = 0, renders: int = 50) -> tuple[Counter, list[tuple[str, str]]]:
    rng = random.Random(seed)
    outcomes: Counter = Counter()
    failures: list[tuple[str, str]] = []
    rendered = 0
    for _ in range(cases):
        text = text_of(mutate(rng.choice(EXAMPLES), rng), rng)
        render = rendered < renders
        outcome, detail = check(text, render)
        rendered += render and outcome == "accepted"
        outcomes[outcome] += 1
        if outcome in ("crash", "api-rejected"):
            failures.append((text, detail))
    return outcomes, failures


def main() -> int:
    cases = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    outcomes, failures = run(cases, seed, renders=max(50, cases // 200))
    print(f"{'outcome':<14}{'cases':>10}{'share':>9}")
    for outcome in ("accepted", "refused", "crash", "api-rejected"):
        print(f"{outcome:<14}{outcomes[outcome]:>10}{outcomes[outcome] / cases:>9.1%}")
    for text, detail in failures[:5]:
        print("---\n" + text + detail)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
