"""The group restart's program (pods/regroup.py) as processes on this machine: a lead (its host
name is the lead's, `127` for 127.0.0.1) and members; what each command sees, when the group
restarts, when it fails and what it says. The real runs are in tests/local/test_group_restart.py."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_lifeline import ENV, connected, free_port, processes  # noqa: F401  (fixture)
from waiting import linked, until

from aichor_iac import pods
from aichor_iac.pods import regroup

pytestmark = pytest.mark.slow  # (the group restart's processes, timed as in pods)


def rules(permanent: str) -> str:
    """The rules argument: exit codes `permanent` (1,2,…) fail at once."""
    codes = [int(c) for c in permanent.split(",") if c]
    return json.dumps([["permanent", "fail", [], "In", codes]] if codes else [])


def replica(command: str, port: int, host: str, log: Path, budget: int = 1, permanent: str = ""):
    """The program as a replica runs it (host `127`: the lead of 127.0.0.1)."""
    args = [command, "127.0.0.1", str(port), str(budget), rules(permanent), "RETRY", "30", "1", ""]
    env = {**ENV, "HOSTNAME": host, "AICHOR_TERMINATION_LOG": str(log)}
    return subprocess.Popen(
        [sys.executable, "-S", "-c", pods.source("regroup"), *args],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def ended(process: subprocess.Popen, timeout: float = 30) -> tuple[int, str]:
    out, _ = process.communicate(timeout=timeout)
    return process.returncode, out


def first_line(process: subprocess.Popen, timeout: float = 30) -> str:
    """The first line the process prints (its command has begun), within `timeout`."""
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"nothing printed in {timeout} s"
    return process.stdout.readline()


# The lead alone (a one-replica experiment): a command that fails in attempt 0 and succeeds
# after, or fails for good; what each case ends with and prints.
ONCE = 'echo "attempt $AICHOR_RESTART_ATTEMPT/$RETRY"; [ "$AICHOR_RESTART_ATTEMPT" != 0 ] || exit 7'
LEFT = """echo "attempt $AICHOR_RESTART_ATTEMPT"; pid="${AICHOR_TERMINATION_LOG%/*}/left.pid"
if [ "$AICHOR_RESTART_ATTEMPT" = 0 ]; then sleep 300 & echo $! > "$pid"; exit 3; fi
state=$(cut -d" " -f3 "/proc/$(cat "$pid")/stat" 2>/dev/null)  # (Z: ended, not yet reaped)
if [ -n "$state" ] && [ "$state" != Z ]; then echo "left running"; else echo "left gone"; fi"""
CASES = [
    ("restarts once", ONCE, 1, "", 0, ["attempt 0/0", "restart attempt 1 (1 of 1 counted)"]),
    ("no budget", ONCE, 0, "", regroup.GAVE_UP, ["127 exited with 7 at attempt 0; no restarts"]),
    (
        "permanent",
        ONCE,
        5,
        "3,7",
        regroup.GAVE_UP,
        ["exited with 7 at attempt 0: permanent fails the experiment at once"],
    ),
    ("spent", "exit 9", 2, "", regroup.GAVE_UP, ["at attempt 2; 2 restart(s) spent; first"]),
    ("succeeds", "echo fine", 2, "", 0, ["fine"]),
    # A daemon the command left (a Ray node's, started by `ray start`) is stopped before the
    # next attempt, which would otherwise find its ports taken
    ("leftovers stopped", LEFT, 1, "", 0, ["attempt 0", "left gone"]),
]


@pytest.mark.parametrize(
    ("command", "budget", "permanent", "code", "said"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_the_lead_alone(processes, tmp_path, command, budget, permanent, code, said):  # noqa: F811
    log = tmp_path / "termination-log"
    processes.append(lead := replica(command, free_port(), "127", log, budget, permanent))
    status, out = ended(lead)
    assert status == code, out
    for text in said:
        assert text in out, out
    if code:  # the reason, as Kubernetes shows the termination message
        assert log.read_text() in out and said[0] in log.read_text()


def test_a_member_killed_restarts_both_and_the_lead_s_end_ends_it(processes, tmp_path):  # noqa: F811
    port = free_port()
    lead_cmd = 'echo "lead $AICHOR_RESTART_ATTEMPT"; sleep 3'
    processes.append(lead := replica(lead_cmd, port, "127", tmp_path / "a"))
    connected(port)
    # (attempt 0 has begun: under load the member's restart could end it before its echo)
    said = first_line(lead)
    member_cmd = 'echo "member $AICHOR_RESTART_ATTEMPT"; [ "$RETRY" != 0 ] || kill -9 $$; sleep 600'
    processes.append(member := replica(member_cmd, port, "m-1", tmp_path / "b"))
    status, out = ended(lead)
    out = said + out
    assert status == 0, out
    assert "lead 0" in out and "restart attempt 1 (1 of 1 counted)" in out and "lead 1" in out
    status, out = ended(member)
    assert status == 0 and "member 0" in out and "member 1" in out, out


def test_a_deleted_member_restarts_the_group_without_counting(processes, tmp_path):  # noqa: F811
    port = free_port()
    processes.append(lead := replica('echo "lead $RETRY"; sleep 4', port, "127", tmp_path / "a"))
    connected(port)
    begun = tmp_path / "begun"  # (the member's command has begun: it is linked)
    processes.append(
        member := replica(f"touch {begun}; sleep 600", port, "m-1", tmp_path / "b", budget=0)
    )
    until(lambda: begun.exists() and linked(member.pid, port), timeout=30)
    member.send_signal(signal.SIGTERM)  # the kubelet's TERM: the pod is being deleted
    assert ended(member)[0] == regroup.TERMINATED
    status, out = ended(lead)
    assert status == 0, out
    assert "restart attempt 1 (0 of 1 counted)" in out and "lead 1" in out


def test_every_member_says_why_before_the_lead_ends(processes, tmp_path):  # noqa: F811
    """The lead's end fails its Job, which stops the other pods: a member still reading the
    lead's verdict would end without it. The lead ends after its members have."""
    port, begun = free_port(), tmp_path / "begun"
    fails = f"until [ -e {begun} ]; do sleep 0.1; done; exit 5"  # (once the member is linked)
    processes.append(lead := replica(fails, port, "127", tmp_path / "a", budget=0))
    connected(port)
    slow = f"touch {begun}; trap 'sleep 1; exit 0' TERM; sleep 600 & wait"  # (slow to stop)
    processes.append(member := replica(slow, port, "m-1", tmp_path / "b", budget=0))
    status, out = ended(lead)
    # (the member's termination message, its last act: there once the lead has ended; its
    # process may still be exiting, its link closed, and is waited for)
    said = (tmp_path / "b").read_text() if (tmp_path / "b").exists() else ""
    assert status == regroup.GAVE_UP, out
    why = "127 exited with 5 at attempt 0; no restarts allowed"
    assert why in said, out
    status, printed = ended(member, timeout=10)
    assert status == regroup.GAVE_UP and why in printed, printed
