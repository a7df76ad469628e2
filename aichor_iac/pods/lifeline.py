"""The lifeline: how followers learn within a second or two that the entry point has ended.

The entry point's main process (`entry`) runs the user's command as a child and listens on its port
(aichor_iac.pods.LIFELINE_PORT, an argument); every follower's main process (`follow`) keeps a
connection to it. The entry says `ok` every second, and `end <status>` once the command has ended
for good (it succeeded, or it failed and its Job will not start it again); a follower then stops
its own command and succeeds (after END_GRACE seconds in which the command may end by itself, as a
rank finishing its last step after rank 0 does). A connection that closes without `end` (the
entry's pod killed) is redialled: when the entry's Job cannot restart it, ten seconds of refused
redials mean it is gone; when it can (`backoffLimit > 0`), only DNS can tell (its pod gone, not
replaced), as before. A slow entry point is never taken for a gone one: the entry answers whatever
its command does, and only a refused or unreachable redial counts. Without a lifeline (an image
without python3, or before the entry point listens), DNS is the fallback: the entry point's host
looked up every AICHOR_FOLLOW_INTERVAL seconds, gone after AICHOR_FOLLOW_MISSES "no such host"
answers.

Both roles run with the image's python3 (`k8s/shell.py` falls back to POSIX shell programs
without it) and run the command `/bin/sh -c "$1"` in its own session, so a stop reaches all of
its processes. On TERM (the pod deleted) they stop the command, give it AICHOR_STOP_GRACE
seconds (30), and exit: a follower with 0, an entry point with the command's status, telling
its followers `failed` (a deleted pod may be replaced: DNS decides).

argv: the command, then `entry`, whether its Job may start it again after a failure (1/0), how
many followers (by host name) to tell of its end before it ends (0: none; for followers that
count the entry gone only once they have seen it: it stays at most one follow interval + 2 s),
the port; or `follow`, the entry point's host, the port, whether the entry point resolved
before the command started (1/0: otherwise only a host once seen can be gone), whether its Job
may restart it (1/0).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time

HEARTBEAT = 1  # seconds between the entry's `ok`s
SILENCE = 10  # no heartbeat for this long: the connection is presumed dead, redial
LOST = 10  # refused redials for this long: an entry that cannot restart has gone
END_GRACE = 1  # a follower's command may end by itself this long after the entry's


def say(text):
    print("aichor: " + text, flush=True)


def background(target, *args):
    # TERM and INT blocked in the thread (it inherits the mask of the thread starting it): the
    # kernel gives them to the main thread, whose handler runs even while it waits for the child.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGTERM, signal.SIGINT))
    try:
        threading.Thread(target=target, args=args, daemon=True).start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


class Command:
    """The user's command, a child in its own session; stopped with TERM, then KILL after the
    grace period; its exit status as a shell gives it."""

    def __init__(self, line):
        self.child = subprocess.Popen(["/bin/sh", "-c", line], start_new_session=True)
        self.grace = int(os.environ.get("AICHOR_STOP_GRACE", "30"))

    def stop(self, grace=None):
        for sig, wait in (
            (signal.SIGTERM, self.grace if grace is None else grace),
            (signal.SIGKILL, None),
        ):
            with contextlib.suppress(OSError):
                os.killpg(self.child.pid, sig)
            try:
                return self.child.wait(wait)
            except subprocess.TimeoutExpired:
                pass
        return self.child.wait()

    def status(self):
        code = self.child.wait()
        return 128 - code if code < 0 else code


class Entry:
    """The entry point: its command, and the followers connected to it."""

    def __init__(self, command, restarts, linger, port):
        self.command, self.restarts, self.linger, self.port = command, restarts, linger, port
        self.lock = threading.Lock()
        self.clients = []  # (the followers' connections)
        self.names = {}  # connection -> the follower's host name (its `hello`)
        self.told = set()  # the connections told of the end
        self.final = []  # the end message, once the command has ended

    def send(self, message, to=None):
        with self.lock:
            for conn in list(self.clients if to is None else [to]):
                try:
                    conn.sendall(message.encode())
                    if message.startswith("end"):
                        self.told.add(conn)
                except OSError:
                    if conn in self.clients:
                        self.clients.remove(conn)

    def hello(self, conn):
        # A follower names itself first (`hello HOST`): a lingering entry counts the hosts told.
        data = b""
        try:
            while b"\n" not in data and len(data) < 256:
                chunk = conn.recv(64)
                if not chunk:
                    return
                data += chunk
        except OSError:
            return
        if data.startswith(b"hello "):
            with self.lock:
                self.names[conn] = data[6:].split(b"\n")[0]

    def all_told(self):
        with self.lock:
            return len({self.names[c] for c in self.told if c in self.names}) >= self.linger

    def listen(self):
        try:
            if socket.has_dualstack_ipv6():
                server = socket.create_server(
                    ("", self.port), family=socket.AF_INET6, dualstack_ipv6=True
                )
            else:
                server = socket.create_server(("", self.port))
        except OSError as error:
            say(f"no lifeline on port {self.port} ({error}): followers rely on DNS")
            return
        while True:
            conn, _ = server.accept()
            with self.lock:
                self.clients.append(conn)
            if self.final:
                self.send(self.final[0], conn)
            background(self.hello, conn)

    def beat(self):
        while not self.final:
            self.send("ok\n")
            time.sleep(HEARTBEAT)

    def run(self):
        background(self.listen)
        background(self.beat)
        stopped = []

        def on_term(signum, frame):
            stopped.append(signum)
            background(self.command.stop)

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
        code = self.command.status()
        # A pod deleted (TERM) may be replaced (a drained node): only DNS can tell, as after a
        # failure its Job will retry.
        ended = (code == 0 or not self.restarts) and not stopped
        self.final.append(f"end {code}\n" if ended else "failed\n")
        self.send(self.final[0])
        if not stopped and self.linger:
            until = time.time() + float(os.environ.get("AICHOR_FOLLOW_INTERVAL", "10")) + 2
            while time.time() < until and not self.all_told():
                time.sleep(0.1)
        return code


class Follower:
    """A follower: its command, stopped once the entry point has ended for good."""

    def __init__(self, command, host, port, seen, restarts):
        self.command, self.host, self.port = command, host, port
        self.seen, self.restarts = seen, restarts
        self.interval = float(os.environ.get("AICHOR_FOLLOW_INTERVAL", "10"))
        self.misses = int(os.environ.get("AICHOR_FOLLOW_MISSES", "3"))
        self.me = os.environ.get("HOSTNAME") or socket.gethostname()
        self.gone = threading.Event()

    def resolves(self):
        try:
            socket.getaddrinfo(self.host, None)
            return True
        except socket.gaierror as error:
            return False if error.errno == socket.EAI_NONAME else None
        except OSError:
            return None

    def linked(self, conn):
        """What the entry says on one connection: `end` (it has ended), `failed` (it may be
        started again: DNS decides) or nothing (the connection closed or went silent)."""
        with contextlib.suppress(OSError):
            conn.sendall(f"hello {self.me}\n".encode())
        conn.settimeout(SILENCE)
        message, said = b"", ""
        try:
            while True:
                data = conn.recv(64)
                if not data:
                    break
                message = (message + data)[-64:]
                if b"end" in message:
                    return "end"
                if b"failed" in message:
                    said = "failed"
        except OSError:
            pass
        finally:
            conn.close()
        return said

    def lifeline(self):
        """Returns once the entry has ended for good: what the lifeline says, else DNS."""
        linked, refused_since, misses, looked, delay = False, None, 0, 0.0, 0.1
        while True:
            try:
                conn = socket.create_connection((self.host, self.port), 2)
            except OSError:
                conn = None
            if conn is not None:
                self.seen, linked, refused_since, delay = True, True, None, 0.1
                said = self.linked(conn)
                if said == "end":
                    return "it has ended"
                if said == "failed":
                    linked = False  # it may be started again: DNS decides
            elif linked and not self.restarts:
                refused_since = refused_since or time.time()
                if time.time() - refused_since >= LOST:
                    return "its lifeline is gone"
            if time.time() - looked >= self.interval:
                looked = time.time()
                answer = self.resolves()
                if answer:
                    self.seen, misses = True, 0
                elif answer is False and self.seen:
                    misses += 1
                    if misses >= self.misses:
                        return "its host has left DNS"
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0 if linked else 2.0)

    def watch(self):
        why = self.lifeline()
        try:  # a command about to end by itself (its last step after the entry's) may
            self.command.child.wait(END_GRACE)
        except subprocess.TimeoutExpired:
            say(f"{self.host} ({why}); stopping this replica")
        self.gone.set()
        self.command.stop()

    def run(self):
        def on_term(signum, frame):
            self.gone.set()
            background(self.command.stop)

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
        if not self.host.startswith(self.me + "."):  # (rank 0 of a group the entry is in)
            background(self.watch)
        code = self.command.status()
        return 0 if self.gone.is_set() else code


def main(argv):
    command, role, *rest = argv
    if role == "entry":
        restarts, linger, port = rest[0] == "1", int(rest[1]), int(rest[2])
        return Entry(Command(command), restarts, linger, port).run()
    host, port, seen, restarts = rest[0], int(rest[1]), rest[2] == "1", rest[3] == "1"
    return Follower(Command(command), host, port, seen, restarts).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
