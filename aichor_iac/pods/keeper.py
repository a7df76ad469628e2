"""The keeper: what a pod knows of its run, written from inside the pod to the stack's stores
(issue 67; docs/stores.md): `aichor:history` (a folder the pods mount, or an S3-compatible
bucket) and `aichor:mlflow` (a tracking server, through its REST API).

A native sidecar of each of the experiment's pods runs it (`keeping.py`). It reads files of the
pod's shared folder AICHOR_KEEP_DIR, written as things happen by the pod's other containers:
`output.log` (every line of the main container, stdout and stderr, as its capture copies them:
`keeping.CAPTURE`), `exit` (the main container's status, a line each time it ends) and, on the
entry pod, `reports.jsonl` (each progress report, from the receiver). Every INTERVAL seconds,
and a last time when the pod ends (TERM), what is new goes to each store:

- the bucket or folder: `<prefix>/<namespace>/<experiment>/pods/<pod>-<id>/` holds `pod.json`
  (who, when, the exits, what was dropped), `log/<first byte>.txt` and
  `reports/<first report>.jsonl` chunks (a chunk sent again is the same object: harmless);
- MLflow, from the entry pod: the experiment as a run (its trial's parameters, tags for the
  stack, image, framework and trial, each report's metrics and each printed objective metric
  by step, its log as an artifact, its end), a sweep's trials nested under one parent run.

Nothing waits for a store: a store that fails is tried again next round, each its own cursor
(kept in the shared folder: a keeper started again sends nothing twice); at the pod's end, a
store that fails only then is tried for FINAL_SECONDS, one already down once. What is not
yet sent stays in the shared folder; past PENDING bytes of log behind, the oldest are skipped and
`pod.json` says how many (`dropped`).

Standard library only, for Python 3.8 and later: it runs in the experiment's image (its source
given to `python3 -c`), as the receiver does. Settings come from the environment:
AICHOR_KEEP_DIR, AICHOR_KEEP (JSON: namespace, experiment, pod, entry, framework, image, stack,
mlflowExperiment, run key, trial, metrics), AICHOR_HISTORY (the store's URL), AICHOR_MLFLOW
(the tracking URI); the bucket's as the AWS SDKs read them (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION or AWS_DEFAULT_REGION,
AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL); MLflow's as its client reads them
(MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import os
import re
import signal
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

INTERVAL = 2.0
FINAL_SECONDS = 20.0  # the last round, within the pod's 30 s termination grace period
TIMEOUT = 10.0  # one request
SETTLE = 2.0  # a run stamped is made within this (MLflow: one sweep's parent, one trial's)
PENDING = 64 << 20  # log bytes behind a store, past which the oldest are skipped
CHUNK = 4 << 20  # log bytes sent to a store in one round
ARTIFACT_SECONDS = 30.0  # the log as an MLflow artifact, again at most this often
ARTIFACT_MAX = 16 << 20  # its last bytes, at most
BATCH = 1000  # MLflow's log-batch: at most 1,000 metrics
LOG, REPORTS, EXITS, CURSORS = "output.log", "reports.jsonl", "exit", ".keeper.json"


def say(text: str) -> None:
    print(f"aichor: keeper: {text}", file=sys.stderr, flush=True)


class Unavailable(Exception):
    """A store that could not be written this round (it is tried again)."""


def request(method: str, url: str, body: bytes = b"", headers=None, timeout=TIMEOUT) -> bytes:
    """An HTTP request's answer; Unavailable for a refusal or no answer."""
    call = urllib.request.Request(url, data=body or None, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(call, timeout=timeout) as answer:
            return answer.read()
    except urllib.error.HTTPError as error:
        text = error.read()[:300].decode(errors="replace")
        raise Unavailable(f"{method} {url.split('?')[0]}: {error.code} {text}") from None
    except (OSError, ValueError) as error:
        raise Unavailable(f"{method} {url.split('?')[0]}: {error}") from None


def s3_headers(method: str, url: str, body: bytes, environ, now=None) -> dict:
    """AWS Signature Version 4 of an S3 request (path-style URL, no query), as the SDKs sign
    one; no headers without keys (a bucket that takes unsigned writes)."""
    key, secret = environ.get("AWS_ACCESS_KEY_ID"), environ.get("AWS_SECRET_ACCESS_KEY")
    digest = hashlib.sha256(body).hexdigest()
    if not key or not secret:
        return {}
    now = now or datetime.datetime.now(datetime.timezone.utc)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    parts = urllib.parse.urlsplit(url)
    headers = {"host": parts.netloc, "x-amz-content-sha256": digest, "x-amz-date": stamp}
    if environ.get("AWS_SESSION_TOKEN"):
        headers["x-amz-security-token"] = environ["AWS_SESSION_TOKEN"]
    names = sorted(headers)
    lines = [method, parts.path or "/", parts.query, *(f"{n}:{headers[n]}" for n in names)]
    canonical = "\n".join([*lines, "", ";".join(names), digest])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    signing = ("AWS4" + secret).encode()
    for part in (day, region, "s3", "aws4_request"):
        signing = hmac.new(signing, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(signing, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={key}/{scope}, SignedHeaders={';'.join(names)}, "
        f"Signature={signature}"
    )
    del headers["host"]  # (urllib sends it)
    return headers


class Folder:
    """A store that is a folder (a volume the pod mounts): files replaced whole."""

    def __init__(self, root: str) -> None:
        self.root = root

    def put(self, key: str, body: bytes) -> None:
        path = os.path.join(self.root, key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".part", "wb") as file:
                file.write(body)
            os.replace(path + ".part", path)
        except OSError as error:
            raise Unavailable(f"{path}: {error}") from None


class Bucket:
    """An S3-compatible bucket (AWS, MinIO, Ceph, GCS's XML API with HMAC keys): PUT, signed."""

    def __init__(self, bucket: str, prefix: str, environ) -> None:
        region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
        self.base = (endpoint or f"https://s3.{region}.amazonaws.com").rstrip("/")
        self.bucket, self.prefix, self.environ = bucket, prefix.strip("/"), environ

    def put(self, key: str, body: bytes) -> None:
        path = "/".join(p for p in (self.prefix, key) if p)
        url = f"{self.base}/{self.bucket}/{urllib.parse.quote(path, safe='/-_.~')}"
        headers = s3_headers("PUT", url, body, self.environ)
        # (a type of its own: urllib's default, a form's, has some servers parse the body)
        request("PUT", url, body, {**headers, "Content-Type": "application/octet-stream"})


class Container:
    """An Azure Blob Storage container: PUT of block blobs, signed with the account's key
    (Shared Key); AZURE_STORAGE_BLOB_ENDPOINT for another endpoint (Azurite)."""

    VERSION = "2021-08-06"

    def __init__(self, container: str, prefix: str, environ) -> None:
        self.account = environ.get("AZURE_STORAGE_ACCOUNT", "")
        self.key = environ.get("AZURE_STORAGE_KEY", "")
        endpoint = environ.get("AZURE_STORAGE_BLOB_ENDPOINT")
        self.base = (endpoint or f"https://{self.account}.blob.core.windows.net").rstrip("/")
        self.container, self.prefix = container, prefix.strip("/")

    def put(self, key: str, body: bytes) -> None:
        path = "/".join(p for p in (self.prefix, key) if p)
        url = f"{self.base}/{self.container}/{urllib.parse.quote(path, safe='/-_.~')}"
        request("PUT", url, body, azure_headers(url, body, self.account, self.key))


def azure_headers(url: str, body: bytes, account: str, key: str, now=None) -> dict:
    """A block blob's PUT headers, signed with Shared Key (Blob service, version 2015-02-21
    and later: an empty Content-Length for no body)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    headers = {
        "x-ms-blob-type": "BlockBlob",
        "x-ms-date": now.strftime("%a, %d %b %Y %H:%M:%S GMT"),
        "x-ms-version": Container.VERSION,
        "Content-Type": "application/octet-stream",
    }
    if not key:
        return headers
    length = str(len(body)) if body else ""
    canonical = "".join(
        f"{k}:{headers[k]}\n" for k in sorted(h for h in headers if h.startswith("x-ms-"))
    )
    resource = f"/{account}{urllib.parse.urlsplit(url).path}"
    fields = ["PUT", "", "", length, "", headers["Content-Type"], "", "", "", "", "", ""]
    to_sign = "\n".join(fields) + "\n" + canonical + resource
    digest = hmac.new(base64.b64decode(key), to_sign.encode(), hashlib.sha256).digest()
    headers["Authorization"] = f"SharedKey {account}:{base64.b64encode(digest).decode()}"
    return headers


def store(url: str, environ):
    """The store a URL names: a path or file:// (a folder), s3://bucket/prefix, or
    az://container/prefix."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "s3":
        return Bucket(parts.netloc, parts.path, environ)
    if parts.scheme == "az":
        return Container(parts.netloc, parts.path, environ)
    return Folder(urllib.parse.unquote(parts.path) if parts.scheme == "file" else url)


class MLflow:
    """A tracking server's REST API (`/api/2.0/mlflow/...`), with its client's credentials."""

    def __init__(self, uri: str, environ) -> None:
        self.uri, self.headers = uri.rstrip("/"), {"Content-Type": "application/json"}
        if environ.get("MLFLOW_TRACKING_TOKEN"):
            self.headers["Authorization"] = "Bearer " + environ["MLFLOW_TRACKING_TOKEN"]
        elif environ.get("MLFLOW_TRACKING_USERNAME"):
            user = environ["MLFLOW_TRACKING_USERNAME"]
            pair = f"{user}:{environ.get('MLFLOW_TRACKING_PASSWORD', '')}"
            self.headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()

    def call(self, method: str, path: str, document=None, timeout=TIMEOUT) -> dict:
        url = f"{self.uri}/api/2.0/mlflow/{path}"
        body = json.dumps(document).encode() if document is not None else b""
        return json.loads(request(method, url, body, self.headers, timeout) or b"{}")

    def experiment(self, name: str) -> str:
        """The id of the experiment `name`, made if there is none (by whoever comes first)."""
        query = urllib.parse.urlencode({"experiment_name": name})
        for _ in range(2):
            try:
                return self.call("GET", f"experiments/get-by-name?{query}")["experiment"][
                    "experiment_id"
                ]
            except Unavailable as error:
                if "RESOURCE_DOES_NOT_EXIST" not in str(error):
                    raise
            try:
                return self.call("POST", "experiments/create", {"name": name})["experiment_id"]
            except Unavailable as error:
                if "RESOURCE_ALREADY_EXISTS" not in str(error):
                    raise
        raise Unavailable(f"experiment {name}: neither found nor made")

    def search(self, experiment: str, tags: dict) -> list:
        """The experiment's runs with these tags, the first made first."""
        clauses = [f"tags.`{k}` = '{v}'" for k, v in sorted(tags.items())]
        query = {"experiment_ids": [experiment], "filter": " and ".join(clauses)}
        runs = self.call("POST", "runs/search", {**query, "max_results": 1000}).get("runs", [])
        return sorted(runs, key=lambda r: (int(r["info"]["start_time"]), r["info"]["run_id"]))

    def run(self, experiment: str, name: str, tags: dict, key: dict) -> dict:
        """The run with the tags `key`, made if there is none; when keepers made one at once,
        each keeps the first stamped and the others are deleted. A run is stamped before it
        is made: one stamped first may be made after another keeper has looked, so each
        looks again once the first it saw is SETTLE old, when the runs stamped before it
        have been made."""
        found, made = self.search(experiment, key), None
        if not found:
            document = {
                "experiment_id": experiment,
                "run_name": name,
                "start_time": int(time.time() * 1000),
                "tags": [{"key": k, "value": str(v)} for k, v in sorted({**tags, **key}.items())],
            }
            made = self.call("POST", "runs/create", document)["run"]["info"]
            found = [{"info": made}]
        settled = int(found[0]["info"]["start_time"]) / 1000 + SETTLE - time.time()
        if settled > 0:
            time.sleep(settled)
            found = self.search(experiment, key)
        first = found[0]["info"]
        if made is not None and first["run_id"] != made["run_id"]:
            self.call("POST", "runs/delete", {"run_id": made["run_id"]})
        return first

    def artifact(self, info: dict, path: str, body: bytes, timeout=TIMEOUT) -> bool:
        """A file among the run's artifacts, through the server (`--serve-artifacts`); False
        where the run's artifacts are elsewhere (written by the user's own client)."""
        root = info.get("artifact_uri", "")
        if not root.startswith("mlflow-artifacts:"):
            return False
        where = root[len("mlflow-artifacts:") :].lstrip("/")
        url = f"{self.uri}/api/2.0/mlflow-artifacts/artifacts/{where}/{path}"
        headers = {k: v for k, v in self.headers.items() if k != "Content-Type"}
        request("PUT", url, body, headers, timeout)
        return True


def new_lines(text: bytes, final: bool) -> tuple:
    """The whole lines of `text` (all of it at the end) and how many bytes they take."""
    end = len(text) if final else text.rfind(b"\n") + 1
    return text[:end].decode(errors="replace").splitlines(), end


def printed_metrics(lines: list, metrics) -> list:
    """(name, value) of each objective metric printed in the lines, as Katib's collector reads
    them: each filter's matches (TEXT), or each line a JSON object (JSON); after MARKER, for
    its File collector, the file's lines alone."""
    if not metrics:
        return []
    names, marker, found = set(metrics["names"]), metrics.get("marker") or "", []
    for line in lines:
        if marker:
            if not line.startswith(marker):
                continue
            line = line[len(marker) :]
        if metrics.get("json"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            pairs = sorted(record.items()) if isinstance(record, dict) else []
        else:
            pairs = [
                (m.group(1).strip(), m.group(2).strip())
                for form in metrics["formats"]
                for m in re.finditer(form, line)
            ]
        for name, value in pairs:
            if name in names:
                try:
                    found.append((name, float(value)))
                except (TypeError, ValueError):
                    continue
    return found


def reported_metrics(report: dict) -> list:
    """(name, value, ms) of a progress report's numeric metrics, its progress included."""
    status = report.get("trainerStatus") or {}
    when = status.get("lastUpdatedTime", "")
    try:
        ms = int(datetime.datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        ms = int(time.time() * 1000)
    found = []
    if isinstance(status.get("progressPercentage"), int):
        found.append(("progress_percentage", float(status["progressPercentage"]), ms))
    for metric in status.get("metrics") or []:
        try:
            found.append((metric["name"], float(metric["value"]), ms))
        except (KeyError, TypeError, ValueError):
            continue
    return found


class Shared:
    """The pod's shared folder: what its containers wrote, and the keeper's cursors."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        try:
            with open(os.path.join(folder, CURSORS)) as file:
                self.cursors = json.load(file)
        except (OSError, ValueError):
            self.cursors = {}
        self.cursors.setdefault("id", uuid.uuid4().hex[:8])  # (this pod's, kept if restarted)
        self.cursors.setdefault("started", now())

    def save(self) -> None:
        path = os.path.join(self.folder, CURSORS)
        try:
            with open(path + ".part", "w") as file:
                json.dump(self.cursors, file)
            os.replace(path + ".part", path)
        except OSError as error:
            say(f"its cursors not kept ({error})")

    def read(self, name: str, start: int = 0, most: int = CHUNK) -> bytes:
        try:
            with open(os.path.join(self.folder, name), "rb") as file:
                file.seek(start)
                return file.read(most)
        except OSError:
            return b""

    def size(self, name: str) -> int:
        try:
            return os.path.getsize(os.path.join(self.folder, name))
        except OSError:
            return 0

    def tail(self, name: str, most: int) -> bytes:
        return self.read(name, max(0, self.size(name) - most), most)

    def log_from(self, cursor: dict) -> int:
        """The log's first byte a store still wants: past PENDING behind, the oldest skipped
        (counted in `dropped`)."""
        skip = self.size(LOG) - PENDING - cursor.get("log", 0)
        if skip > 0:
            cursor["log"] = cursor.get("log", 0) + skip
            cursor["dropped"] = cursor.get("dropped", 0) + skip
        return cursor.get("log", 0)

    def reports(self, cursor: dict) -> tuple:
        """The progress reports after the store's cursor (its whole lines, read from the byte
        it reached: a long run's file is never read again), and the byte after them."""
        start = cursor.get("reportsAt", 0)
        lines, used = new_lines(self.read(REPORTS, start), final=False)
        found = []
        for line in lines:
            try:
                found.append(json.loads(line))
            except ValueError:
                found.append({})
        return found, start + used

    def exits(self) -> list:
        return [int(t) for t in self.read(EXITS).decode().split() if t.lstrip("-").isdigit()]


class History:
    """The pod's part of the record, in the bucket or folder of `aichor:history`."""

    def __init__(self, target, shared: Shared, who: dict) -> None:
        self.target, self.shared, self.who = target, shared, who
        pod = f"{who['pod']}-{shared.cursors['id']}"
        self.place = f"{who['namespace']}/{who['experiment']}/pods/{pod}"

    def send(self, cursor: dict, final: bool) -> None:
        shared, start = self.shared, self.shared.log_from(cursor)
        while chunk := shared.read(LOG, start):  # (a round sends CHUNK, the last one all)
            self.target.put(f"{self.place}/log/{start:012d}.txt", chunk)
            start = cursor["log"] = start + len(chunk)
            if not final:
                break
        first = cursor.get("reports", 0)
        reports, after = shared.reports(cursor)
        if reports:
            text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in reports)
            self.target.put(f"{self.place}/reports/{first:08d}.jsonl", text.encode())
            cursor["reports"], cursor["reportsAt"] = first + len(reports), after
        pod = {
            "schema": 1,
            **{k: v for k, v in self.who.items() if k != "metrics"},
            "id": shared.cursors["id"],
            "started": shared.cursors["started"],
            "updated": now(),
            "ended": now() if final else None,
            "exits": shared.exits(),
            "logBytes": cursor.get("log", 0),
            "reports": cursor.get("reports", 0),
            "dropped": cursor.get("dropped", 0),
        }
        self.target.put(f"{self.place}/pod.json", json.dumps(pod, sort_keys=True).encode())


class Tracking:
    """The experiment as an MLflow run (a sweep's trial nested under the sweep's run)."""

    def __init__(self, mlflow: MLflow, shared: Shared, who: dict) -> None:
        self.mlflow, self.shared, self.who = mlflow, shared, who

    def send(self, cursor: dict, final: bool) -> None:
        # (each metric's next step, kept once its points are written: a round that fails
        # sends the same points with the same steps again)
        run, steps = self.run(cursor), dict(cursor.get("steps", {}))
        metrics = []

        def add(name: str, value: float, ms: int) -> None:
            metrics.append(
                {"key": name, "value": value, "timestamp": ms, "step": steps.get(name, 0)}
            )
            steps[name] = steps.get(name, 0) + 1

        first = cursor.get("reports", 0)
        reports, after = self.shared.reports(cursor)
        for report in reports:
            for name, value, ms in reported_metrics(report):
                add(name, value, ms)
        start = self.shared.log_from(cursor)
        lines, used = new_lines(self.shared.read(LOG, start), final)
        for name, value in printed_metrics(lines, self.who.get("metrics")):
            add(name, value, int(time.time() * 1000))
        for i in range(0, len(metrics), BATCH):
            batch = {"run_id": run["run_id"], "metrics": metrics[i : i + BATCH]}
            self.mlflow.call("POST", "runs/log-batch", batch)
        cursor["reports"], cursor["reportsAt"] = first + len(reports), after
        cursor["log"] = start + used
        cursor["steps"] = steps
        self.log(cursor, run, final)
        if final:
            self.end(cursor, run)

    def run(self, cursor: dict) -> dict:
        """The experiment's run (and its sweep's), made or found the first time."""
        if "run" in cursor:
            return cursor["run"]
        who, mlflow = self.who, self.mlflow
        experiment = mlflow.experiment(who.get("mlflowExperiment") or "aichor")
        stack = {"aichor.stack": who.get("stack", ""), "aichor.namespace": who["namespace"]}
        tags = {**stack, "aichor.framework": who.get("framework", "")}
        tags["aichor.image"] = who.get("image", "")
        trial, parent = who.get("trial"), None
        if trial:
            key = {"aichor.sweep": trial["sweep"], "aichor.parent": "true", **stack}
            parent = mlflow.run(experiment, trial["sweep"], {}, key)["run_id"]
            mlflow.call("POST", "runs/update", {"run_id": parent, "status": "RUNNING"})
            tags["mlflow.parentRunId"], tags["aichor.sweep"] = parent, trial["sweep"]
            tags["aichor.trial"] = str(trial["index"])
        key = {"aichor.experiment": who["experiment"], "aichor.run": who.get("key") or "-"}
        info = mlflow.run(experiment, who["experiment"], tags, key)
        values = sorted((trial or {}).get("parameters", {}).items())
        if params := [{"key": k, "value": str(v)[:6000]} for k, v in values]:
            mlflow.call("POST", "runs/log-batch", {"run_id": info["run_id"], "params": params})
        cursor["run"] = {"run_id": info["run_id"], "artifact_uri": info.get("artifact_uri", "")}
        cursor["parent"] = parent
        return cursor["run"]

    def log(self, cursor: dict, run: dict, final: bool) -> None:
        """The pod's log as the run's artifact `logs/<pod>.log` (its last ARTIFACT_MAX bytes),
        again when it grew and ARTIFACT_SECONDS have passed, and at the end."""
        # (the log's size, not its tail's, tells it grew: read only when it is to be sent)
        size = self.shared.size(LOG)
        due = time.time() - cursor.get("artifactTime", 0) >= ARTIFACT_SECONDS
        if size == cursor.get("artifactSize", 0) or not (due or final):
            return
        body, timeout = self.shared.tail(LOG, ARTIFACT_MAX), 5.0 if final else TIMEOUT
        if not self.mlflow.artifact(run, f"logs/{self.who['pod']}.log", body, timeout):
            say("the run's artifacts are not served by its tracking server: its log is not kept")
        cursor["artifactSize"], cursor["artifactTime"] = size, time.time()

    def end(self, cursor: dict, run: dict) -> None:
        """The run's end as the main container's last exit says (none: killed)."""
        exits = self.shared.exits()
        status = "KILLED" if not exits else ("FINISHED" if exits[-1] == 0 else "FAILED")
        end = {"end_time": int(time.time() * 1000)}
        self.mlflow.call("POST", "runs/update", {"run_id": run["run_id"], "status": status, **end})
        if cursor.get("parent"):
            parent = {"run_id": cursor["parent"], "status": "FINISHED", **end}
            self.mlflow.call("POST", "runs/update", parent)


def identity(environ) -> dict:
    """Who the pod is: as rendered, with its name and its Job's uid (the run's key) from the
    downward API; the entry point's first pod alone is the experiment's MLflow run."""
    who = json.loads(environ["AICHOR_KEEP"])
    who["pod"] = environ.get("AICHOR_POD_NAME") or who.get("pod") or os.uname().nodename
    who["key"] = environ.get("AICHOR_KEEP_KEY") or who.get("key") or ""
    who["entry"] = bool(who.get("entry")) and environ.get("JOB_COMPLETION_INDEX", "0") == "0"
    return who


def keepers(shared: Shared, who: dict, environ) -> dict:
    """The stores the stack names, each with what it is sent (MLflow from the entry pod)."""
    found: dict[str, History | Tracking] = {}
    if environ.get("AICHOR_HISTORY"):
        found["history"] = History(store(environ["AICHOR_HISTORY"], environ), shared, who)
    if environ.get("AICHOR_MLFLOW") and who.get("entry"):
        found["mlflow"] = Tracking(MLflow(environ["AICHOR_MLFLOW"], environ), shared, who)
    return found


def send_new(shared: Shared, stores: dict, down: dict, final: bool = False) -> None:
    """What is new, to each store; one that fails holds up no other, and is said once until
    it is written again (`down`: store -> why)."""
    for name, keeper in stores.items():
        try:
            keeper.send(shared.cursors.setdefault(name, {}), final)
            if down.pop(name, None):
                say(f"{name} written again")
        except Exception as error:  # (whatever it is, training goes on: said, tried again)
            if name not in down:
                say(f"{name} not written ({error}): kept here, tried again")
            down[name] = str(error)
        shared.save()


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def main() -> None:
    stopping = []  # (TERM: the pod's end; its main container has ended)
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    environ = os.environ
    shared = Shared(environ["AICHOR_KEEP_DIR"])
    stores = keepers(shared, identity(environ), environ)
    down: dict[str, str] = {}  # store -> why it was not written
    while not stopping:
        send_new(shared, stores, down)
        deadline = time.monotonic() + INTERVAL
        while not stopping and time.monotonic() < deadline:
            time.sleep(0.1)
    # The last round, tried again for FINAL_SECONDS for a store that failed only now (a
    # blip); once, for one already down (the pod's end, and a sweep's next trial, never wait
    # on a store that is out)
    was_down, deadline = set(down), time.monotonic() + FINAL_SECONDS
    while True:
        send_new(shared, stores, down, final=True)
        if not set(down) - was_down or time.monotonic() > deadline - 1:
            break
        time.sleep(1)


if __name__ == "__main__":
    main()
