"""`aichor-iac entrypoints`: what an image runs, read from a real registry on 127.0.0.1
(tests/registries.py: Debian's docker-registry), open or behind Docker Hub's token auth; the
lines it prints are the stack config that makes a replica running its image's entrypoint
restart as a group (tests/planning/test_failures.py)."""

from __future__ import annotations

import json
import shlex
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, restarting_jobset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from registries import (
    DOCKER_MANIFEST,
    REGISTRY,
    push_image,
    push_index,
    pusher_token,
    registry,
    token_service,
)

from aichor_iac.cli import main
from aichor_iac.cli.images import told_line
from aichor_iac.registry import DOCKER_HUB, Reference, RegistryError, image_config
from aichor_iac.settings import from_config

pytestmark = pytest.mark.skipif(
    REGISTRY is None, reason="no docker-registry (Debian's; make test installs it as root)"
)
SERVER = {"Entrypoint": ["/usr/bin/model_server", "--models dir"], "Cmd": ["--port=9000"]}


@pytest.fixture(scope="module")
def open_registry(tmp_path_factory: pytest.TempPathFactory):
    with registry(tmp_path_factory.mktemp("registry")) as host:
        yield host


def servers(image: str, args: list[str] | None = None) -> dict:
    """docs/failures.md's server set: a JobSet restarted as a group, its container running
    its image's entrypoint."""
    container: dict = {"name": "server", "image": image}
    container |= {"args": args} if args is not None else {}
    return restarting_jobset(container, "servers", "server", replicas=2, maxRestarts=3)


def written(tmp_path: Path, data: dict) -> str:
    path = tmp_path / "servers.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    ("image", "host", "repository", "reference"),
    [
        ("python:3.11", DOCKER_HUB, "library/python", "3.11"),
        ("python", DOCKER_HUB, "library/python", "latest"),
        ("docker.io/rayproject/ray:2.9", DOCKER_HUB, "rayproject/ray", "2.9"),
        ("ghcr.io/org/img", "ghcr.io", "org/img", "latest"),
        ("localhost:5000/a/b:c", "localhost:5000", "a/b", "c"),
        ("us-docker.pkg.dev/p/r/sax@sha256:ab", "us-docker.pkg.dev", "p/r/sax", "sha256:ab"),
    ],
)
def test_a_reference_is_read_as_docker_reads_it(image, host, repository, reference):
    assert Reference.parse(image) == Reference(host, repository, reference)


@pytest.mark.parametrize(
    ("args", "printed"),
    [
        (None, "/usr/bin/model_server '--models dir' --port=9000"),  # Entrypoint, then Cmd
        (["--port=8000"], "/usr/bin/model_server '--models dir'"),  # args replace Cmd
    ],
)
def test_what_an_image_runs_is_printed_as_the_stack_config(
    open_registry, tmp_path, capsys, args, printed
):
    push_image(open_registry, "model-server", "1", SERVER)
    image = f"{open_registry}/model-server:1"
    path = written(tmp_path, servers(image, args))
    assert main(["entrypoints", path]) == 0
    out = capsys.readouterr().out
    config = yaml.safe_load(out)["config"]
    assert config == {"aichor:entrypoints": [f"{image}={printed}"]}
    # the printed config is the stack's: the servers now restart running what the image runs
    stack = tmp_path / "Pulumi.servers.yaml"
    stack.write_text(out)
    assert main(["validate", path]) == 2
    assert main(["validate", path, "--stack-config", str(stack)]) == 0
    render = tmp_path / "out"
    assert main(["render", path, "--stack-config", str(stack), "-o", str(render)]) == 0
    job = yaml.safe_load(next(render.glob("*job-servers-server-0.yaml")).read_text())
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert shlex.split(command[-1]) == [*shlex.split(printed), *(args or [])]


def test_an_index_gives_the_platforms_image(open_registry, capsys):
    push_index(
        open_registry,
        "multi",
        "2",
        {"linux/amd64": {"Entrypoint": ["/amd64"]}, "linux/arm64": {"Entrypoint": ["/arm64"]}},
    )
    image = f"{open_registry}/multi:2"
    assert image_config(image).entrypoint == ("/amd64",)
    assert image_config(image, "linux/arm64").entrypoint == ("/arm64",)
    with pytest.raises(
        RegistryError, match=r"has no linux/s390x image \(it has linux/amd64, linux/arm64\)"
    ):
        image_config(image, "linux/s390x")


