"""What each runtime dependency weighs installed (issue 40): for every dependency of the
installed aichor-iac (`pyproject.toml`'s, without the extras), its installed files with those of
everything it requires, and what it alone adds (what no other runtime dependency requires),
from the environment this runs in. `make demo`'s `.venv` holds exactly these (and pip).

    python benchmarks/weight.py
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement


def name_of(text: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(text).name).lower()


def closure(name: str, seen: set[str] | None = None) -> set[str]:
    """A distribution and everything it requires (for the environment's markers, no extras)."""
    seen = set() if seen is None else seen
    if name in seen:
        return seen
    try:
        requires = metadata.distribution(name).requires or []
    except metadata.PackageNotFoundError:
        return seen
    seen.add(name)
    for text in requires:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            closure(name_of(text), seen)
    return seen


def size(name: str) -> int:
    """The bytes of a distribution's installed files (bytecode included)."""
    distribution = metadata.distribution(name)
    total = 0
    for file in distribution.files or []:
        path = Path(str(distribution.locate_file(file)))
        if path.is_file():
            total += path.stat().st_size
    return total


def main() -> int:
    direct = [
        name_of(text)
        for text in metadata.requires("aichor-iac") or []
        if Requirement(text).marker is None  # (an extra's: `extra == "test"`)
    ]
    closures = {name: closure(name) for name in direct}
    owners: dict[str, list[str]] = {}
    for name, found in closures.items():
        for dependency in found:
            owners.setdefault(dependency, []).append(name)
    everything = set().union(*closures.values())
    print("| runtime dependency | MB with what it requires | MB it alone adds |")
    print("|---|---|---|")
    rows = []
    for name in direct:
        alone = [d for d in closures[name] if owners[d] == [name]]
        rows.append((sum(size(d) for d in closures[name]), sum(size(d) for d in alone), name))
    for whole, alone, name in sorted(rows, reverse=True):
        print(f"| {name} | {whole / 1e6:.1f} | {alone / 1e6:.1f} |")
    total = sum(size(d) for d in everything)
    python = sys.version.split()[0]
    print(f"\nin all: {total / 1e6:.0f} MB in {len(everything)} distributions (Python {python})")
    print("\n| optional extra | MB it adds to the runtime | distributions |")
    print("|---|---|---|")
    for extra in EXTRAS:
        added = set().union(*(closure(n) for n in extra_requirements(extra))) - everything
        missing = [n for n in extra_requirements(extra) if n not in added | everything]
        shown = f"{sum(size(d) for d in added) / 1e6:.1f}" + (" (not installed)" * bool(missing))
        print(f"| {extra} | {shown} | {', '.join(sorted(added))} |")
    return 0


EXTRAS = ("plot", "search")  # what a user adds (`pip install 'aichor-iac[search]'`)


def extra_requirements(extra: str) -> list[str]:
    """The distributions an extra of aichor-iac names."""
    return [
        name_of(text)
        for text in metadata.requires("aichor-iac") or []
        if (marker := Requirement(text).marker) is not None
        and marker.evaluate({"extra": extra})
        and name_of(text) != "aichor-iac"
    ]


if __name__ == "__main__":
    raise SystemExit(main())
