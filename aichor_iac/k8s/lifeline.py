"""The lifeline: how followers learn within a second or two that the entry point has ended.

The entry point's main process (ENTRY) runs the user's command as a child and listens on
LIFELINE_PORT; every follower's main process (FOLLOW) keeps a connection to it. ENTRY says
`ok` every second, and `end <status>` once the command has ended for good (it succeeded, or
it failed and its Job will not start it again); a follower then stops its own command and
succeeds (after END_GRACE seconds in which the command may end by itself, as a rank finishing
its last step after rank 0 does). A connection that closes without `end` (the entry's pod
killed) is redialled: when the entry's Job cannot restart it, ten seconds of refused redials
mean it is gone; when it can (`backoffLimit > 0`), only DNS can tell (its pod gone, not
replaced), as before. A slow entry point is never taken for a gone one: ENTRY answers
whatever its command does, and only a refused or unreachable redial counts. Without a
lifeline (an image without python3, or before the entry point listens), DNS is the fallback:
the entry point's host looked up every AICHOR_FOLLOW_INTERVAL seconds, gone after
AICHOR_FOLLOW_MISSES "no such host" answers.

Both programs are python3 (every ML image has it; `shell.main_command` falls back to the POSIX
shell programs without it) and run the command `/bin/sh -c "$1"` in its own session, so a
stop reaches all of its processes. On TERM (the pod deleted) they stop the command, give it
AICHOR_STOP_GRACE seconds (30), and exit: a follower with 0, an entry point with the
command's status, telling its followers `failed` (a deleted pod may be replaced: DNS decides).
"""

from __future__ import annotations

LIFELINE_PORT = 29944
HEARTBEAT_SECONDS = 1
SILENCE_SECONDS = 10  # no heartbeat for this long: the connection is presumed dead, redial
LOST_SECONDS = 10  # refused redials for this long: an entry that cannot restart has gone
END_GRACE_SECONDS = 1  # a follower's command may end by itself this long after the entry's

# What both programs share: the timings, running the command in its own session, stopping
# it, its exit status as a shell gives it.
_COMMON = (
    f"""\
import os, signal, socket, subprocess, sys, threading, time
HEARTBEAT, SILENCE, LOST = {HEARTBEAT_SECONDS}, {SILENCE_SECONDS}, {LOST_SECONDS}
END_GRACE = {END_GRACE_SECONDS}
"""
    + """\
GRACE = int(os.environ.get("AICHOR_STOP_GRACE", "30"))
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
child = subprocess.Popen(["/bin/sh", "-c", sys.argv[1]], start_new_session=True)
def stop(grace=GRACE):
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        try:
            os.killpg(child.pid, sig)
        except OSError:
            pass
        try:
            return child.wait(wait)
        except subprocess.TimeoutExpired:
            pass
    return child.wait()
def status():
    code = child.wait()
    return 128 - code if code < 0 else code
"""
)