def test_a_docker_manifest_is_read_as_an_oci_one(open_registry):
    push_image(
        open_registry, "docker", "1", {"Cmd": ["python3", "app.py"]}, media_type=DOCKER_MANIFEST
    )
    assert image_config(f"{open_registry}/docker:1").cmd == ("python3", "app.py")


def test_what_cannot_be_read_is_named_and_nothing_printed(open_registry, tmp_path, capsys):
    push_image(open_registry, "nothing", "1", {})
    data = servers(f"{open_registry}/missing:1")
    data["spec"]["replicatedJobs"].append(
        {
            "name": "other",
            "template": {
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "x", "image": f"{open_registry}/nothing:1"}],
                        }
                    }
                }
            },
        }
    )
    assert main(["entrypoints", written(tmp_path, data), "--output", "json"]) == 2
    said = json.loads(capsys.readouterr().out)
    assert said["entrypoints"] == []
    assert said["problems"] == [
        f"{open_registry}/missing:1: not found in its registry (404)",
        f"{open_registry}/nothing:1 has no Entrypoint and no Cmd: give its containers a command",
    ]
    # (an address no registry answers: said at once, not retried)
    with pytest.raises(RegistryError, match="cannot reach the registry"):
        image_config("127.0.0.1:9/x:1")


def test_a_registry_behind_token_auth_gives_an_anonymous_token_to_pull(tmp_path):
    with token_service(tmp_path) as realm, registry(tmp_path, realm) as host:
        push_image(host, "open", "1", SERVER, token=pusher_token(realm, "open"))
        assert image_config(f"{host}/open:1").entrypoint == tuple(SERVER["Entrypoint"])


def test_a_private_registry_takes_what_docker_login_kept(tmp_path, monkeypatch):
    with token_service(tmp_path, "alice", "s3cret") as realm, registry(tmp_path, realm) as host:
        token = pusher_token(realm, "private", "alice", "s3cret")
        push_image(host, "private", "1", SERVER, token=token)
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
        with pytest.raises(RegistryError, match=r"refuses to show it \(401\): `docker login"):
            image_config(f"{host}/private:1")
        (tmp_path / "docker").mkdir()
        kept = {"auths": {host: {"auth": "YWxpY2U6czNjcmV0"}}}  # alice:s3cret
        (tmp_path / "docker" / "config.json").write_text(json.dumps(kept))
        assert image_config(f"{host}/private:1").cmd == tuple(SERVER["Cmd"])


# What a registry says an image runs is input too: any words come back as themselves
WORDS = st.lists(
    st.text(st.characters(exclude_characters="\0"), min_size=1, max_size=12), min_size=1, max_size=4
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entrypoint=WORDS, cmd=WORDS)
def test_a_printed_line_reads_back_as_the_images_words(entrypoint, cmd):
    line = told_line("img:1", tuple(entrypoint), tuple(cmd), {False})
    printed = yaml.safe_dump({"config": {"aichor:entrypoints": [line]}})
    settings = from_config(yaml.safe_load(printed)["config"])
    assert settings.entrypoint_argvs() == {"img:1": [*entrypoint, *cmd]}


def test_an_experiment_whose_containers_give_their_commands_asks_no_registry(capsys):
    example = str(ROOT / "examples" / "pytorch.yaml")
    assert main(["entrypoints", example]) == 0
    assert (
        capsys.readouterr().out
        == f"# every container of {example} gives its command: nothing to read\n"
    )


def test_a_redirect_off_the_registry_leaves_its_credentials_behind():
    """Docker Hub sends a blob from a CDN whose signed URL refuses a second authorization."""
    from aichor_iac.registry import _Redirect

    asked = urllib.request.Request(
        "https://registry-1.docker.io/v2/library/python/blobs/sha256:ab",
        headers={"Authorization": "Bearer t"},
    )
    for url, kept in (("https://cdn.example/blob?sig=x", False), ("/v2/elsewhere", True)):
        new = _Redirect().redirect_request(
            asked, None, 307, "", {}, urllib.parse.urljoin(asked.full_url, url)
        )
        assert new is not None and new.has_header("Authorization") == kept
