"""The pull request recipe of docs/review.md, run as written: GitHub Actions' and GitLab CI's
job run one script; in a repository whose branch changes one experiment and adds another, the
comment previews both (the change field by field) and leaves the untouched one out; an invalid
manifest fails the job."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "review.md"
GIT = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def recipes() -> dict[str, dict]:
    files = dict(re.findall(r'```yaml title="([^"]+)"\n(.*?)```', PAGE.read_text(), re.S))
    return {name: yaml.safe_load(text) for name, text in files.items()}


def scripts() -> tuple[str, str, str]:
    """The script each recipe runs, and GitLab's posting step."""
    found = recipes()
    steps = found[".github/workflows/aichor-preview.yml"]["jobs"]["preview"]["steps"]
    (github,) = [s["run"] for s in steps if s.get("name", "").startswith("Validate and preview")]
    gitlab = found[".gitlab-ci.yml"]["aichor-iac preview"]["script"]
    (shared,) = [s for s in gitlab if "aichor-iac preview" in s]
    return github, shared, gitlab[-1]


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", *args], cwd=cwd, env={**os.environ, **GIT}, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def pull_request(tmp_path: Path) -> Path:
    """A clone whose branch changes experiments/pytorch.yaml (3 workers), adds xgboost.yaml
    and leaves tf.yaml alone, against `main` on its origin."""
    origin, work = tmp_path / "origin.git", tmp_path / "work"
    git(tmp_path, "init", "--quiet", "--bare", "-b", "main", str(origin))
    git(tmp_path, "clone", "--quiet", str(origin), str(work))
    (work / "experiments").mkdir()
    for name in ("pytorch.yaml", "tf.yaml"):
        (work / "experiments" / name).write_text((ROOT / "examples" / name).read_text())
    git(work, "checkout", "--quiet", "-b", "main")
    git(work, "add", ".")
    git(work, "commit", "--quiet", "-m", "base")
    git(work, "push", "--quiet", "origin", "main")
    git(work, "checkout", "--quiet", "-b", "more-workers")
    pytorch = work / "experiments" / "pytorch.yaml"
    pytorch.write_text(pytorch.read_text().replace("count: 2", "count: 3"))
    (work / "experiments" / "xgboost.yaml").write_text(
        (ROOT / "examples" / "xgboost.yaml").read_text()
    )
    (work / "README.md").write_text("not an experiment\n")
    git(work, "add", ".")
    git(work, "commit", "--quiet", "-m", "change")
    return work


def run(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    # (its `mktemp -d` in the test's own folder: a CI runner's /tmp goes with it, not ours)
    env = {**os.environ, **GIT, "BASE_REF": "main", "PATH": path, "TMPDIR": str(cwd.parent)}
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True)


def test_both_recipes_run_one_script() -> None:
    github, gitlab, _ = scripts()
    assert github == gitlab


def test_the_script_previews_each_changed_manifest_against_the_base_branch(tmp_path) -> None:
    work = pull_request(tmp_path)
    result = run(scripts()[0], work)
    assert result.returncode == 0, result.stdout + result.stderr
    comment = (work / "comment.md").read_text()
    assert comment.count("<!-- aichor-iac preview -->") == 2
    previewed = re.findall(r"### aichor-iac preview: `([^`]+)`", comment)
    assert previewed == ["pytorch-ddp", "xgboost-dist"]  # (not tf-ps: unchanged)
    assert "~ spec.parallelism: 2 => 3" in comment  # (the change, field by field)
    assert "+- 2 to replace" in comment and "+ 13 to create" in comment
    # the posting step is valid shell
    syntax = subprocess.run(["bash", "-n", "-c", scripts()[2]], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


def test_an_invalid_manifest_fails_the_job(tmp_path) -> None:
    work = pull_request(tmp_path)
    pytorch = work / "experiments" / "pytorch.yaml"
    pytorch.write_text(pytorch.read_text().replace("operator: pytorch", "operator: pytorchh"))
    git(work, "commit", "--quiet", "-am", "typo")
    result = run(scripts()[0], work)
    assert result.returncode == 2
    assert "experiments/pytorch.yaml" in result.stderr + result.stdout
