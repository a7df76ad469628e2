"""What an image runs, read from its registry without pulling it: the image's manifest (the
platform's, from an index) and its config, whose `Entrypoint` and `Cmd` the container runtime
runs where a container gives no command (`aichor-iac entrypoints`).

The OCI distribution API's read path, with the standard library: a reference named as Docker
names it (`python:3.11` is `registry-1.docker.io/library/python:3.11`), an anonymous bearer
token where the registry asks for one (Docker Hub, GHCR, Artifact Registry's public images),
or the credentials Docker keeps (`~/.docker/config.json`, `$DOCKER_CONFIG`: what `docker login`
kept, or a credential helper's answer, as gcloud's and ECR's). A registry on a loopback
address is read over plain HTTP, as Docker does. (The ORAS SDK reads
Docker Hub's names without their `library/` and retries an unreachable registry for two
minutes: too little gained for a dependency.)
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.client import HTTPMessage
from pathlib import Path
from typing import IO, Any

INDEXES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFESTS = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
DOCKER_HUB = "registry-1.docker.io"
TIMEOUT = 20  # seconds a registry has to answer each request
LARGEST = 4 << 20  # bytes of a manifest or a config read, at most (theirs are kilobytes)
HELPER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # a credential helper's name
HELPER_TIMEOUT = 60  # seconds a credential helper has to answer (gcloud's may refresh a token)
LOOPBACK = re.compile(r"^(localhost|127(\.\d+){3}|\[::1\])(:\d+)?$")


class _Redirect(urllib.request.HTTPRedirectHandler):
    """Redirects followed without the registry's credentials where they leave its host (Docker
    Hub sends its blobs from a CDN, whose signed URL refuses a second authorization)."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != req.host:
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_Redirect())


class RegistryError(Exception):
    """The image's config cannot be read: why, and what to do."""


@dataclass(frozen=True)
class Reference:
    """An image reference as the runtime resolves it."""

    host: str  # where the registry answers (Docker Hub's API host for docker.io)
    repository: str
    reference: str  # a tag, or a digest

    @classmethod
    def parse(cls, image: str) -> Reference:
        """Docker's rules: a first part with a `.` or `:`, or `localhost`, is the registry;
        none is Docker Hub, whose one-part names are under `library/`; no tag is `latest`."""
        name, digest = image.split("@", 1) if "@" in image else (image, "")
        first, _, rest = name.partition("/")
        if rest and ("." in first or ":" in first or first == "localhost"):
            host, path = first, rest
        else:
            host, path = "docker.io", name
        tag = ""
        if ":" in path.rsplit("/", 1)[-1]:
            path, tag = path.rsplit(":", 1)
        if host in ("docker.io", "index.docker.io"):
            host = DOCKER_HUB
            path = path if "/" in path else f"library/{path}"
        if not path or path != path.lower():
            raise RegistryError(f"{image}: not an image reference")
        return cls(host, path, digest or tag or "latest")

    @property
    def base(self) -> str:
        scheme = "http" if LOOPBACK.match(self.host) else "https"
        return f"{scheme}://{self.host}/v2/{self.repository}"


@dataclass(frozen=True)
class ImageConfig:
    """What the image runs: its Entrypoint, then its Cmd."""

    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]


def image_config(image: str, platform: str = "linux/amd64") -> ImageConfig:
    """The config of `image` for `platform` (`os/arch[/variant]`, for an image of several)."""
    ref = Reference.parse(image)
    session = _Session(ref)
    manifest = session.json(f"{ref.base}/manifests/{ref.reference}", (*INDEXES, *MANIFESTS))
    if manifest.get("mediaType") in INDEXES or "manifests" in manifest:
        digest = _for_platform(image, manifest, platform)
        manifest = session.json(f"{ref.base}/manifests/{digest}", MANIFESTS)
    config = session.json(f"{ref.base}/blobs/{manifest['config']['digest']}", ())
    held = config.get("config") or {}
    return ImageConfig(tuple(held.get("Entrypoint") or ()), tuple(held.get("Cmd") or ()))


def _for_platform(image: str, index: dict[str, Any], platform: str) -> str:
    """The digest of the index's manifest for `platform`."""
    wanted = platform.split("/")
    for entry in index.get("manifests") or []:
        about = entry.get("platform") or {}
        have = [about.get("os"), about.get("architecture"), about.get("variant")]
        if have[: len(wanted)] == wanted:
            return str(entry["digest"])
    offered = sorted(
        "/".join(filter(None, (m["platform"].get("os"), m["platform"].get("architecture"))))
        for m in index.get("manifests") or []
        if m.get("platform")
    )
    raise RegistryError(f"{image} has no {platform} image (it has {', '.join(offered)})")


