"""A real browser for the dashboard's tests: Debian's Chromium, headless, driven by Playwright
(DESIGN §12: its own browser download is never used), and `aichor-iac dashboard` run as a
user runs it. `make test` installs chromium as root; without it the tests skip where they
cannot install it (not root), and fail where they could have."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags, Chromium's own connections are refused by the
# closed network, many at a time (DESIGN §12)
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Where a page of the dashboard may send requests: its own pages, fragments, JSON and assets
PATHS = ("/", "/fragments/", "/api/", "/experiments/", "/sweeps/", "/static/")


def chromium() -> Path:
    if not CHROMIUM.exists():
        if os.geteuid() == 0:  # (make test installs it as root: its absence is a failure)
            pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium")
        pytest.skip("needs Debian's chromium (make test installs it as root)")
    return CHROMIUM


@contextlib.contextmanager
def launched() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium()), args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Watched:
    """A page, with what it did that a user does not see: dialogs, requests, errors."""

    page: Any
    origin: str
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def strays(self) -> list[str]:
        """Requests anywhere but the dashboard's own paths."""
        return [
            url
            for url in self.requests
            if not url.startswith(self.origin) or not urlparse(url).path.startswith(PATHS)
        ]


def watched(browser: Any, origin: str) -> Watched:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    seen = Watched(page, origin)

    def dialog(d: Any) -> None:
        seen.dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", dialog)
    page.on("request", lambda r: seen.requests.append(r.url))
    page.on("pageerror", lambda e: seen.errors.append(str(e)))
    # (with where: a resource that failed to load names itself only there)
    page.on(
        "console",
        lambda m: m.type == "error" and seen.errors.append(f"{m.text} ({m.location.get('url')})"),
    )
    return seen


@contextlib.contextmanager
def dashboard(*args: str, cwd: Path | None = None) -> Iterator[str]:
    """`aichor-iac dashboard ARGS --port 0` while the block runs: its URL (its first line)."""
    command = [sys.executable, "-m", "aichor_iac.cli", "dashboard", *args, "--port", "0"]
    process = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), (url, process.stderr.read())
        yield url.rstrip("/")
    finally:
        process.terminate()
        process.wait(10)
