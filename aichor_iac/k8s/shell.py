"""The small POSIX shell programs replicas run around the user's command.

They use only what ML images have (`/bin/sh`, and `python3`, `getent`, `bash` or `nc` when
present) so no extra image is pulled. Kubernetes expands `$(VAR)` in commands and `$$` to
`$`; `k8s_escape` makes a string reach the shell unchanged.
"""

from __future__ import annotations

import re
import shlex

from .. import pods
from ..frameworks import Endpoint, Env
from ..frameworks.base import INDEX_VAR
from ..pods import LIFELINE_PORT

# A follower checks every AICHOR_FOLLOW_INTERVAL seconds (default 10) and stops after
# AICHOR_FOLLOW_MISSES consecutive "no such host" answers (default 3); both are env overrides.
FOLLOW_INTERVAL_SECONDS = 10
FOLLOW_MISSES = 3
STOP_GRACE_SECONDS = 30

# TCP probe without python3 (which pods/wait.py uses): bash's /dev/tcp, else nc.
_TCP_PROBE = """\
aichor_tcp() {
  if command -v bash >/dev/null 2>&1; then
    timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2" 2>/dev/null
  else
    nc -z -w 3 "$1" "$2" 2>/dev/null
  fi
}"""

# Lookup without python3 (pods/wait.py and pods/lifeline.py look up themselves): exit 0 when the
# name resolves, 2 when it is known not to exist (getent's "not found"), 1 when unsure.
_LOOKUP = """\
aichor_lookup() {
  if command -v getent >/dev/null 2>&1; then
    getent hosts "$1" >/dev/null 2>&1
  else
    return 1
  fi
}"""

# The wait's bounds in a command (comments: a reader of the pod spec sees where it is).
WAIT_BEGIN, WAIT_END = "# aichor: wait for peers", "# aichor: peers are up"

_SELF = "${HOSTNAME:-$(cat /proc/sys/kernel/hostname)}"


def k8s_escape(text: str) -> str:
    """Protect `text` from Kubernetes' `$(VAR)` expansion of commands and env values."""
    return text.replace("$", "$$")


SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def argv_command(argv: list[str]) -> str:
    """A container's command and args (exec form, where Kubernetes expands `$(VAR)` in each
    argument) as one shell command line that runs exactly that argv: literal text quoted, each
    `$(VAR)` the variable's value if the container has it and `$(VAR)` otherwise (Kubernetes'
    rule), `$$` one `$`. Values are expanded inside double quotes, so none can split an
    argument or run anything. A reference to a name the shell cannot expand (`$(a.b)`) stays
    literal text."""
    words = []
    for arg in argv:
        parts, literal, i = [], "", 0
        while i < len(arg):
            char, rest = arg[i], arg[i + 1 :]
            if char == "$" and rest.startswith("$"):
                literal, i = literal + "$", i + 2
            elif char == "$" and rest.startswith("(") and ")" in rest:
                name = rest[1 : rest.index(")")]
                if SHELL_NAME.match(name):
                    parts += [shlex.quote(literal)] if literal else []
                    parts.append(f'"${{{name}-\\$({name})}}"')
                    literal = ""
                else:
                    literal += f"$({name})"
                i += len(name) + 3
            else:
                literal, i = literal + char, i + 1
        if literal or not parts:
            parts.append(shlex.quote(literal))
        words.append("".join(parts))
    return " ".join(words)


