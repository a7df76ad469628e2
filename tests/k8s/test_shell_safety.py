"""User strings that reach the scripts we generate arrive as data, whatever they contain
(property tests, run by a real `/bin/sh` and `bash`): a `rayStartParams` value reaches
`ray start` as exactly one argument (a KubeRay resource's, as KubeRay's shell would pass it); a command with `;`, `||`, a newline or `$(...)` runs nothing
before the wait it comes after (the kuberay entrypoint, the Ray job); a bad option name,
namespace or cluster domain is refused before any script is written."""

from __future__ import annotations

import ast
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, restarting_jobset
from conftest import expand as rendered
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aichor_iac import doors, planning
from aichor_iac.frameworks import ray
from aichor_iac.local.downward import expand
from aichor_iac.problems import ManifestError
from aichor_iac.settings import Settings, from_config

SHELLS = [s for s in ("/bin/sh", "/bin/bash") if Path(s).exists()]
R = {"cpus": 1, "ramRatio": 1}
# What a user can type: any text without NUL (which no argv or env can hold).
TEXT = st.text(st.characters(exclude_characters="\0", codec="utf-8"), max_size=40)
NASTY = st.sampled_from(["", ";", "\n", " || ", " && ", "|", "&", "`", "$(", "'", '"', "\\"])


def ray_plan(operator: str = "ray", command: str = "true", **params: object):
    types: dict = {"Head": {"resources": R, "rayStartParams": params}}
    types["Workers"] = [{"name": "pool", "count": 1, "resources": R}]
    if operator == "ray":
        types["Job"] = {"resources": R}
    data = {"spec": {"operator": operator, "image": "i", "command": command, "types": types}}
    return planning.blueprint(doors.validate(data), Settings(), "exp").plan


def program(plan, role: str) -> str:
    return next(g.program for g in plan.groups if g.role == role)


# A `ray` that prints the arguments it was given, escaped (`python3 -S`: no site, quick)
ECHO_ARGV = "python3 -S -c 'import sys; print(ascii(sys.argv[1:]))' \"$@\""


def argv_of(result: subprocess.CompletedProcess) -> list[str]:
    return ast.literal_eval(result.stdout.splitlines()[-1])


def shim(directory: Path, name: str, body: str) -> None:
    """A stand-in for a tool of the image, first on PATH."""
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def run(shell: str, script: str, directory: Path) -> subprocess.CompletedProcess:
    env = {"PATH": f"{directory}:{os.environ['PATH']}", "CURRENT_POD_IP": "10.0.0.1"}
    return subprocess.run(
        [shell, "-c", script], env=env, cwd=directory, capture_output=True, text=True, timeout=30
    )


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=TEXT, tail=NASTY)
def test_a_ray_start_param_reaches_ray_start_as_one_argument(value, tail, tmp_path):
    value = value + tail
    head = program(ray_plan(**{"plasma-directory": value}), "head")
    shim(tmp_path, "ray", ECHO_ARGV)
    for shell in SHELLS:
        result = run(shell, head, tmp_path)
        argv = argv_of(result)
        assert f"--plasma-directory={value}" in argv, (shell, result.stderr)
        assert "--node-ip-address=10.0.0.1" in argv  # the pod's own env still expands
        assert sorted(os.listdir(tmp_path)) == ["ray"]  # nothing else ran (no file made)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=TEXT, tail=NASTY, quoted=st.booleans())
def test_a_kuberay_ray_start_param_runs_nothing(value, tail, quoted, tmp_path):
    # A RayCluster's rayStartParams value, as KubeRay users write it for KubeRay's shell line
    # (quoted) or raw: refused when that shell would see several words, else `ray start` gets
    # what that shell would pass, as one argument, and nothing in it runs (KubeRay would run
    # a `$(...)` in it).
    value = value + tail
    text = shlex.quote(value) if quoted else value
    cluster = {
        "headGroupSpec": {
            "rayStartParams": {"temp-dir": text},
            "template": {"spec": {"containers": [{"name": "ray", "image": "ray"}]}},
        }
    }
    data = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "exp"}}
    try:
        model = doors.validate({**data, "spec": cluster})
    except ManifestError as error:
        assert not quoted and "rayStartParams.temp-dir" in str(error)
        return
    head = program(planning.blueprint(model, Settings(), "exp").plan, "head")
    shim(tmp_path, "ray", ECHO_ARGV)
    result = run("/bin/sh", head, tmp_path)
    argv = argv_of(result)
    if text.lower() in ("true", "false"):  # a switch, as written (KubeRay's convertParamMap)
        given = [word for word in argv if word.startswith("--temp-dir")]
        assert given == (["--temp-dir"] if text.lower() == "true" else [])
    else:
        words = shlex.split(value) if not quoted else [value]
        assert f"--temp-dir={words[0] if words else ''}" in argv
    assert sorted(os.listdir(tmp_path)) == ["ray"]  # nothing else ran (no file made)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(prefix=TEXT, separator=NASTY)
