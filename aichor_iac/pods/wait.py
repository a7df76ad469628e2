"""The wait for peers (`k8s/shell.py`), before a replica's command. argv: the start time, the
deadline, this replica's host name, then `host:port:replicas` per target (no port: until the
host resolves; replicas N: the host holds `$i`, for each of 0..N-1). A host is looked up with
back-off (0.1 s growing to 2 s: no DNS storm from a thousand replicas), then its address is
tried every 0.1 s growing to 0.25 s (a refused connection costs nothing; the dependent's command
starts within half a second of its peer accepting), looked up anew each time (the resolver
caches it; a restarted pod has a new address)."""

import socket
import sys
import time

start, deadline, me = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]


def out(text, error=False):
    print("aichor: " + text, file=sys.stderr if error else sys.stdout, flush=True)


def ready(host, port):
    try:
        address = socket.getaddrinfo(host, port or None, type=socket.SOCK_STREAM)[0][4]
    except OSError:
        return None
    if not port:
        return True
    try:
        socket.create_connection(address[:2], 3).close()
        return True
    except OSError:
        return False


for spec in sys.argv[4:]:
    pattern, port, replicas = spec.rsplit(":", 2)
    hosts = [pattern.replace("$i", str(i)) for i in range(int(replicas))] if replicas else [pattern]
    for host in hosts:
        what = host + (":" + port + " to accept connections" if port else " to resolve")
        if host.startswith(me + "."):
            out(host + " is this replica, not waiting")
            continue
        delay, said = 0.1, 0.0
        while True:
            state = ready(host, port)
            if state:
                break
            elapsed = int(time.time()) - start
            if elapsed >= deadline:
                out(f"gave up after {elapsed}s waiting for {what}", error=True)
                sys.exit(1)
            if time.time() - said >= 10:
                out(f"waiting for {what} ({elapsed}s of {deadline}s)")
                said = time.time()
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25 if state is False else 2.0)
        out(host + (":" + port + " accepts connections" if port else " resolves"))
