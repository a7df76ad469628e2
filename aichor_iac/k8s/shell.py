"""The small POSIX shell programs replicas run around the user's command.

They use only what ML images have (`/bin/sh`, and `python3`, `getent`, `bash` or `nc` when
present) so no extra image is pulled. Kubernetes expands `$(VAR)` in commands and `$$` to
`$`; `k8s_escape` makes a string reach the shell unchanged.
"""

from __future__ import annotations

import shlex

from ..frameworks import Endpoint, Env
from ..frameworks.base import INDEX_VAR

# A follower checks every AICHOR_FOLLOW_INTERVAL seconds (default 10) and stops after
# AICHOR_FOLLOW_MISSES consecutive "no such host" answers (default 3); both are env overrides.
FOLLOW_INTERVAL_SECONDS = 10
FOLLOW_MISSES = 3
STOP_GRACE_SECONDS = 30

# TCP probe: python3, else bash's /dev/tcp, else nc.
_TCP_PROBE = """\
aichor_tcp() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 3).close()' "$1" "$2" 2>/dev/null
  elif command -v bash >/dev/null 2>&1; then
    timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2" 2>/dev/null
  else
    nc -z -w 3 "$1" "$2" 2>/dev/null
  fi
}"""

# Exit 0 when the name resolves, 2 when it is known not to exist (NXDOMAIN), 1 when unsure.
_LOOKUP = """\
aichor_lookup() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket,sys
try: socket.getaddrinfo(sys.argv[1], None)
except socket.gaierror as e: sys.exit(2 if e.errno == socket.EAI_NONAME else 1)' "$1"
  elif command -v getent >/dev/null 2>&1; then
    getent hosts "$1" >/dev/null 2>&1
  else
    return 1
  fi
}"""

_SELF = "${HOSTNAME:-$(cat /proc/sys/kernel/hostname)}"


def k8s_escape(text: str) -> str:
    """Protect `text` from Kubernetes' `$(VAR)` expansion of commands and env values."""
    return text.replace("$", "$$")


def wait_script(target: Endpoint, deadline_seconds: int) -> str:
    """Init container: wait, bounded and logged, until `target` accepts TCP connections (or,
    without a port, until its host resolves)."""
    host = shlex.quote(target.host)
    if target.port is None:
        probe, what, ready = _LOOKUP, f"aichor_lookup {host}", "to resolve"
        done = "resolves"
    else:
        probe, what = _TCP_PROBE, f"aichor_tcp {host} {target.port}"
        ready, done = "to accept connections", "accepts connections"
    return f"""\
{probe}
case {host} in "{_SELF}".*) echo "aichor: {host} is this replica, not waiting"; exit 0;; esac
start=$(date +%s)
until {what}; do
  elapsed=$(( $(date +%s) - start ))
  if [ "$elapsed" -ge {deadline_seconds} ]; then
    echo "aichor: gave up after ${{elapsed}}s waiting for {target} {ready}" >&2
    exit 1
  fi
  echo "aichor: waiting for {target} {ready} (${{elapsed}}s of {deadline_seconds}s)"
  sleep 2
done
echo "aichor: {target} {done}"
"""


def prelude(env: tuple[Env, ...]) -> list[str]:
    """Shell lines computing the index-dependent variables that need arithmetic."""
    return [
        f'export {e.name}="$(( {INDEX_VAR} + {e.index_offset} ))"' for e in env if e.index_offset
    ]


def main_command(user_command: str, env: tuple[Env, ...], follows: str | None) -> list[str]:
    """The main container's command: the prelude, then the user's command as `$1`.

    With `follows`, the command runs as a child that is stopped (and the replica succeeds) once
    the followed host has disappeared from DNS, i.e. the entry point's pod has ended.
    """
    lines = prelude(env)
    if follows is None:
        if not lines:
            return ["/bin/sh", "-c", k8s_escape(user_command)]
        lines.append('exec /bin/sh -c "$1"')
    else:
        lines.append(follow_script(follows))
    return ["/bin/sh", "-c", k8s_escape("\n".join(lines)), "aichor", k8s_escape(user_command)]


def follow_script(host: str) -> str:
    """Stop the user's command once `host` no longer resolves (the init container made sure
    it did when the replica started).

    Run `$1` in its own process group (with `setsid` when the image has it) so that stopping
    reaches every process of the user's command; PID 1 exiting ends whatever is left."""
    quoted = shlex.quote(host)
    return f"""\
{_LOOKUP}
if command -v setsid >/dev/null 2>&1; then setsid /bin/sh -c "$1" & else /bin/sh -c "$1" & fi
child=$!
aichor_stop() {{ kill -"$1" -"$child" 2>/dev/null || kill -"$1" "$child" 2>/dev/null; }}
trap 'aichor_stop TERM' TERM INT
case {quoted} in "{_SELF}".*) wait "$child"; exit $?;; esac
misses=0
while kill -0 "$child" 2>/dev/null; do
  sleep "${{AICHOR_FOLLOW_INTERVAL:-{FOLLOW_INTERVAL_SECONDS}}}" & wait $!
  aichor_lookup {quoted}
  case $? in
    0) misses=0 ;;
    2) misses=$((misses + 1)) ;;
  esac
  if [ "$misses" -ge "${{AICHOR_FOLLOW_MISSES:-{FOLLOW_MISSES}}}" ]; then
    echo "aichor: {host} has ended; stopping this replica"
    aichor_stop TERM
    ( sleep {STOP_GRACE_SECONDS}; aichor_stop KILL ) >/dev/null 2>&1 &
    wait "$child"
    exit 0
  fi
done
wait "$child"
"""