# argv: the command, whether its Job may start it again after a failure (1/0), how many
# followers (by host name) to tell of its end before it ends (0: none; for followers that count
# the entry gone only once they have seen it: it stays at most one follow interval + 2 s), the
# port.
ENTRY = (
    _COMMON
    + """\
restarts, linger, port = sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
clients, lock, final, names, told = [], threading.Lock(), [], {}, set()
def send(message, to=None):
    with lock:
        for conn in list(clients if to is None else [to]):
            try:
                conn.sendall(message.encode())
                if message.startswith("end"):
                    told.add(conn)
            except OSError:
                clients.remove(conn) if conn in clients else None
def hello(conn):
    # A follower names itself first (`hello HOST`): a lingering entry point counts the hosts told.
    data = b""
    try:
        while b"\\n" not in data and len(data) < 256:
            chunk = conn.recv(64)
            if not chunk:
                return
            data += chunk
    except OSError:
        return
    if data.startswith(b"hello "):
        with lock:
            names[conn] = data[6:].split(b"\\n")[0]
def all_told():
    with lock:
        return len({names[conn] for conn in told if conn in names}) >= linger
def listen():
    try:
        if socket.has_dualstack_ipv6():
            server = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
        else:
            server = socket.create_server(("", port))
    except OSError as error:
        say("no lifeline on port %d (%s): followers rely on DNS" % (port, error))
        return
    while True:
        conn, _ = server.accept()
        with lock:
            clients.append(conn)
        if final:
            send(final[0], conn)
        background(hello, conn)
def beat():
    while not final:
        send("ok\\n")
        time.sleep(HEARTBEAT)
background(listen)
background(beat)
stopped = []
def on_term(signum, frame):
    stopped.append(signum)
    background(stop)
signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)
code = status()
# A pod deleted (TERM) may be replaced (a drained node): only DNS can tell, as after a failure
# its Job will retry.
final.append("end %d\\n" % code if (code == 0 or not restarts) and not stopped else "failed\\n")
send(final[0])
if not stopped and linger:
    until = time.time() + float(os.environ.get("AICHOR_FOLLOW_INTERVAL", "10")) + 2
    while time.time() < until and not all_told():
        time.sleep(0.1)
sys.exit(code)
"""
)

# argv: the command, the entry point's host, the port, whether the entry point resolved before
# the command started (1/0: otherwise only a host once seen can be gone), whether its Job may
# restart it (1/0).
FOLLOW = (
    _COMMON
    + """\
host, port, seen, restarts = sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5] == "1"
INTERVAL = float(os.environ.get("AICHOR_FOLLOW_INTERVAL", "10"))
MISSES = int(os.environ.get("AICHOR_FOLLOW_MISSES", "3"))
gone = threading.Event()
def resolves():
    try:
        socket.getaddrinfo(host, None)
        return True
    except socket.gaierror as error:
        return False if error.errno == socket.EAI_NONAME else None
    except OSError:
        return None
def lifeline():
    # Returns once the entry has ended for good: what the lifeline says, else DNS.
    global seen
    linked, refused_since, misses, looked = False, None, 0, 0.0
    delay = 0.1
    while True:
        try:
            conn = socket.create_connection((host, port), 2)
        except OSError:
            conn = None
        if conn is not None:
            seen, linked, refused_since, delay = True, True, None, 0.1
            try:
                conn.sendall(("hello %s\\n" % me).encode())
            except OSError:
                pass
            conn.settimeout(SILENCE)
            message = b""
            try:
                while True:
                    data = conn.recv(64)
                    if not data:
                        break
                    message = (message + data)[-64:]
                    if b"end" in message:
                        return "it has ended"
                    if b"failed" in message:
                        linked = False  # it may be started again: DNS decides
            except OSError:
                pass
            finally:
                conn.close()
        elif linked and not restarts:
            refused_since = refused_since or time.time()
            if time.time() - refused_since >= LOST:
                return "its lifeline is gone"
        if time.time() - looked >= INTERVAL:
            looked = time.time()
            answer = resolves()
            if answer:
                seen, misses = True, 0
            elif answer is False and seen:
                misses += 1
                if misses >= MISSES:
                    return "its host has left DNS"
        time.sleep(delay)
        delay = min(delay * 1.5, 1.0 if linked else 2.0)
def watch():
    why = lifeline()
    try:  # a command about to end by itself (its last step after the entry's) may
        child.wait(END_GRACE)
    except subprocess.TimeoutExpired:
        say("%s (%s); stopping this replica" % (host, why))
    gone.set()
    stop()
def on_term(signum, frame):
    gone.set()
    background(stop)
signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)
me = os.environ.get("HOSTNAME") or socket.gethostname()
if not host.startswith(me + "."):  # (rank 0 of a group the entry point belongs to)
    background(watch)
code = status()
sys.exit(0 if gone.is_set() else code)
"""
)
