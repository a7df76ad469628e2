"""Where the suite's time goes (issue 68: `make demo` + `make test` within 15 minutes on two
cores): `make test`'s run with every test's duration, summed by area (the tests' folder, or
module at the top) and by tier (`slow`, the quick tier of `make check`), with the slowest tests.
A test's time is its setup, call and teardown; the run's wall time is pytest's own (three
processes share two cores with real runs that wait: the sum is not thrice the wall time).

    .venv/bin/python benchmarks/suite.py               # runs the suite (about 18 minutes)
    .venv/bin/python benchmarks/suite.py --from FILE   # reads a run's `--durations=0` output
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^\s*([\d.]+)s (setup|call|teardown)\s+(tests/\S+?)::(.+?)\s*$")
# pytest's summary line, with or without its rule of = (-q): the first run's, not `exclusive`'s
WALL = re.compile(r"^=*\s*\d+ (?:passed|failed)\b.* in ([\d.]+)s(?: \([\d:]+\))?\s*=*$", re.M)
SLOWEST = 15


def durations(text: str) -> Counter[tuple[str, str]]:
    """Each test's time, (file, test) -> seconds, from pytest's `--durations` lines."""
    found: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        if match := LINE.match(line):
            seconds, _, path, test = match.groups()
            found[path, test] += float(seconds)
    return found


def area(path: str) -> str:
    """A test file's area: its folder under tests/, or the file for one at the top."""
    parts = Path(path).parts
    return parts[1] if len(parts) > 2 else Path(path).stem


def slow_tests() -> set[tuple[str, str]]:
    """The tests `make check` leaves out (those marked slow, or exclusive)."""
    return collected("slow or exclusive")


def collected(marks: str) -> set[tuple[str, str]]:
    """(file, test) of each test that `marks` (a `pytest -m` expression) selects."""
    # (pyproject's -q and one more: the count by file, not each test; -o resets it)
    collect = ["-o", "addopts=", "--collect-only", "-q", "-m", marks]
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", *collect],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout
    pairs = (line.split("::", 1) for line in listed.splitlines() if "::" in line)
    return {(path, test) for path, test in pairs}


def report(text: str, slow: set[tuple[str, str]]) -> str:
    times = durations(text)
    total = sum(times.values())
    wall = f"{float(found[1]) / 60:,.1f} min" if (found := WALL.search(text)) else "not said"
    by_area: Counter[str] = Counter()
    for (path, _), seconds in times.items():
        by_area[area(path)] += seconds
    in_slow = sum(s for key, s in times.items() if key in slow)
    lines = [
        f"{len(times):,} tests, {total:,.0f} s in all; the run's wall time: {wall}",
        f"  slow tier {in_slow:,.0f} s, quick tier {total - in_slow:,.0f} s",
        "by area:",
        *(f"  {seconds:7,.0f} s  {name}" for name, seconds in by_area.most_common()),
        f"the {SLOWEST} slowest:",
        *(f"  {s:7,.1f} s  {p}::{t}" for (p, t), s in times.most_common(SLOWEST)),
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="given", help="a run's output with --durations=0")
    args = parser.parse_args()
    if args.given:
        text = Path(args.given).read_text()
    else:
        # (as make test runs it)
        run = [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-q"]
        run += ["-m", "not exclusive", "--durations=0", "-p", "no:warnings"]
        text = subprocess.run(run, cwd=ROOT, capture_output=True, text=True).stdout
    print(report(text, slow_tests()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