def wait_lines(targets: tuple[Endpoint, ...], deadline_seconds: int) -> list[str]:
    """Shell lines, run before the command, that wait (bounded overall, logged) until every
    target accepts TCP connections (or, without a port, until its host resolves), and fail the
    replica once the deadline has passed. A replica skips itself.

    With python3 (every ML image) one process waits for all targets, trying again soon and
    then less often (pods/wait.py); without it, a shell loop probes with bash or nc every second.
    The wait runs in the main container, not an init container: the kubelet's start of a next
    container (its PLEG notices the previous one's end) would add up to a second."""
    specs = " ".join(
        shlex.quote(f"{t.host}:{'' if t.port is None else t.port}:{t.replicas or ''}")
        for t in targets
    )
    probes = {_LOOKUP if t.port is None else _TCP_PROBE for t in targets}
    lines = [
        WAIT_BEGIN,
        "start=$(date +%s)",
        "if command -v python3 >/dev/null 2>&1; then",
        f'  python3 -S -c {shlex.quote(pods.source("wait"))} "$start" {deadline_seconds} "{_SELF}" {specs}'
        " || exit 1",
        "else",
        *sorted(probes),
        _WAIT.format(self=_SELF, deadline=deadline_seconds),
    ]
    for target in targets:
        port = '""' if target.port is None else target.port
        if target.replicas:  # host names are DNS names: "$i" is the only expansion
            lines.append(
                f'i=0; while [ "$i" -lt {target.replicas} ]; do '
                f'aichor_wait "{target.host}" {port}; i=$((i + 1)); done'
            )
        else:
            lines.append(f"aichor_wait {shlex.quote(target.host)} {port}")
    return [*lines, "fi", WAIT_END]


# `aichor_wait HOST PORT`: until HOST:PORT accepts connections (HOST resolves, without PORT).
_WAIT = """\
aichor_wait() {{
  case "$1" in "{self}".*) echo "aichor: $1 is this replica, not waiting"; return 0;; esac
  if [ -n "$2" ]; then what="$1:$2 to accept connections"; done="$1:$2 accepts connections"
  else what="$1 to resolve"; done="$1 resolves"; fi
  until if [ -n "$2" ]; then aichor_tcp "$1" "$2"; else aichor_lookup "$1"; fi; do
    elapsed=$(( $(date +%s) - start ))
    if [ "$elapsed" -ge {deadline} ]; then
      echo "aichor: gave up after ${{elapsed}}s waiting for $what" >&2
      exit 1
    fi
    echo "aichor: waiting for $what (${{elapsed}}s of {deadline}s)"
    sleep 1
  done
  echo "aichor: $done"
}}"""


def prelude(env: tuple[Env, ...]) -> list[str]:
    """Shell lines computing the index-dependent variables: those that need arithmetic, and
    those replica 0 sees otherwise (framework values, never user text)."""
    lines = []
    for e in env:
        if e.index_offset:
            lines.append(f'export {e.name}="$(( {INDEX_VAR} + {e.index_offset} ))"')
        if e.first is not None:
            lines.append(f'if [ "${INDEX_VAR}" = 0 ]; then export {e.name}="{e.first}"; fi')
        if e.only_first:
            lines.append(f'if [ "${INDEX_VAR}" != 0 ]; then unset {e.name}; fi')
    return lines


NO_REGROUP = (
    'echo "aichor: no python3 in the image: this replica runs without the group restart" >&2'
)


def main_command(
    command: str,
    env: tuple[Env, ...],
    follows: str | None,
    seen: bool = True,
    linger: int = 0,
    lifeline: bool = False,
    restarts: bool = False,
    waits: tuple[Endpoint, ...] = (),
    deadline_seconds: int = 0,
    regroup: list[str] | None = None,
) -> list[str]:
    """The main container's command: the prelude, the wait for `waits` (at most
    `deadline_seconds`), then `command` (the user's, or the group's program) as `$1`.

    With `follows`, the command runs as a child that is stopped (and the replica succeeds) once
    the followed entry point has ended: told by its lifeline, else seen gone from DNS. With
    `lifeline`, this is an entry point that followers keep a connection to (`restarts`: its
    Job starts it again after a failure, so only success, or a failure with no retry left, is
    its end). With `linger` (an entry point some followers only count gone once they have
    seen it: how many followers there are), the replica stays one follow interval (+2 s)
    after its command has ended, so that every follower finds it at least once, however
    quickly it ended; its lifeline ends that stay once `linger` followers (told apart by host
    name) have been told. Without python3 the
    POSIX shell programs do the same with DNS only (pods/lifeline.py says how). With `regroup`
    (its arguments, `restart.Regroup`), the replica runs the group restart's program instead
    (`regroup.py`), which needs python3.
    """
    lines = prelude(env) + (wait_lines(waits, deadline_seconds) if waits else [])
    flag = {True: "1", False: "0"}
    if regroup is not None:
        lines += [_python(pods.source("regroup"), regroup), NO_REGROUP]
        lines.append('exec /bin/sh -c "$1"')
    elif follows is not None:
        args = ["follow", shlex.quote(follows), str(LIFELINE_PORT), flag[seen], flag[restarts]]
        lines += [_python(pods.source("lifeline"), args), follow_script(follows, seen)]
    elif lifeline:
        args = ["entry", flag[restarts], str(linger), str(LIFELINE_PORT)]
        lines.append(_python(pods.source("lifeline"), args))
        lines.append(LINGER if linger else 'exec /bin/sh -c "$1"')
    elif linger:
        lines.append(LINGER)
    elif not lines:
        return ["/bin/sh", "-c", k8s_escape(command)]
    else:
        lines.append('exec /bin/sh -c "$1"')
    return ["/bin/sh", "-c", k8s_escape("\n".join(lines)), "aichor", k8s_escape(command)]