def test_a_command_runs_nothing_before_the_wait_it_comes_after(
    prefix, separator, tmp_path, monkeypatch
):
    # The wait fails (no cluster): whatever the command holds, none of it may run.
    monkeypatch.setattr(ray, "START_PAUSE", 0)  # (the job tries `ray start` 3 times)
    command = f"{prefix}{separator}touch escaped"
    shim(tmp_path, "python3", "exit 1")  # the wait for every node, failing
    shim(tmp_path, "ray", "exit 1")  # the job's `ray start`, failing
    kuberay = shlex.split(program(ray_plan("kuberay", command), "submitter"))
    entrypoint = kuberay[kuberay.index("-c") + 4]  # ray_submit's argv: url, name, entrypoint
    job = program(ray_plan("ray", command), "job")
    for shell in SHELLS:
        for script in (entrypoint, job):
            run(shell, script, tmp_path)
            assert not (tmp_path / "escaped").exists(), (shell, script)


@pytest.mark.parametrize("shell", SHELLS)
def test_the_command_still_runs_once_the_wait_has_passed(shell, tmp_path):
    shim(tmp_path, "python3", "exit 0")
    kuberay = shlex.split(program(ray_plan("kuberay", "echo a; echo b > made"), "submitter"))
    entrypoint = kuberay[kuberay.index("-c") + 4]
    result = run(shell, entrypoint, tmp_path)
    assert result.stdout == "a\n" and (tmp_path / "made").read_text() == "b\n"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"include-dashboard": True}, "--include-dashboard=true"),
        ({"include-dashboard": False}, "--include-dashboard=false"),
        ({"disable-usage-stats": True}, "--disable-usage-stats"),
        ({"num_cpus": 0}, "--num-cpus=0"),
    ],
)
def test_ray_start_booleans_are_what_ray_reads(params, expected):
    head = shlex.split(program(ray_plan(**params), "head").replace('"$CURRENT_POD_IP"', "ip"))
    assert expected in head


def test_a_false_switch_is_left_out():
    head = program(ray_plan(**{"disable-usage-stats": False}), "head")
    assert "disable-usage-stats" not in head


@pytest.mark.parametrize("key", ["a b", "x;touch y", "$(id)", "num cpus", "-", "Num-Cpus"])
def test_a_ray_start_option_name_is_checked(key):
    with pytest.raises(ManifestError, match=r"rayStartParams\..*is not a `ray start` option"):
        ray_plan(**{key: "1"})


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"namespace": "team\n"}, "aichor:namespace"),
        ({"namespace": "a/../../b"}, "aichor:namespace"),
        ({"namespace": "Team"}, "aichor:namespace"),
        ({"clusterDomain": "cluster.local; touch x"}, "aichor:clusterDomain"),
        ({"clusterDomain": "$(id).local"}, "aichor:clusterDomain"),
    ],
)
def test_names_that_reach_host_names_are_checked(config, key):
    with pytest.raises(ManifestError, match=rf"{key}: .* (is not a|must be a)"):
        from_config(config)
    with pytest.raises(ManifestError, match=rf"{key}: "):
        Settings().updated(
            **{"cluster_domain" if "cluster" in key else "namespace": next(iter(config.values()))}
        )


@pytest.mark.parametrize("namespace", ["x/../../y", "Bad_NS", "ns\n"])
def test_the_cli_refuses_a_namespace_the_stack_file_would(namespace, tmp_path, capsys):
    from aichor_iac import cli

    out = tmp_path / "out"
    code = cli.main(
        ["render", str(ROOT / "examples/pytorch.yaml"), "--namespace", namespace, "-o", str(out)]
    )
    assert code == 2 and not out.exists() and not (tmp_path / "y").exists()
    assert "aichor:namespace: " in capsys.readouterr().err


def servers(told: str) -> list[str]:
    """The command of a restarting JobSet's container that gives args only, its image's
    entrypoint `told` by the stack."""
    container = {"name": "server", "image": "img:1", "args": ["--port=8000"]}
    data = restarting_jobset(container, job="server")
    jobs = [o for o in rendered(data, entrypoints=[told]).objects if o["kind"] == "Job"]
    return jobs[0]["spec"]["template"]["spec"]["containers"][0]["command"]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=TEXT, tail=st.one_of(NASTY, st.just("$(CURRENT_POD_IP)")))
def test_an_entrypoint_the_stack_tells_reaches_its_program_as_its_words(value, tail, tmp_path):
    """What the group restart runs again (the command's last word, run by `/bin/sh -c` after
    Kubernetes' `$(VAR)` expansion with the container's env): the told entrypoint's words,
    then the args, as data (an image's entrypoint is never expanded)."""
    shim(tmp_path, "served", ECHO_ARGV)
    line = servers(f"img:1=served {shlex.quote(value + tail)}")[-1]
    for shell in SHELLS:
        result = run(shell, expand(line, {"CURRENT_POD_IP": "10.0.0.1"}), tmp_path)
        assert result.returncode == 0, result.stderr
        assert argv_of(result) == [value + tail, "--port=8000"]
