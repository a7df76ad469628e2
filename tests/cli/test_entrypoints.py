"""`aichor-iac entrypoints`: what an image runs, read from a real registry on 127.0.0.1
(tests/registries.py: Debian's docker-registry), open or behind Docker Hub's token auth; the
lines it prints are the stack config that makes a replica running its image's entrypoint
restart as a group (tests/planning/test_failures.py)."""

from __future__ import annotations

import json
import os
import re
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
from aichor_iac.registry import DOCKER_HUB, Reference, RegistryError, image_config, login
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


def test_a_private_registry_takes_what_docker_login_kept(private_registry, tmp_path, monkeypatch):
    image = f"{private_registry}/private:1"
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "nowhere"))
    with pytest.raises(RegistryError, match=r"refuses to show it \(401\): `docker login"):
        image_config(image)
    for kept in ({"auth": "YWxpY2U6czNjcmV0"}, {"username": "alice", "password": "s3cret"}):
        docker_config(tmp_path, monkeypatch, {"auths": {private_registry: kept}})  # alice:s3cret
        assert image_config(image).cmd == tuple(SERVER["Cmd"])


def credential_helper(folder: Path, name: str, server: str, answer: dict) -> None:
    """`docker-credential-NAME` in `folder` (put on PATH): `answer` for `server` on its stdin,
    else Docker's helpers' "not found"."""
    folder.mkdir(exist_ok=True)
    program = folder / f"docker-credential-{name}"
    program.write_text(
        "#!/bin/sh\n"
        "read -r server\n"
        f'if [ "$1" = get ] && [ "$server" = {shlex.quote(server)} ]; then\n'
        f"  echo {shlex.quote(json.dumps(answer))}; exit 0\n"
        "fi\n"
        "echo 'credentials not found in native keychain'; exit 1\n"
    )
    program.chmod(0o755)


def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict) -> None:
    """Docker's config.json, and its helpers' folder first on PATH."""
    (tmp_path / "docker").mkdir(exist_ok=True)
    (tmp_path / "docker" / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")


ALICE = {"Username": "alice", "Secret": "s3cret"}
IDENTITY = {"Username": "<token>", "Secret": "refresh-1"}  # (an OAuth2 refresh token)


@pytest.fixture(scope="module")
def private_registry(tmp_path_factory: pytest.TempPathFactory):
    """A registry whose token service serves alice's password, or her refresh token, only;
    its image private:1."""
    folder = tmp_path_factory.mktemp("private")
    service = token_service(folder, "alice", "s3cret", refresh="refresh-1")
    with service as realm, registry(folder, realm) as host:
        push_image(
            host, "private", "1", SERVER, token=pusher_token(realm, "private", "alice", "s3cret")
        )
        yield host


@pytest.mark.parametrize(
    ("config", "helper", "answer"),
    [
        ({"credHelpers": {"HOST": "test"}}, "test", ALICE),  # (gcloud's, ecr-login's)
        ({"credsStore": "store", "auths": {"HOST": {}}}, "store", ALICE),  # (Docker Desktop's)
        ({"credHelpers": {"HOST": "test"}, "credsStore": "store"}, "test", IDENTITY),
    ],
)
def test_a_private_registry_takes_a_credential_helpers_answer(
    private_registry, tmp_path, monkeypatch, config, helper, answer
):
    """Docker's credential helpers, asked as Docker asks them: the registry's own
    (`credHelpers`), else the store every registry shares (`credsStore`); a user and a secret,
    or an identity token (`<token>`), posted to the token service as an OAuth2 refresh token."""
    host, image = private_registry, f"{private_registry}/private:1"
    docker_config(tmp_path, monkeypatch, json.loads(json.dumps(config).replace("HOST", host)))
    with pytest.raises(RegistryError, match=f"asks docker-credential-{helper} for its cred"):
        image_config(image)  # (the helper is not on PATH yet)
    credential_helper(tmp_path / "bin", helper, "another.example", answer)
    with pytest.raises(RegistryError, match=r"refuses to show it \(401\)"):
        image_config(image)  # (it keeps nothing for this registry: asked anonymously)
    credential_helper(tmp_path / "bin", helper, host, answer)
    assert image_config(image).cmd == tuple(SERVER["Cmd"])


def test_an_identity_token_docker_login_kept_is_posted_as_a_refresh_token(
    private_registry, tmp_path, monkeypatch
):
    image = f"{private_registry}/private:1"
    docker_config(tmp_path, monkeypatch, {"auths": {private_registry: {"identitytoken": "x"}}})
    with pytest.raises(RegistryError, match=r"refuses to show it \(401\)"):
        image_config(image)
    docker_config(
        tmp_path, monkeypatch, {"auths": {private_registry: {"identitytoken": "refresh-1"}}}
    )
    assert image_config(image).entrypoint == tuple(SERVER["Entrypoint"])


@pytest.mark.parametrize(
    ("config", "refused"),
    [
        ({"credHelpers": {"r.example": "../../bin/sh"}}, "asks docker-credential-../../bin/sh"),
        ({"credsStore": "broken"}, "docker-credential-broken failed: keychain locked"),
        ({"auths": {"r.example": {"auth": "%%%"}}}, "the auth Docker's config keeps is not base"),
    ],
)
def test_docker_credentials_that_cannot_be_read_are_named(tmp_path, monkeypatch, config, refused):
    docker_config(tmp_path, monkeypatch, config)
    broken = tmp_path / "bin" / "docker-credential-broken"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho 'keychain locked' >&2; exit 3\n")
    broken.chmod(0o755)
    with pytest.raises(RegistryError, match=re.escape(refused)):
        login("r.example")


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