def _python(program: str, args: list[str]) -> str:
    """Run `program` with the command (`$1`) and `args` when the image has python3 (`-S`:
    the standard library only, without site-packages, starts in half the time)."""
    call = " ".join([shlex.quote(program), '"$1"', *args])
    return f"if command -v python3 >/dev/null 2>&1; then exec python3 -S -c {call}; fi"


# `$1` as a child in its own process group (with `setsid` when the image has it), so that
# `aichor_stop SIGNAL` reaches every process of the user's command.
_CHILD = """\
if command -v setsid >/dev/null 2>&1; then setsid /bin/sh -c "$1" & else /bin/sh -c "$1" & fi
child=$!
aichor_stop() { kill -"$1" -"$child" 2>/dev/null || kill -"$1" "$child" 2>/dev/null; }"""

# An entry point's end, kept in DNS for a follower's lookup: the command's status once it has
# ended; a TERM (the pod deleted) is passed on and ends the replica without lingering.
LINGER = f"""\
{_CHILD}
trap 'aichor_stop TERM; stopped=1' TERM INT
wait "$child"; status=$?
while kill -0 "$child" 2>/dev/null; do wait "$child"; status=$?; done
trap 'exit "$status"' TERM INT
if [ -z "$stopped" ]; then
  sleep "${{AICHOR_FOLLOW_INTERVAL:-{FOLLOW_INTERVAL_SECONDS}}}" & wait $!
  sleep 2 & wait $!
fi
exit "$status"
"""


def follow_script(host: str, seen: bool = True) -> str:
    """Stop the command once `host` no longer resolves. `seen`: the wait made sure it
    resolved when the replica started; otherwise only a host once seen can be gone (it
    belongs to a group created after this one).

    Run `$1` in its own process group (with `setsid` when the image has it) so that stopping
    reaches every process of the user's command; PID 1 exiting ends whatever is left."""
    quoted = shlex.quote(host)
    return f"""\
{_LOOKUP}
{_CHILD}
trap 'aichor_stop TERM' TERM INT
case {quoted} in "{_SELF}".*) wait "$child"; exit $?;; esac
misses=0
seen={int(seen)}
while kill -0 "$child" 2>/dev/null; do
  sleep "${{AICHOR_FOLLOW_INTERVAL:-{FOLLOW_INTERVAL_SECONDS}}}" & wait $!
  aichor_lookup {quoted}
  case $? in
    0) misses=0; seen=1 ;;
    2) misses=$((misses + seen)) ;;
  esac
  if [ "$misses" -ge "${{AICHOR_FOLLOW_MISSES:-{FOLLOW_MISSES}}}" ]; then
    echo "aichor: {host} (its host has left DNS); stopping this replica"
    aichor_stop TERM
    ( sleep {STOP_GRACE_SECONDS}; aichor_stop KILL ) >/dev/null 2>&1 &
    wait "$child"
    exit 0
  fi
done
wait "$child"
"""
