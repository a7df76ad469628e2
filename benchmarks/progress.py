"""The progress receiver under load (issue 52): 1,000 pods posting a report every 5 seconds, as
kubeflow SDK's and transformers' clients do (kept TLS connections), against one receiver
(`aichor_iac/pods/receiver.py`, run as a cluster runs it: `python3 receiver.py`) pinned to one
core, the clients on another. Prints the reports answered per second, their latency, and the
receiver's memory; then the most it answers per second on its core (50 clients posting back
to back). Asserts nothing (machines are shared and noisy).

    .venv/bin/python benchmarks/progress.py [PODS] [SECONDS]
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aichor_iac.k8s import progress
from aichor_iac.local import reports
from aichor_iac.pods import receiver

PODS = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 30
INTERVAL = 5.0  # the SDK's throttle: a report every 5 s at most
PATH = progress.status_path("team", "bench")


def request(token: str, pod: int) -> bytes:
    body = json.dumps(
        {
            "trainerStatus": {
                "progressPercentage": pod % 101,
                "estimatedRemainingSeconds": 600,
                "metrics": [{"name": "loss", "value": "0.25"}, {"name": "lr", "value": "1e-4"}],
                "lastUpdatedTime": "2026-11-28T15:00:00+00:00",
            }
        }
    ).encode()
    head = (
        f"POST {PATH} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()
    status = await reader.readline()
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)
    if b" 200 " not in status:
        raise RuntimeError(status.decode())


async def pod(port: int, context: ssl.SSLContext, token: str, n: int, until: float, out: list):
    """One pod's client: a kept connection, a report every INTERVAL (started at a random
    moment of the first one), each answer's latency appended to `out`."""
    await asyncio.sleep(INTERVAL * n / PODS)
    reader, writer = await asyncio.open_connection("localhost", port, ssl=context)
    data = request(token, n)
    while time.monotonic() < until:
        start = time.monotonic()
        await post(reader, writer, data)
        out.append(time.monotonic() - start)
        await asyncio.sleep(max(0.0, INTERVAL - (time.monotonic() - start)))
    writer.close()


async def back_to_back(port: int, context: ssl.SSLContext, token: str, until: float) -> int:
    done = 0

    async def client(n: int) -> None:
        nonlocal done
        reader, writer = await asyncio.open_connection("localhost", port, ssl=context)
        data = request(token, n)
        while time.monotonic() < until:
            await post(reader, writer, data)
            done += 1
        writer.close()

    await asyncio.gather(*(client(n) for n in range(50)))
    return done


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    folder = Path(tempfile.mkdtemp())
    made = reports.credentials(folder, ["localhost"])
    env = {
        **os.environ,
        "AICHOR_PROGRESS_PORT": "0",
        "AICHOR_PROGRESS_CERT": str(made.cert),
        "AICHOR_PROGRESS_KEY": str(made.key),
        "AICHOR_PROGRESS_TOKEN": str(made.token),
        "AICHOR_PROGRESS_PATH": PATH,
    }
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") and os.cpu_count() > 1 else []
    server = subprocess.Popen(
        [*pin, sys.executable, "-u", receiver.__file__],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    if pin:
        os.sched_setaffinity(0, {1})  # (the clients: the other core)
    try:
        port = int(server.stdout.readline().rsplit(" ", 1)[1])
        threading_drain(server)
        context = ssl.create_default_context(cafile=str(made.ca))
        token = made.token.read_text()
        latencies: list[float] = []
        until = time.monotonic() + SECONDS

        async def everyone() -> None:
            await asyncio.gather(
                *(pod(port, context, token, n, until, latencies) for n in range(PODS))
            )

        started = time.monotonic()
        asyncio.run(everyone())
        spent = time.monotonic() - started
        memory = rss_mb(server.pid)
        latencies.sort()
        print(f"{PODS} pods, a report every {INTERVAL:.0f} s each, for {SECONDS:.0f} s:")
        print(f"  {len(latencies) / spent:7.1f} reports answered per second")
        print(
            f"  latency p50 {1000 * statistics.median(latencies):.1f} ms, "
            f"p99 {1000 * latencies[int(len(latencies) * 0.99)]:.1f} ms"
        )
        print(f"  receiver memory (RSS): {memory:.0f} MB")
        burst = asyncio.run(back_to_back(port, context, token, time.monotonic() + 10))
        print(f"  most on one core: {burst / 10:.0f} reports per second (50 clients back to back)")
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


def threading_drain(process: subprocess.Popen) -> None:
    """The receiver's output read as it comes (a line per report), so its pipe never fills."""
    import threading

    threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
