"""Copy the dashboard's chart library into the package (aichor_iac/dashboard/static/vendor/),
from the npm registry's tarballs of pinned releases, each checked against the registry's own
integrity (sha512): the page loads nothing from a CDN and works offline. Each file's licence
is copied beside it; VENDORED records what was taken (tests check the files against it).

    python scripts/vendor_js.py

Bumping a release: change its version and integrity in PACKAGES (`npm view NAME@VERSION
dist.integrity`), run this, then the dashboard's browser tests.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
import urllib.request
from pathlib import Path

VENDOR = Path(__file__).resolve().parent.parent / "aichor_iac" / "dashboard" / "static" / "vendor"
# name, version, the tarball's integrity, its file (in the tarball) -> the file here, licence
PACKAGES = (
    (
        "chart.js",
        "4.6.1",
        "sha512-hJyniucsFmq//EvXYvJ6c6mahPoI3kaxdjVH8awTaJ/fDNWeSqqqArixMJWkWNN6fcYvPU3HneSANFNYtRi61g==",
        "package/dist/chart.umd.min.js",
        "chart.umd.min.js",
        "package/LICENSE.md",
    ),
    (
        "chartjs-chart-pcp",
        "4.3.5",
        "sha512-lOkFHb8N+1aDTzXPt8cNUpwGw8TQopzHM6AZVHDkMuecveoJM2WQ8nj8w0voxt4IisbR57WR0uyX44w9r+fg1A==",
        "package/build/index.umd.min.js",
        "chartjs-chart-pcp.umd.min.js",
        "package/LICENSE",
    ),
)


def tarball(name: str, version: str, integrity: str) -> tarfile.TarFile:
    url = f"https://registry.npmjs.org/{name}/-/{name}-{version}.tgz"
    with urllib.request.urlopen(url, timeout=60) as answer:
        data = answer.read()
    digest = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != integrity:
        raise SystemExit(f"{url}: integrity {digest}, not the pinned {integrity}")
    return tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")


def main() -> None:
    VENDOR.mkdir(parents=True, exist_ok=True)
    record = {}
    for name, version, integrity, source, target, licence in PACKAGES:
        with tarball(name, version, integrity) as archive:
            code = archive.extractfile(source).read()
            (VENDOR / target).write_bytes(code)
            licence_text = archive.extractfile(licence).read()
            (VENDOR / f"{target}.LICENSE").write_bytes(licence_text)
        record[target] = {
            "package": f"{name}@{version}",
            "integrity": integrity,
            "sha256": hashlib.sha256(code).hexdigest(),
        }
        print(f"{target}: {name}@{version} ({len(code):,} bytes)")
    (VENDOR / "VENDORED.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
