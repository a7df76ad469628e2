"""What the dashboard serves from the package: the chart library as scripts/vendor_js.py took it
from the npm registry (nothing edited since, its licence beside it), the page's own script and
style, all under 500 KB; and the screenshots docs/dashboard.md shows."""

from __future__ import annotations

import hashlib
import json
import re

from conftest import ROOT

STATIC = ROOT / "aichor_iac" / "dashboard" / "static"


def test_the_chart_library_is_the_registry_s_and_carries_its_licence():
    record = json.loads((STATIC / "vendor" / "VENDORED.json").read_text())
    assert set(record) == {"chart.umd.min.js", "chartjs-chart-pcp.umd.min.js"}
    for file, taken in record.items():
        code = (STATIC / "vendor" / file).read_bytes()
        assert hashlib.sha256(code).hexdigest() == taken["sha256"], file
        assert "MIT License" in (STATIC / "vendor" / f"{file}.LICENSE").read_text()


def test_the_pages_own_scripts_and_styles_are_under_500_kb():
    assets = [p for p in STATIC.rglob("*") if p.suffix in (".js", ".css")]
    assert sum(p.stat().st_size for p in assets) < 500_000


def test_the_page_loads_nothing_from_elsewhere():
    """No CDN, no web font: every src and href of the templates is the package's own."""
    templates = ROOT / "aichor_iac" / "dashboard" / "templates"
    for page in templates.glob("*.html"):
        for target in re.findall(r'(?:src|href)="([^"]*)"', page.read_text()):
            own = target.startswith("/") and not target.startswith("//")
            assert own or target.startswith(("#", "?")) or target == "data:,", (page.name, target)


def test_the_docs_show_a_screenshot_of_each_page():
    page = (ROOT / "docs" / "dashboard.md").read_text()
    shown = re.findall(r"\]\((images/dashboard-[a-z]+\.png)\)", page)
    assert shown == [
        "images/dashboard-experiments.png",
        "images/dashboard-experiment.png",
        "images/dashboard-sweep.png",
    ]
    for image in shown:
        assert (ROOT / "docs" / image).read_bytes().startswith(b"\x89PNG")
