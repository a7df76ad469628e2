"""The group restart, as the program every replica's main process runs (`python3 -S`, the
standard library only; `shell.main_command` embeds this file's source): the user's command as a
child, stopped and started again in place with every other replica's when one fails. The entry
point's first replica leads: members report their command's failures (exit code, when), their
pod's deletion (TERM: a disruption) or, by a link closing without a word, their container's
death; the lead stops every command, judges the earliest failure by the rules and the budget,
then starts the next attempt (AICHOR_RESTART_ATTEMPT) or fails every replica (GAVE_UP, the
reason in the termination message). docs/failures.md tells the whole story."""

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

HEARTBEAT, SILENCE = 1, 10  # seconds between heartbeats; a link silent this long is dead
SETTLE = 0.5  # failures this close to the first share its cause
END_GRACE = 1  # a member's command may end by itself this long after the lead's
JOIN = 1.0  # a new member waits this long for its lead before it starts on its own
FAREWELL = 5  # the lead that fails the experiment waits this long for its members to end
GAVE_UP, TERMINATED = 211, 143  # exit statuses: the experiment failed; the pod is deleted
ATTEMPT = "AICHOR_RESTART_ATTEMPT"
STATE = ("attempt", "counted", "reason")  # what every replica keeps of the group


def say(text):
    print("aichor: " + text, flush=True)


class Command:
    """The user's command, a child in its own session (a stop reaches all its processes),
    started anew for each attempt; its end is an event (`exited`, the process, its status)."""

    def __init__(self, line, names, events):
        self.line, self.names, self.events = line, names, events
        self.proc, self.halted = None, set()

    def start(self, attempt):
        env = dict(os.environ, **{name: str(attempt) for name in self.names})
        proc = subprocess.Popen(["/bin/sh", "-c", self.line], start_new_session=True, env=env)
        self.proc = proc
        threading.Thread(target=self._watch, args=(proc,), daemon=True).start()

    def _watch(self, proc):
        code = proc.wait()
        self.events.put(("exited", proc, (128 - code if code < 0 else code, time.time())))

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def halt(self):
        """TERM to every process of the command (daemons it left too), KILL after the grace."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            self.halted.add(proc)
        grace = int(os.environ.get("AICHOR_STOP_GRACE", "30"))
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, sig)
            end = time.monotonic() + wait
            while (alive := proc.poll() is None or members(proc.pid)) and time.monotonic() < end:
                time.sleep(0.02)
            if not alive:
                return


def members(group):
    """Whether a process of the process group `group` lives (zombies aside), from /proc."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/stat") as f:
            state, _, pgrp = f.read().rsplit(")", 1)[1].split()[:3]  # (state, ppid, pgrp)
            if state != "Z" and int(pgrp) == group:
                return True
    return False


def send(conn, message):
    """One JSON line; False once the connection is gone."""
    try:
        conn.sendall((json.dumps(message) + "\n").encode())
        return True
    except OSError:
        return False


def read(conn, events):
    """Each line from `conn` as an event (`msg`), then `closed` (silence counts as closed)."""
    conn.settimeout(SILENCE)
    with conn.makefile("rb") as lines:
        try:
            for line in lines:
                events.put(("msg", conn, json.loads(line)))
        except (OSError, ValueError):
            pass
    events.put(("closed", conn, None))


def heartbeat(lock, targets):
    """Say `ok` every HEARTBEAT seconds to the connections `targets()` gives, until None."""
    while (conns := targets()) is not None:
        for conn in conns:
            with lock:
                send(conn, {"op": "ok"})
        time.sleep(HEARTBEAT)


def serve(listener, events):
    """Each connection to `listener` read into `events`."""
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=read, args=(conn, events), daemon=True).start()


def listen(port):
    dual = socket.has_dualstack_ipv6()  # (IPv6 and IPv4 alike, where the pod has both)
    family = socket.AF_INET6 if dual else socket.AF_INET
    return socket.create_server(("", port), family=family, dualstack_ipv6=dual)


def job_of(host):
    """The Job of a pod (`<job>-<index>`, its host name's first label)."""
    return host.split(".", 1)[0].rsplit("-", 1)[0]


def rule(rules, pod, code):
    """The name and action of the first rule matching `pod`'s failure with `code` (an exit
    status, or why its container was lost); none: the restart counts."""
    for name, action, jobs, op, codes in rules:
        in_jobs = not jobs or job_of(pod) in jobs
        if in_jobs and (not op or (isinstance(code, int) and (code in codes) == (op == "In"))):
            return name, action
    return "", "count"


