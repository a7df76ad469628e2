"""Every fenced command and snippet of the README and docs/ runs as printed (tests/doc_snippets.py
says how a page is read): each page in a fresh copy of the checkout, its fences in order. The
README and Getting started run as a new user runs them: after `make demo` alone, with the
environment it makes first on PATH; the other pages with this suite's environment (the test
extra: the frameworks). A fence that cannot run here is marked in its page with the reason
(a cluster, the Pulumi CLI, this suite itself); the marks are counted."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from doc_snippets import ROOT, Fence, fences, matches, pages

pytestmark = pytest.mark.slow  # (the docs' commands, run as printed)

# Pages a new user follows from a fresh clone, in this order, after `make demo` alone
FIRST_HOUR = ("README.md", "docs/getting-started.md")
# The fences run whole, run up to a mark, and not run (a page that changes them changes these,
# on purpose)
WHOLE, UP_TO_A_MARK, NOT_RUN = 26, 3, 21
SNIPPET = "doc_snippet.py"
COMMAND_SECONDS = 900  # (a local run of the sweep page's trials is the slowest)


def _hooks():
    spec = importlib.util.spec_from_file_location("hooks", ROOT / "scripts/mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _checkout(into: Path) -> Path:
    """A copy of the checkout's files (tracked, and new ones not ignored): a fresh clone."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name, follow_symlinks=False)
    return into


def _env(bin_dir: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return {**keep, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}


def _run_page(page: str, where: Path, bin_dir: Path) -> None:
    """The page's fences in order, in `where`, with `bin_dir` first on PATH."""
    python: list[str] = []  # the page's Python so far (one reader, one session)
    for fence in fences(ROOT / page):
        if fence.title:
            (where / fence.title).parent.mkdir(parents=True, exist_ok=True)
            (where / fence.title).write_text(fence.text)
            if fence.lang != "python":
                continue
        if fence.not_run or fence.lang not in ("sh", "bash", "console", "python"):
            continue
        if fence.lang == "python":
            if fence.title:  # (a file the page saves; it runs it with a command)
                continue
            # (saved as a file, as a reader would: a function's source is read from its file)
            (where / SNIPPET).write_text("".join(python) + fence.python())
            _check(fence, f"python {SNIPPET}", subprocess.run(
                [str(bin_dir / "python"), SNIPPET], cwd=where, env=_env(bin_dir),
                capture_output=True, text=True, timeout=COMMAND_SECONDS,
            ), [])  # fmt: skip
            python.append(fence.python())
            continue
        for command, shown in fence.commands():
            result = subprocess.run(
                ["bash", "-c", command], cwd=where, env=_env(bin_dir),
                capture_output=True, text=True, timeout=COMMAND_SECONDS,
            )  # fmt: skip
            _check(fence, command, result, shown)


def _check(fence: Fence, command: str, result: subprocess.CompletedProcess, shown: list[str]):
    said = f"{fence.where}: `{command}` exited {result.returncode}\n{result.stdout}{result.stderr}"
    if shown:  # (the page shows what it prints: an error's exit status is part of it)
        lacking = matches(result.stdout + result.stderr, shown)
        assert lacking is None, f"{said}\nthe page shows a line it did not print: {lacking}"
    else:
        assert result.returncode == 0, said


def test_every_fence_runs_or_its_page_says_why() -> None:
    every = [f for page in pages() for f in fences(page)]
    runs = [f for f in every if f.runs]
    marked = [f for f in runs if f.marked]
    assert all(f.why and len(f.why) > 10 for f in marked)
    counts = (
        len(runs) - len(marked),
        sum(not f.not_run for f in marked),
        sum(f.not_run for f in marked),
    )
    print(f"doc-test: {counts[0]} fences run whole, {counts[1]} up to a mark, {counts[2]} not run:")
    for fence in marked:
        print(f"  {fence.where} ({'not run' if fence.not_run else fence.stops_at}): {fence.why}")
    assert counts == (WHOLE, UP_TO_A_MARK, NOT_RUN)


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_fence_closes(page: Path) -> None:
    assert _hooks().unclosed_fence(page.read_text()) is None


def test_an_unclosed_fence_is_found() -> None:
    assert _hooks().unclosed_fence("a\n```sh\nls\n```\nb\n  ```python\nx = 1\n") == 6
    assert _hooks().unclosed_fence("````md\n```sh\n```\n````\n") is None


def test_the_first_hour_runs_as_printed_after_make_demo_alone(tmp_path: Path) -> None:
    """A fresh clone; the README's commands, then Getting started's, as a new user pastes
    them, with the environment `make demo` made (the runtime alone) first on PATH."""
    where = _checkout(tmp_path / "aichor-iac")
    for page in FIRST_HOUR:
        _run_page(page, where, where / ".venv" / "bin")
    assert (where / ".venv" / ".runtime").exists() and not (where / ".venv/.installed").exists()


OTHER_PAGES = [
    str(p.relative_to(ROOT))
    for p in pages()
    if str(p.relative_to(ROOT)) not in FIRST_HOUR
    and any(f.runs and not f.not_run for f in fences(p))
]


@pytest.mark.parametrize("page", OTHER_PAGES)
def test_the_pages_fences_run_as_printed(page: str, tmp_path: Path) -> None:
    _run_page(page, _checkout(tmp_path / "aichor-iac"), Path(sys.executable).parent)
