"""A dashboard page kept open with a log followed (issue 55: an hour under 200 MB): an
experiment's page in Debian's Chromium (headless, as the tests drive it) while its pod's log
grows by RATE lines a second and its progress report changes at every read; every INTERVAL
seconds, the page's JS heap and DOM nodes and the memory of Chromium's processes.

    python benchmarks/dashboard_memory.py [SECONDS] [RATE]

The page keeps a log's last 5,000 lines and a metric's last 1,800 points (an hour of reports
every 2 s): at 100 lines a second the log reaches its cap within a minute, so the memory a
longer run would hold shows in a few minutes. Prints a table and the target; asserts nothing.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests" / "dashboard")]
TARGET_MB = 200
INTERVAL = 15


class Growing:
    """A pod whose log grows by `rate` lines a second, for ever."""

    def __init__(self, rate: float) -> None:
        self.rate = rate

    def events(self) -> list:
        return []

    def lines(self, pod: str, follow: bool = False):
        for number in itertools.count():
            when = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
            yield when, f"step {number} loss={1 / (number + 1):.6f} " + "x" * 60
            time.sleep(1 / self.rate)


def reporting(found: dict) -> None:
    """A new progress report every 2 seconds (what the page draws)."""
    for step in itertools.count(1):
        metrics = [{"name": "loss", "value": str(1 / step)}, {"name": "lr", "value": "0.01"}]
        found["trainerStatus"] = {"progressPercentage": step % 100, "metrics": metrics}
        found["progress"] = {"receivedAt": datetime.now(timezone.utc).isoformat(), "stale": False}
        time.sleep(2)


def descendants(root: int) -> set[int]:
    """The processes `root` started, and theirs (Playwright's driver, the browser it starts)."""
    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            parents[int(pid)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, more = set(), {root}
    while more:
        more = {pid for pid, parent in parents.items() if parent in more} - found
        found |= more
    return found


def chromium_mb() -> tuple[float, float]:
    """The proportional set size (a shared page counted once over its sharers) of this
    browser's largest renderer (the page's), and of all its processes (MB)."""
    renderer = total = 0
    for pid in descendants(os.getpid()):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            status = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        if b"chromium" not in command.split(b"\0")[0]:
            continue
        kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Pss:")))
        total += kb
        if b"--type=renderer" in command:
            renderer = max(renderer, kb)  # (the page's: the others are spares, a few MB)
    return renderer / 1024, total / 1024


def main() -> int:
    from browser import CHROMIUM, FLAGS  # (Chromium as the tests drive it)
    from dashboard import objects, served
    from playwright.sync_api import sync_playwright

    from aichor_iac.dashboard.app import application
    from aichor_iac.dashboard.watch import Snapshot, Watch
    from aichor_iac.observe.history import Source
    from aichor_iac.observe.status import report

    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 180
    rate = float(sys.argv[2]) if len(sys.argv) > 2 else 100
    found = report(*objects("watched", 1, "Running"), datetime.now(timezone.utc))
    source = Source("watched", Growing(rate), None, "watched-worker", None, "pytorch")
    watch = Watch(lambda sources: (_ for _ in ()).throw(AssertionError("not read here")))
    watch.snapshot = Snapshot((source,), {"watched": found}, {}, None, time.time())
    threading.Thread(target=reporting, args=(found,), daemon=True).start()
    url, server = served(application(watch, "bench", None))
    print(f"an experiment's page for {seconds:.0f} s, its log growing by {rate:.0f} lines a second")
    print(f"{'s':>5} {'lines':>7} {'points':>7} {'JS heap MB':>11} {'DOM nodes':>10} "
          f"{'renderer MB':>12} {'chromium MB':>12}")  # fmt: skip
    peak = 0.0
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        page = browser.new_page()
        blank = chromium_mb()  # (before the page: a blank tab)
        print(f"{'blank':>5} {'':38} {blank[0]:12.0f} {blank[1]:12.0f}")
        page.goto(f"{url}/experiments/watched")
        cdp = page.context.new_cdp_session(page)
        cdp.send("Performance.enable")
        start = time.monotonic()
        while (spent := time.monotonic() - start) < seconds:
            time.sleep(min(INTERVAL, seconds - spent))
            cdp.send("HeapProfiler.collectGarbage")
            metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            lines = page.locator("#log span").count()
            points = page.locator("#metrics-chart").get_attribute("data-points") or "0"
            renderer, total = chromium_mb()
            peak = max(peak, renderer)
            print(
                f"{time.monotonic() - start:5.0f} {lines:7} {points:>7} "
                f"{metrics['JSHeapUsedSize'] / 2**20:11.1f} {metrics['Nodes']:10.0f} "
                f"{renderer:12.0f} {total:12.0f}",
                flush=True,
            )
        browser.close()
    server.should_exit = True
    print(f"the page's renderer at most {peak:.0f} MB (target: under {TARGET_MB} MB; the rest is")
    print("the browser's own processes, as with any page)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