def ask_all(hosts, port):
    """What each replica that answers on `port` says (64 asked at a time)."""
    found = []

    def ask(host):
        try:
            with socket.create_connection((host, port), 1) as conn:
                conn.settimeout(2)
                found.append(json.loads(conn.makefile().readline()))
        except (OSError, ValueError):
            pass

    for first in range(0, len(hosts), 64):
        threads = [threading.Thread(target=ask, args=(h,)) for h in hosts[first:][:64]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return found


def give_up(command, why):
    """Stop the command and end the replica as failed for good, saying why."""
    say("the experiment has failed: " + why)
    command.halt()
    path = os.environ.get("AICHOR_TERMINATION_LOG", "/dev/termination-log")
    with contextlib.suppress(OSError), open(path, "w") as log:
        log.write(why)
    os._exit(GAVE_UP)


class Replica:
    """What lead and members share: the settings, the command, the state every replica keeps
    (the attempt, the restarts counted, the first failure's reason)."""

    def __init__(self, argv):
        self.lead, self.port, self.budget = argv[1], int(argv[2]), int(argv[3])
        self.rules = json.loads(argv[4])  # [name, action, jobs, op, codes], first match
        names = [ATTEMPT] + [n for n in argv[5].split(",") if n]
        self.deadline, self.linger = int(argv[6]), float(argv[7])
        self.ends = {job for job in argv[8].split(",") if job}
        self.me = os.environ.get("HOSTNAME") or socket.gethostname()
        hosts = [
            pattern.replace("$i", str(i))
            for spec in argv[9:]
            for pattern, count in [spec.rsplit(":", 1)]
            for i in range(int(count))
        ]
        self.hosts = [h for h in hosts if not h.startswith(self.me + ".")]
        self.events, self.lock = queue.Queue(), threading.Lock()
        self.command = Command(argv[0], names, self.events)
        self.attempt, self.counted, self.reason, self.cause = 0, 0, "", ""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.events.put(("term", None, None)))

    def state(self, **more):
        return dict(attempt=self.attempt, counted=self.counted, reason=self.reason, **more)

    def start(self, attempt):
        self.attempt = attempt
        if attempt:  # (the lead's says why: the failure it judged)
            why = f": {self.cause}" if self.cause else ""
            say(f"restart attempt {attempt} ({self.counted} of {self.budget} counted){why}")
        self.command.start(attempt)

    def judge(self, failure):
        """Why the experiment fails for good after `failure`, or None: it restarts (counted
        unless a disruption)."""
        _, pod, code, disrupted = failure
        what = f"exited with {code}" if isinstance(code, int) else f"was lost ({code})"
        what = "was disrupted" if disrupted else what
        cause = f"{pod} {what} at attempt {self.attempt}"
        first, self.reason, self.cause = self.reason, self.reason or cause, cause
        name, action = rule(self.rules, pod, code) if not disrupted else ("", "free")
        if action == "free":
            return None
        if action == "fail":
            return cause + ": " + name + " fails the experiment at once"
        if self.counted >= self.budget:
            spent = f"{self.budget} restart(s) spent" if self.budget else "no restarts allowed"
            return cause + "; " + spent + ("; first failure: " + first if first else "")
        self.counted += 1
        return None

    def next_event(self, timeout=1.0):
        with contextlib.suppress(queue.Empty):
            return self.events.get(timeout=timeout)
        return ("tick", None, None)


