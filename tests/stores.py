"""Real stores on 127.0.0.1 for the tests (issue 67): MLflow's tracking server on SQLite,
serving its runs' artifacts, and moto's S3 server. Each is a process of its own, started on a
free port and waited for (its health answered), stopped at the end."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BIN = Path(sys.executable).parent
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Server:
    url: str
    argv: list[str]
    log: Path
    health: str = "/"
    env: dict[str, str] | None = None
    process: subprocess.Popen | None = None

    def start(self) -> Server:
        with self.log.open("a") as log:
            environ = {**os.environ, **(self.env or {})}
            self.process = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, env=environ
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.argv[0]} ended: {self.log.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(self.url + self.health, timeout=2)
                return self
            except urllib.error.HTTPError:  # (it answered: a refusal is an answer)
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{self.argv[0]} did not answer: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def mlflow_server(folder: Path) -> Server:
    """`mlflow server` on SQLite, its artifacts served (`--serve-artifacts`, the default)."""
    port = free_port()
    argv = [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--backend-store-uri", f"sqlite:///{folder}/mlflow.db"]
    argv += ["--artifacts-destination", str(folder / "artifacts"), "--workers", "1"]
    # (without its job runner and its queues' nine processes: the runs' API is all it serves)
    quiet = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    return Server(f"http://127.0.0.1:{port}", argv, folder / "mlflow.log", "/health", quiet)


def s3_server(folder: Path) -> Server:
    port = free_port()
    argv = [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    return Server(f"http://127.0.0.1:{port}", argv, folder / "moto.log")


@contextlib.contextmanager
def running(server: Server) -> Iterator[Server]:
    try:
        yield server.start()
    finally:
        server.stop()


def s3_client(url: str):  # (boto3 comes with moto)
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        **{
            "aws_access_key_id": KEYS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": KEYS["AWS_SECRET_ACCESS_KEY"],
        },
    )


# Azurite's well-known development account (its documentation's, public)
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
AZURITE = BIN.parent / "azurite" / "node_modules" / ".bin" / "azurite-blob"  # (make test's)


def azurite_server(folder: Path) -> Server:
    """Azurite's Blob service (Microsoft's emulator, from npm), which checks Shared Key."""
    port = free_port()
    argv = [str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port)]
    argv += ["--location", str(folder), "--silent", "--skipApiVersionCheck"]
    return Server(f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}", argv, folder / "azurite.log")


def blob_client(endpoint: str):
    from azure.storage.blob import BlobServiceClient

    key = {"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY}
    return BlobServiceClient(endpoint, credential=key)
