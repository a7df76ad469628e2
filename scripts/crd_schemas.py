"""Make the custom resources' schemas that aichor-iac checks an input against
(aichor_iac/reading/crds/), from the operators' pinned releases: each CRD's OpenAPI v3 schema
of every served version, as the API server holds it, with descriptions and `status` left out
(a create does not validate `status`: the status subresource resets it). Only the storage
version is kept: it is the one each door reads (an older served one is refused as retired).

    python scripts/crd_schemas.py                       # from GitHub (raw.githubusercontent.com)
    python scripts/crd_schemas.py --mirror DIR          # from bare clones DIR/<owner>+<repo>

It also writes aichor_iac/reading/kubernetes/: the strict OpenAPI schemas of the Kubernetes
kinds a custom resource's templates and companions are checked against (`KINDS`), from the
newest Kubernetes release kubernetes-validate (the test extra) ships, without descriptions.
Then it compiles the CRDs' CEL rules (scripts/cel_compile.py).

Bumping a release: change its tag in SOURCES, run this, then `python tests/render_corpus.py`
to see which renders change, and update the docs' "Coming from" pages that name the tag.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import yaml

READING = Path(__file__).resolve().parent.parent / "aichor_iac" / "reading"
OUT = READING / "crds"
KUBERNETES = READING / "kubernetes"
# The Kubernetes kinds checked against their strict OpenAPI schema: pod and Job templates,
# JobSet claims, and the objects a custom resource's file may give beside it
KINDS = (
    "podtemplate-v1",
    "job-batch-v1",
    "persistentvolumeclaim-v1",
    "configmap-v1",
    "secret-v1",
    "service-v1",
    "serviceaccount-v1",
    "role-rbac-v1",
    "rolebinding-rbac-v1",
    "networkpolicy-networking-v1",
    "ingress-networking-v1",
)
TRAINER_MAIN = "8c0f5059bd51ec3ba6d6a6a7b2e1471de7bc13b3"  # kubeflow/trainer main, 2026-08-21
TRAINING_OPERATOR = ("kubeflow/trainer", "v1.9.4", "manifests/base/crds/kubeflow.org_{}.yaml")
# (GitHub repository, tag, path, names) -> one schema file per CRD and tag
SOURCES: list[tuple[str, str, str, tuple[str, ...]]] = [
    (*TRAINING_OPERATOR, ("pytorchjobs", "tfjobs", "xgboostjobs", "jaxjobs", "paddlejobs")),
    ("kubeflow/mpi-operator", "v0.8.0", "manifests/base/kubeflow.org_{}.yaml", ("mpijobs",)),
    (
        "ray-project/kuberay",
        "v1.7.0",
        "ray-operator/config/crd/bases/ray.io_{}.yaml",
        ("rayclusters", "rayjobs", "rayservices"),
    ),
    (
        "kubernetes-sigs/jobset",
        "v0.12.0",
        "config/components/crd/bases/jobset.x-k8s.io_{}.yaml",
        ("jobsets",),
    ),
    (
        "kubeflow/trainer",
        "v2.3.0",
        "manifests/base/crds/trainer.kubeflow.org_{}.yaml",
        ("trainjobs", "trainingruntimes", "clustertrainingruntimes"),
    ),
    # TrainJobs written for the releases before runtimePatches (labels, annotations and
    # podSpecOverrides in v2.0; podTemplateOverrides in v2.1)
    # OptimizationJob (trainer.kubeflow.org/v1alpha1) is on trainer main only (since 0cd558cc1,
    # after v2.3.0; its controller is not released): pinned to a commit of main
    (
        "kubeflow/trainer",
        TRAINER_MAIN,
        "manifests/base/crds/trainer.kubeflow.org_{}.yaml",
        ("optimizationjobs",),
    ),
    (
        "kubeflow/trainer",
        "v2.0.0",
        "manifests/base/crds/trainer.kubeflow.org_{}.yaml",
        ("trainjobs",),
    ),
    (
        "kubeflow/trainer",
        "v2.1.0",
        "manifests/base/crds/trainer.kubeflow.org_{}.yaml",
        ("trainjobs",),
    ),
]
DROPPED = {"description"}  # (and `status` at the root)


def fetch(repo: str, tag: str, path: str, mirror: Path | None) -> str:
    """A file of a repository at a tag: from a bare clone under `mirror`, else from GitHub."""
    if mirror is not None:
        git = mirror / repo.replace("/", "+") / "repo"
        return subprocess.run(
            ["git", "-C", str(git), "show", f"{tag}:{path}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    url = f"https://raw.githubusercontent.com/{repo}/{tag}/{path}"
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read().decode()


def stripped(schema: Any) -> Any:
    """A schema without the words that only document it (descriptions; a field of that name
    in `properties` is kept)."""
    if isinstance(schema, dict):
        return {
            key: (
                value
                if key in ("default", "enum", "example")
                else {k: stripped(v) for k, v in value.items()}
                if key in ("properties", "$defs", "definitions") and isinstance(value, dict)
                else stripped(value)
            )
            for key, value in schema.items()
            if key not in DROPPED
        }
    if isinstance(schema, list):
        return [stripped(item) for item in schema]
    return schema


def kubernetes() -> None:
    """The Kubernetes kinds' strict schemas and their definitions, from kubernetes-validate."""
    from kubernetes_validate.utils import latest_version, schema_contents

    version = latest_version()
    base = f"kubernetes-json-schema/v{version}-local-strict"
    KUBERNETES.mkdir(parents=True, exist_ok=True)
    for old in KUBERNETES.glob("*.json"):
        old.unlink()
    kinds = {name: stripped(schema_contents(f"{base}/{name}.json", version)) for name in KINDS}
    definitions = stripped(schema_contents(f"{base}/_definitions.json", version))
    for name, data in {"_definitions": reached(definitions, kinds.values()), **kinds}.items():
        target = KUBERNETES / f"{name}.json"
        target.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")
    (KUBERNETES / "VERSION").write_text(f"{version}\n")
    print(f"{KUBERNETES.name}/: Kubernetes {version}, {len(KINDS)} kinds and their definitions")