class Lead(Replica):
    """The entry point's first replica: judges failures and runs the attempts."""

    def __init__(self, argv):
        super().__init__(argv)
        self.clients = {}  # connection -> the member's pod
        self.phase = "running"  # or "stopping" (a failure is being judged)
        self.failures, self.waiting, self.acks = [], set(), set()
        self.settle = self.limit = 0.0
        pods = [self.me, *(h.split(".", 1)[0] for h in self.hosts)]
        self.required = {p for p in pods if job_of(p) in self.ends} if self.ends else {self.me}
        self.done = set()  # the pods whose command has succeeded in this attempt

    def run(self):
        listener = listen(self.port)
        recalled = self.recall()
        threading.Thread(target=serve, args=(listener, self.events), daemon=True).start()
        beats = (self.lock, lambda: list(self.clients))
        threading.Thread(target=heartbeat, args=beats, daemon=True).start()
        if recalled:  # this pod replaced the lead: the group restarts from what members knew
            self.stopping()
            self.failures.append(recalled)
        else:
            self.start(0)
        while True:
            self.handle(*self.next_event(0.05 if self.phase == "stopping" else 1.0))
            if self.phase == "stopping" and self.settled():
                self.decide()

    def broadcast(self, op, **more):
        message = self.state(op=op, phase=self.phase, **more)
        for conn in list(self.clients):
            with self.lock:
                send(conn, message)

    def recall(self):
        """What the members remember of the group, if a lead led them before: then this lead's
        predecessor is the failure (a disruption if it said so)."""
        led = [s for s in ask_all(self.hosts, self.port) if s.get("led")]
        if not led:
            return None
        last = max(led, key=lambda s: (s["attempt"], s["counted"]))
        self.attempt, self.counted, self.reason = last["attempt"], last["counted"], last["reason"]
        disrupted = any(s.get("lead") == "disrupted" for s in led)
        return (time.time(), self.me, None if disrupted else "its container ended", disrupted)

    def handle(self, kind, tag, message):
        if kind == "term":  # this pod is being deleted: its Job makes another
            self.broadcast("disrupted")
            self.command.halt()
            os._exit(TERMINATED)
        elif kind == "exited" and tag not in self.command.halted:
            code, when = message
            if code == 0 and self.phase == "running":
                self.succeeded(self.me)
            if code:
                self.failed(self.me, code, when, self.attempt)
        elif kind == "closed":
            pod = self.clients.pop(tag, None)
            if pod:
                self.failed(pod, "its container ended", time.time(), self.attempt)
        elif kind == "msg":
            self.heard(tag, message)

    def heard(self, conn, message):
        op, pod = message["op"], message.get("pod")
        if op == "hello":
            self.clients[conn] = pod
            with self.lock:
                send(conn, self.state(op="state", phase=self.phase))
        if op == "disrupted":
            self.clients.pop(conn, None)  # (its link closes next: not another failure)
            self.failed(pod, None, message["when"], message["attempt"], disrupted=True)
        elif op == "failed" or (op == "hello" and message["phase"] == "failed"):
            self.failed(pod, message["code"], message["when"], message["attempt"])
        elif op == "done" or (op == "hello" and message["phase"] == "done"):
            if message["attempt"] == self.attempt and self.phase == "running":
                self.succeeded(pod)
        elif op == "stopped":
            self.acks.add(conn)

    def stopping(self):
        """Every command stops: the members are told, the lead's own is stopped beside."""
        self.phase, self.failures, self.acks = "stopping", [], set()
        self.waiting = set(self.clients)
        grace = int(os.environ.get("AICHOR_STOP_GRACE", "30"))
        self.settle, self.limit = time.time() + SETTLE, time.time() + grace + 2
        self.broadcast("stop")
        threading.Thread(target=self.command.halt, daemon=True).start()

    def failed(self, pod, code, when, attempt, disrupted=False):
        """A replica's failure during `attempt`: the first stops the group."""
        if attempt != self.attempt:
            return
        if self.phase == "running":
            self.stopping()
        if time.time() <= self.settle:
            self.failures.append((when, pod, code, disrupted))

    def settled(self):
        """Whether the failures are in and every command has stopped (or the grace is over)."""
        now = time.time()
        stopped = all(c in self.acks or c not in self.clients for c in self.waiting)
        return now >= self.settle and (
            now >= self.limit or (stopped and not self.command.running())
        )

    def decide(self):
        why = self.judge(min(self.failures, key=lambda f: f[0]))  # (the earliest)
        if why:
            self.farewell(why)
        self.phase, self.done = "running", set()
        self.attempt += 1
        self.broadcast("start")
        self.start(self.attempt)

    def farewell(self, why):
        """Every member told why the experiment fails, then this replica ends once they have
        (within FAREWELL): the lead's end stops the others' pods, which would not say it."""
        self.broadcast("fail", why=why)
        until = time.time() + FAREWELL
        while self.clients and time.time() < until:
            kind, tag, _ = self.next_event(0.1)
            if kind == "closed":
                self.clients.pop(tag, None)
        give_up(self.command, why)

    def succeeded(self, pod):
        """A command's success: the experiment's when it is the lead's, or (`ends`: Jobs that
        must each complete) once every replica of those Jobs has succeeded in this attempt."""
        self.done.add(pod)
        if self.required <= self.done:
            self.finish()

    def finish(self):
        """The entry point has succeeded: every member is told (those not linked yet within
        the linger), and the replica ends."""
        self.phase = "ended"
        self.broadcast("end")
        told, until = len(self.clients), time.time() + self.linger
        while told < len(self.hosts) and time.time() < until:
            kind, tag, message = self.next_event(0.1)
            if kind == "term":
                break
            if kind == "msg" and message["op"] == "hello":
                with self.lock:
                    send(tag, self.state(op="end"))
                told += 1
        sys.exit(0)


