"""The TensorBoard log shipper, each replica's native sidecar (`k8s/tensorboard.py`): every few
seconds, and a last time when the pod stops (TERM), it sends the bytes added to each file under
the log directory to the receiver. argv: log directory, receiver URL, interval, seconds allowed
for the last round. The TERM handler comes first: a container's first process ignores a signal
it does not handle, and a main container that ends at once sends TERM while urllib is still
importing."""

# ruff: noqa: E402  (the TERM handler is set before the other imports: see above)
from __future__ import annotations

import signal

stopping: list[int] = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

root, url, interval, final = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
sent: dict[str, int] = {}
warned: set[str] = set()
print(f"aichor: shipping TensorBoard logs from {root} to {url}", flush=True)


def ship():
    done = True
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, root)
            try:
                size = os.path.getsize(path)
            except OSError:
                continue
            while sent.get(relative, 0) < size:
                offset = sent.get(relative, 0)
                with open(path, "rb") as log:
                    log.seek(offset)
                    data = log.read(min(size - offset, 8 << 20))
                request = urllib.request.Request(
                    f"{url}/{urllib.parse.quote(relative)}",
                    data=data,
                    method="PUT",
                    headers={"X-Offset": str(offset)},
                )
                try:
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        sent[relative] = int(answer.read())
                except urllib.error.HTTPError as error:
                    if error.code != 409:
                        print(f"aichor: TensorBoard refused {relative}: {error}", flush=True)
                        done = False
                        break
                    sent[relative] = int(error.read())
                except OSError as error:
                    if url not in warned:
                        print(f"aichor: TensorBoard at {url} not reachable: {error}", flush=True)
                        warned.add(url)
                    return False
    return done


while not stopping:
    ship()
    for _ in range(int(interval * 10)):
        if stopping:
            break
        time.sleep(0.1)
deadline = time.time() + final
while not ship():
    if time.time() >= deadline:
        sys.exit("aichor: gave up shipping the last TensorBoard logs")
    time.sleep(1)
print(f"aichor: shipped {sum(sent.values())} bytes of logs in {len(sent)} files", flush=True)