class _Session:
    """Requests to one repository, with the token its registry gives (asked once)."""

    def __init__(self, ref: Reference) -> None:
        self.ref, self.authorization = ref, ""

    def json(self, url: str, accept: tuple[str, ...]) -> dict[str, Any]:
        try:
            return json.loads(self._get(url, accept))
        except ValueError:
            raise RegistryError(f"{url}: the registry's answer is not JSON") from None

    def _get(self, url: str, accept: tuple[str, ...], asked: bool = False) -> bytes:
        headers = {"Accept": ", ".join(accept) or "*/*"}
        if self.authorization:
            headers["Authorization"] = self.authorization
        request = urllib.request.Request(url, headers=headers)
        try:
            with _OPENER.open(request, timeout=TIMEOUT) as answer:
                body = answer.read(LARGEST + 1)
            if len(body) > LARGEST:
                raise RegistryError(f"{url}: the registry's answer is over {LARGEST} bytes")
            return body
        except urllib.error.HTTPError as error:
            challenge = error.headers.get("WWW-Authenticate", "")
            if error.code == 401 and not asked and challenge:
                self.authorization = self._authorize(challenge)
                return self._get(url, accept, asked=True)
            raise RegistryError(_refused(self.ref, error.code)) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise RegistryError(f"{self.ref.host}: cannot reach the registry ({reason})") from None

    def _authorize(self, challenge: str) -> str:
        """The Authorization header the registry's challenge asks for: a bearer token from its
        realm (with the user's credentials, if Docker keeps any), or basic auth."""
        scheme, _, params = challenge.partition(" ")
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        kept = login(self.ref.host)
        if scheme.lower() == "basic":
            if not kept.basic:
                raise RegistryError(_refused(self.ref, 401))
            return f"Basic {kept.basic}"
        query = {"service": fields.get("service", ""), "scope": fields.get("scope", "")}
        if not query["scope"]:
            query["scope"] = f"repository:{self.ref.repository}:pull"
        realm = fields.get("realm", "")
        if kept.identity_token:  # (OAuth2: the refresh token, posted as Docker does)
            form = {"grant_type": "refresh_token", "refresh_token": kept.identity_token}
            form |= {**query, "client_id": "aichor-iac"}
            request = urllib.request.Request(realm, urllib.parse.urlencode(form).encode())
        else:
            headers = {"Authorization": f"Basic {kept.basic}"} if kept.basic else {}
            request = urllib.request.Request(
                f"{realm}?{urllib.parse.urlencode(query)}", None, headers
            )
        try:
            with _OPENER.open(request, timeout=TIMEOUT) as answer:
                given = json.loads(answer.read(LARGEST))
        except (urllib.error.URLError, OSError, ValueError):
            raise RegistryError(_refused(self.ref, 401)) from None
        token = given.get("token") or given.get("access_token")
        if not token:
            raise RegistryError(_refused(self.ref, 401))
        return f"Bearer {token}"


def _refused(ref: Reference, code: int) -> str:
    image = f"{ref.host}/{ref.repository}:{ref.reference}"
    if code in (401, 403):
        return (
            f"{image}: the registry refuses to show it ({code}): `docker login {ref.host}`, "
            "or say what it runs in aichor:entrypoints by hand"
        )
    if code == 404:
        return f"{image}: not found in its registry (404)"
    return f"{image}: the registry answered {code}"


@dataclass(frozen=True)
class Login:
    """What Docker keeps for a registry: a user and a secret (basic auth, and a token service's
    credentials), or an identity token (an OAuth2 refresh token, for the token service)."""

    user: str = ""
    secret: str = ""
    identity_token: str = ""

    @property
    def basic(self) -> str:
        """The base64 `user:secret` of basic auth, or ""."""
        if not self.user:
            return ""
        return base64.b64encode(f"{self.user}:{self.secret}".encode()).decode()


def login(host: str) -> Login:
    """The credentials Docker would use for `host`, as its CLI finds them in its config
    (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`): the credential helper
    `credHelpers` names for the registry, else the `credsStore` every registry shares, else what
    `docker login` kept in `auths`. None: an empty Login (the registry is asked anonymously)."""
    folder = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return Login()
    names = _server_names(host)
    helpers = config.get("credHelpers") or {}
    helper = next((helpers[n] for n in names if n in helpers), None) or config.get("credsStore")
    if helper:
        server = "https://index.docker.io/v1/" if host == DOCKER_HUB else host
        return _helper_login(str(helper), server)
    auths = config.get("auths") or {}
    entry: dict[str, Any] = next((auths[n] for n in names if isinstance(auths.get(n), dict)), {})
    if entry.get("identitytoken"):
        return Login(identity_token=str(entry["identitytoken"]))
    if entry.get("auth"):
        try:
            pair = base64.b64decode(str(entry["auth"]), validate=True).decode()
        except ValueError:  # (binascii.Error and UnicodeDecodeError are ValueErrors)
            raise RegistryError(f"{host}: the auth Docker's config keeps is not base64") from None
        user, _, secret = pair.partition(":")
        return Login(user, secret)
    return Login(str(entry.get("username") or ""), str(entry.get("password") or ""))


def _server_names(host: str) -> list[str]:
    """The names Docker's config may keep `host`'s credentials under."""
    names = [host, f"https://{host}", f"http://{host}"]
    if host == DOCKER_HUB:
        names += ["https://index.docker.io/v1/", "docker.io", "index.docker.io"]
    return names


def _helper_login(helper: str, server: str) -> Login:
    """A credential helper's answer for `server`, as Docker asks it (`docker-credential-NAME
    get`, the server on its stdin, JSON on its stdout); an empty Login where it keeps none."""
    program = f"docker-credential-{helper}"
    found = shutil.which(program) if HELPER.match(helper) else None
    if found is None:
        raise RegistryError(
            f"{server}: Docker's config asks {program} for its credentials, and it is not on "
            "PATH: install it, or say what the image runs in aichor:entrypoints by hand"
        )
    try:
        done = subprocess.run(
            [found, "get"], input=server, capture_output=True, text=True, timeout=HELPER_TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise RegistryError(f"{server}: {program} did not answer ({error})") from None
    if done.returncode:
        said = (done.stdout + done.stderr).strip()
        if "credentials not found" in said.lower():
            return Login()
        first = said.splitlines()[0][:200] if said else f"exit status {done.returncode}"
        raise RegistryError(f"{server}: {program} failed: {first}")
    try:
        given = json.loads(done.stdout)
        user, secret = str(given.get("Username") or ""), str(given.get("Secret") or "")
    except (ValueError, AttributeError):
        raise RegistryError(f"{server}: {program}'s answer is not Docker's JSON") from None
    return Login(identity_token=secret) if user == "<token>" else Login(user, secret)