class Member(Replica):
    """Every other replica: runs the attempts its lead starts, and tells it of failures."""

    def __init__(self, argv):
        super().__init__(argv)
        self.conn, self.led, self.started = None, False, None
        self.phase = "idle"  # running, done, failed, stopped
        self.failure = (0, 0.0)  # this attempt's exit code and when
        self.lost_at, self.lead_went = None, ""
        self.began = time.time()

    def run(self):
        try:
            threading.Thread(target=self._answer, args=(listen(self.port),), daemon=True).start()
        except OSError as error:
            say(f"cannot answer a new lead on port {self.port} ({error})")
        threading.Thread(target=self._link, daemon=True).start()
        while True:
            self.handle(*self.next_event(0.2))
            self.tick()

    def _answer(self, listener):
        """Tell a new lead what this replica remembers."""
        while True:
            conn, _ = listener.accept()
            with conn:
                lead = self.lead_went if self.lost_at else ""
                send(conn, self.state(led=self.led, lead=lead, pod=self.me))

    def _link(self):
        """Keep a connection to the lead: say hello on each, heartbeats, its lines as events."""
        delay = 0.1
        while True:
            try:
                conn = socket.create_connection((self.lead, self.port), 2)
            except OSError:
                time.sleep(delay)
                delay = min(delay * 1.5, 0.5 if self.lost_at else 1.0)
                continue
            delay = 0.1
            with self.lock:
                self.conn = conn
                code, when = self.failure
                hello = self.state(op="hello", pod=self.me, phase=self.phase, code=code, when=when)
                send(conn, hello)
            beats = (self.lock, lambda c=conn: [c] if self.conn is c else None)
            threading.Thread(target=heartbeat, args=beats, daemon=True).start()
            read(conn, self.events)

    def notify(self, op, **more):
        with self.lock:
            if self.conn is not None:
                send(self.conn, self.state(op=op, pod=self.me, **more))

    def handle(self, kind, tag, message):
        if kind == "term":  # this pod is being deleted: its Job makes another
            self.notify("disrupted", when=time.time())
            self.command.halt()
            os._exit(TERMINATED)
        elif kind == "exited" and tag not in self.command.halted:
            code, when = message
            if code == 0:
                self.phase = "done"
                self.notify("done")
            else:
                self.phase, self.failure = "failed", (code, when)
                self.notify("failed", code=code, when=when)
        elif kind == "closed":
            self.lost(tag)
        elif kind == "msg" and message["op"] != "ok":
            self.heard(message)

    def heard(self, message):
        op = message["op"]  # (every message but `ok` carries the lead's state)
        self.led, self.lost_at, self.lead_went = True, None, op if op == "disrupted" else ""
        self.attempt, self.counted, self.reason = (message[k] for k in STATE)
        if op == "disrupted":  # (its link closes next)
            return
        if op == "end":
            self.end()
        elif op == "fail":
            give_up(self.command, message["why"])
        elif op == "stop" or message["phase"] != "running":
            self.command.halt()
            self.phase = "stopped"
            self.notify("stopped")
        elif self.phase in ("idle", "stopped") or self.started != self.attempt:
            self.command.halt()
            self.phase, self.started, self.failure = "running", self.attempt, (0, 0.0)
            self.start(self.attempt)

    def lost(self, conn):
        """The link to the lead closed without an end: the group cannot go on without it."""
        with self.lock:
            if self.conn is conn:
                self.conn = None
        if not self.led or self.lost_at:
            return
        self.lost_at = time.time()
        say(f"lost the lead {self.lead}; stopping until it is back")
        self.command.halt()
        self.phase = "stopped"

    def tick(self):
        now = time.time()
        if self.phase == "idle" and not self.led and now - self.began >= JOIN:
            self.phase, self.started = "running", 0  # no lead yet (created later): attempt 0
            self.start(0)
        if self.lost_at and now - self.lost_at > self.deadline:
            why = f"the lead {self.lead} did not come back within {self.deadline}s"
            give_up(self.command, why)

    def end(self):
        """The entry point has succeeded: a command about to end by itself may; then stop."""
        try:
            if (proc := self.command.proc) is not None:
                proc.wait(END_GRACE)
        except subprocess.TimeoutExpired:
            say(f"{self.lead} has ended; stopping this replica")
        self.command.halt()
        sys.exit(0)


def main(argv):
    me = os.environ.get("HOSTNAME") or socket.gethostname()
    (Lead if argv[1].startswith(me + ".") else Member)(argv).run()


if __name__ == "__main__":
    main(sys.argv[1:])
