"""Where records are kept: a folder per run under the user's data directory
(`$XDG_DATA_HOME/aichor-iac/runs`, else `~/.local/share/aichor-iac/runs`), named by a new id
each run, so that two runs at once, of the same file or not, never mix and a run again is a
new folder beside the old one. A run's folder holds:

- `records.json`: its records (`model.Record`: one per experiment or sweep), rewritten whole
  (a new file renamed over the old, so a reader never sees half of one), and
  `summaries.json` beside it (`model.Summary`: what a list of runs reads);
- `cluster.json.gz`: its Jobs, pods and events as the Kubernetes API gave them, last seen;
- `states.jsonl`: each pod's state changes, one line each, as they happened;
- `rendered.sha256`: the digest of the objects the run was rendered to;
- `logs/<pod>.<container>.log.gz`: each container's lines with the kubelet's times, its first
  and last LOG_PART bytes when it printed more (a line says how much was cut between).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import secrets
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .model import SCHEMA, Record, Summary, UnknownSchema, record_of, summary_of

LOG_PART = 1 << 20  # bytes of a container's log kept from its start, and as many from its end
RECORDS, CLUSTER, STATES, LOGS = "records.json", "cluster.json.gz", "states.jsonl", "logs"
RENDERED, SUMMARIES = "rendered.sha256", "summaries.json"


def root() -> Path:
    """The folder of this user's runs (AICHOR_IAC_HISTORY names another)."""
    if given := os.environ.get("AICHOR_IAC_HISTORY"):
        return Path(given)
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "aichor-iac" / "runs"


def new_folder(name: str, when: float | None = None) -> Path:
    """A new run's folder: `<UTC time>-<name>-<6 hex>`, so that a listing by name is by age."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when or time.time()))
    root().mkdir(parents=True, exist_ok=True, mode=0o700)  # (logs: this user's alone)
    folder = root() / f"{stamp}-{name[:40]}-{secrets.token_hex(3)}"
    folder.mkdir(mode=0o700)
    return folder


def _replace(path: Path, data: bytes) -> None:
    """`data` as the file `path`, all at once for its readers."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_bytes(data)
    os.replace(partial, path)


def write_records(folder: Path, records: Iterable[Record]) -> None:
    """A run's records, and their summaries (what a list of runs reads)."""
    records = list(records)
    document = [r.as_json() for r in records]
    _replace(folder / RECORDS, json.dumps(document, indent=1).encode())
    summaries = [Summary.of(r).as_json() for r in records]
    _replace(folder / SUMMARIES, json.dumps(summaries).encode())


def read_records(folder: Path) -> list[Record]:
    """A run's records; none where it has none yet, or another version wrote them."""
    try:
        return [record_of(d) for d in json.loads((folder / RECORDS).read_text())]
    except (OSError, ValueError, UnknownSchema, TypeError, KeyError):
        return []


def read_documents(folder: Path) -> list[dict[str, Any]]:
    """A run's records as JSON documents (of this version's schema only)."""
    try:
        found = json.loads((folder / RECORDS).read_text())
    except (OSError, ValueError):
        return []
    return [d for d in found if isinstance(d, dict) and d.get("schema") == SCHEMA]


def read_summaries(folder: Path) -> list[Summary]:
    try:
        return [summary_of(d) for d in json.loads((folder / SUMMARIES).read_text())]
    except (OSError, ValueError, UnknownSchema, TypeError, KeyError):
        return []


def every_summary() -> Iterator[tuple[Path, Summary]]:
    """Every run's records' summaries, newest run first (each with its run's folder)."""
    for folder in folders():
        for summary in read_summaries(folder):
            yield folder, summary


def folders() -> list[Path]:
    """Every run's folder, newest first."""
    if not root().is_dir():
        return []
    return sorted((p for p in root().iterdir() if p.is_dir()), key=lambda p: p.name, reverse=True)


def write_rendered(folder: Path, objects: list[dict[str, Any]]) -> None:
    """The digest of the objects the run was rendered to (sha256 of their JSON)."""
    text = json.dumps(objects, sort_keys=True, separators=(",", ":"))
    (folder / RENDERED).write_text(hashlib.sha256(text.encode()).hexdigest())


def read_rendered(folder: Path) -> str:
    try:
        return (folder / RENDERED).read_text()
    except OSError:
        return ""


def write_cluster(folder: Path, objects: dict[str, Any]) -> None:
    """The run's Jobs, pods and events (`{"jobs": [...], "pods": [...], "events": [...]}`)."""
    data = gzip.compress(json.dumps(objects).encode(), compresslevel=5, mtime=0)
    _replace(folder / CLUSTER, data)


def read_cluster(folder: Path) -> dict[str, Any]:
    try:
        return json.loads(gzip.decompress((folder / CLUSTER).read_bytes()))
    except (OSError, ValueError, EOFError):
        return {"jobs": [], "pods": [], "events": []}


def add_states(folder: Path, changes: Iterable[tuple[str, str, str]]) -> None:
    """Pods' state changes, each (time, pod, state), after those already kept."""
    text = "".join(json.dumps({"time": t, "pod": p, "state": s}) + "\n" for t, p, s in changes)
    with (folder / STATES).open("a") as kept:
        kept.write(text)


def read_states(folder: Path) -> list[dict[str, str]]:
    try:
        text = (folder / STATES).read_text()
    except OSError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


def log_path(folder: Path, pod: str, container: str) -> Path:
    return folder / LOGS / f"{pod}.{container}.log.gz"


def write_log(folder: Path, pod: str, container: str, source: Path) -> None:
    """A container's log file, kept whole up to 2 x LOG_PART bytes, else its head and tail
    (whole lines) with a line between that says how much was cut."""
    size = source.stat().st_size
    with source.open("rb") as log:
        if size <= 2 * LOG_PART:
            data = log.read()
        else:
            head = log.read(LOG_PART)
            log.seek(size - LOG_PART)
            data = _cut(head[: head.rfind(b"\n") + 1], log.read(), size)
    (folder / LOGS).mkdir(exist_ok=True)
    _replace(log_path(folder, pod, container), gzip.compress(data, compresslevel=6, mtime=0))


def _cut(head: bytes, tail: bytes, size: int) -> bytes:
    """A log's first lines and last lines, and between them, at the time of the last line
    kept before, a line saying how many bytes were cut."""
    tail = tail[tail.find(b"\n") + 1 :]
    when = head.split(b" ", 1)[0].decode(errors="replace") if head else ""
    cut = size - len(head) - len(tail)
    note = f"{when} [aichor-iac: {cut} bytes cut here; the first and last {LOG_PART} kept]\n"
    return head + note.encode() + tail


def read_log(folder: Path, pod: str, container: str) -> list[str]:
    """A kept container log's lines, each `<time> <text>`; none if it was not kept."""
    try:
        data = gzip.decompress(log_path(folder, pod, container).read_bytes())
    except (OSError, EOFError):
        return []
    return data.decode(errors="replace").splitlines()


def latest(name: str, path: str = "") -> tuple[Path, Record] | None:
    """The newest record of the experiment or sweep `name` (of the file at `path`, if given),
    or of the run whose id it is, with its run's folder."""
    for folder, summary in every_summary():
        if summary.id == name or (summary.name == name and (not path or summary.path == path)):
            record = next((r for r in read_records(folder) if r.name == summary.name), None)
            return (folder, record) if record else None
    return None