def reached(definitions: dict[str, Any], kinds: Any) -> dict[str, Any]:
    """The definitions the kinds' schemas reach through `$ref`s (Kubernetes' file holds every
    kind's: a fifth is read here, and parsing the rest would cost every check)."""
    named = definitions["$defs"]
    found: set[str] = set()
    todo = [json.dumps(kind) for kind in kinds]
    while todo:
        for name in re.findall(r'"\$ref": "[^"#]*#/\$defs/([^"]+)"', todo.pop()):
            if name not in found:
                found.add(name)
                todo.append(json.dumps(named[name]))
    return {**definitions, "$defs": {name: named[name] for name in sorted(found)}}


def schemas(crd: dict[str, Any], repo: str, tag: str) -> dict[str, Any]:
    """The CRD's storage version's schema, with where it comes from."""
    names = crd["spec"]["names"]
    versions = {}
    for version in crd["spec"]["versions"]:
        if not version.get("storage"):
            continue
        root = version["schema"]["openAPIV3Schema"]
        root["properties"].pop("status", None)
        versions[version["name"]] = stripped(root)
    return {
        "source": f"github.com/{repo}@{tag}",
        "group": crd["spec"]["group"],
        "kind": names["kind"],
        "scope": crd["spec"]["scope"],
        "versions": versions,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, help="bare clones, as DIR/<owner>+<repo>/repo")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.json"):
        old.unlink()
    for repo, tag, pattern, names in SOURCES:
        for name in names:
            crd = yaml.safe_load(fetch(repo, tag, pattern.format(name), args.mirror))
            data = schemas(crd, repo, tag)
            target = OUT / f"{data['group']}_{data['kind']}_{tag}.json"
            target.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")
            print(f"{target.name}: {', '.join(data['versions'])} ({target.stat().st_size:,} bytes)")
    kubernetes()
    subprocess.run([sys.executable, str(Path(__file__).with_name("cel_compile.py"))], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
