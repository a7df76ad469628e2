"""`pip install aichor-iac` from the wheel `python -m build` makes (from its sdist, as a
release is built): every module, the examples the README refers to and the manifest's JSON
Schema are in both, and the installed CLI finds them away from this checkout."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # (a real sdist and wheel, built and installed)

ROOT = Path(__file__).parent.parent
spec = importlib.util.spec_from_file_location("suite", ROOT / "benchmarks" / "suite.py")
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )
    # every package with files in it is declared: setuptools warns of none it would leave out
    # (make demo printed 90 lines of them for the CRD schemas' folders)
    assert "Package would be ignored" not in built.stdout + built.stderr
    (sdist,) = out.glob("aichor_iac-*.tar.gz")
    with tarfile.open(sdist) as archive:
        shipped = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {
        "examples/pytorch.yaml",
        "examples/train.py",
        "schema/aichor-manifest.schema.json",
    } <= shipped
    (built,) = out.glob("aichor_iac-*.whl")
    return built


def test_the_wheel_holds_every_module_the_examples_and_the_schema(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "aichor_iac").rglob("*.py")}
    assert modules <= names, modules - names
    shipped = {
        f"aichor_iac/examples/{p.name}"
        for p in (ROOT / "examples").iterdir()
        if p.suffix in (".yaml", ".py")
    }
    assert shipped <= names, shipped - names
    assert {"aichor_iac/py.typed", "aichor_iac/schema/aichor-manifest.schema.json"} <= names
    reading = ROOT / "aichor_iac/reading"
    crds = {
        str(p.relative_to(ROOT))
        for p in [*(reading / "crds").iterdir(), *(reading / "kubernetes").iterdir()]
    }
    assert crds and crds <= names, (
        crds - names
    )  # (every custom resource is checked against its CRD)
    entry_points = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith("entry_points.txt"))
    )
    assert b"aichor-iac = aichor_iac.cli:command" in entry_points


def test_the_installed_cli_finds_its_examples_away_from_the_checkout(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--quiet",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "PYTHONPATH": str(site)}

    def run(*argv: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "aichor_iac.cli", *argv],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            check=True,
        )

    where = subprocess.run(
        [sys.executable, "-c", "import aichor_iac; print(aichor_iac.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=True,
    ).stdout
    assert where.startswith(str(site)), where  # the wheel's, not this checkout's
    listed = json.loads(run("examples", "--output", "json").stdout)
    assert {e["name"] for e in listed} == {p.stem for p in (ROOT / "examples").glob("*.yaml")}
    run("examples", "pytorch", "-o", "mine")
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["pytorch.yaml", "train.py"]
    assert (
        run("validate", "mine/pytorch.yaml").stdout == "mine/pytorch.yaml: valid pytorch manifest\n"
    )
    trainjob = (ROOT / "tests/trainer/yaml.01-multi-node.yaml").read_text()
    assert (
        "valid trainer.kubeflow.org/v1alpha1 TrainJob"
        in run("validate", "-", stdin=trainjob).stdout
    )
    schema = site / "aichor_iac" / "schema" / "aichor-manifest.schema.json"
    assert json.loads(schema.read_text()) == json.loads(run("schema").stdout)


def test_make_demo_installs_the_runtime_alone(tmp_path):
    """On a fresh clone `make demo` installs the package without the test extra (the
    frameworks the tests run: gigabytes); `make test` adds it."""
    for name in ("Makefile", "pyproject.toml"):
        (tmp_path / name).write_text((ROOT / name).read_text())

    def planned(target: str) -> str:
        return subprocess.run(
            ["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, check=True
        ).stdout

    demo = planned("demo")
    assert "pip install -qq -e .\n" in demo and "[test]" not in demo
    assert "pip install -qq -e '.[test]'" in planned("test")


def test_make_test_runs_every_exclusive_test_alone_afterwards():
    """`make test`'s second run collects only the files that mark tests exclusive: every test
    so marked is in them (one marked through another name would otherwise never run)."""
    planned = subprocess.run(
        ["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    (alone,) = [line for line in planned.splitlines() if "-m exclusive" in line]
    files = set(alone.split("-m exclusive", 1)[1].split())
    marked = {path for path, _ in suite.collected("exclusive")}
    assert marked and marked == files, (marked, files)
