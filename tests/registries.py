"""A real OCI registry on 127.0.0.1 for the tests: Debian's docker-registry (the CNCF
Distribution registry, as Docker Hub, GHCR and Harbor run it), open or behind token auth as
Docker Hub is (a token service of the tests' own signs the JWTs its `auth.token` config
trusts). Images are pushed through the registry's own API: a config and a manifest (no
layers: what an image runs is its config), an index for several platforms."""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import http.server
import json
import shutil
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import yaml
from stores import Server, free_port, running

REGISTRY = shutil.which("docker-registry")
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
SERVICE, ISSUER = "test-registry", "test-token-service"


@contextlib.contextmanager
def registry(folder: Path, token_realm: str | None = None) -> Iterator[str]:
    """The registry's host:port, open (anyone pulls and pushes) or behind `token_realm`."""
    port = free_port()
    config: dict = {
        "version": 0.1,
        "log": {"level": "error"},
        "storage": {"filesystem": {"rootdirectory": str(folder / "data")}},
        "http": {"addr": f"127.0.0.1:{port}", "secret": "tests"},
    }
    if token_realm:
        token = {"realm": token_realm, "service": SERVICE, "issuer": ISSUER}
        config["auth"] = {"token": {**token, "rootcertbundle": str(folder / "token.crt")}}
    (folder / "config.yml").write_text(yaml.safe_dump(config))
    argv = [str(REGISTRY), "serve", str(folder / "config.yml")]
    with running(Server(f"http://127.0.0.1:{port}", argv, folder / "registry.log", "/v2/")):
        yield f"127.0.0.1:{port}"


def _request(method: str, url: str, data: bytes = b"", headers: dict | None = None):
    request = urllib.request.Request(url, data=data or None, method=method, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.headers, answer.read()


def push_blob(host: str, repository: str, data: bytes, token: str = "") -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    headers, _ = _request("POST", f"http://{host}/v2/{repository}/blobs/uploads/", b"", auth)
    location = headers["Location"]
    location = location if location.startswith("http") else f"http://{host}{location}"
    joined = "&" if "?" in location else "?"
    kind = {"Content-Type": "application/octet-stream", **auth}
    _request("PUT", f"{location}{joined}digest={digest}", data, kind)
    return digest


def push_manifest(host: str, repository: str, ref: str, manifest: dict, token: str = "") -> str:
    data = json.dumps(manifest).encode()
    headers = {"Content-Type": manifest["mediaType"]}
    headers |= {"Authorization": f"Bearer {token}"} if token else {}
    _request("PUT", f"http://{host}/v2/{repository}/manifests/{ref}", data, headers)
    return "sha256:" + hashlib.sha256(data).hexdigest()


def push_image(
    host: str,
    repository: str,
    ref: str,
    config: dict,
    platform: str = "linux/amd64",
    media_type: str = OCI_MANIFEST,
    token: str = "",
) -> dict:
    """An image whose config holds `config` (Entrypoint, Cmd): its manifest's descriptor."""
    os_, arch = platform.split("/")[:2]
    blob = json.dumps(
        {"architecture": arch, "os": os_, "config": config, "rootfs": {"type": "layers"}}
    ).encode()
    digest = push_blob(host, repository, blob, token)
    config_type = (
        "application/vnd.oci.image.config.v1+json"
        if media_type == OCI_MANIFEST
        else "application/vnd.docker.container.image.v1+json"
    )
    manifest = {
        "schemaVersion": 2,
        "mediaType": media_type,
        "config": {"mediaType": config_type, "digest": digest, "size": len(blob)},
        "layers": [],
    }
    pushed = push_manifest(host, repository, ref, manifest, token)
    size = len(json.dumps(manifest).encode())
    about = {"os": os_, "architecture": arch}
    return {"mediaType": media_type, "digest": pushed, "size": size, "platform": about}


def push_index(host: str, repository: str, ref: str, images: dict[str, dict]) -> None:
    """An index of one image per platform (`images`: platform -> its config)."""
    manifests = [
        push_image(host, repository, p.replace("/", "-"), config, p) for p, config in images.items()
    ]
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}
    push_manifest(host, repository, ref, index)


@contextlib.contextmanager
def token_service(
    folder: Path, user: str = "", password: str = "", refresh: str = ""
) -> Iterator[str]:
    """A token service as Docker Hub's: a JWT (RS256, its certificate in `x5c`) granting
    what the scope asks, to anyone or (`user`) to that user's basic credentials, and
    (`refresh`) to an OAuth2 refresh token posted (an identity token, as Docker posts one);
    its certificate in `folder/token.crt` for the registry to trust. Its realm's URL."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    (folder / "token.crt").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    chain = [base64.b64encode(certificate.public_bytes(serialization.Encoding.DER)).decode()]
    wanted = base64.b64encode(f"{user}:{password}".encode()).decode() if user else ""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    def token(scope: str) -> str:
        kind, repository, actions = scope.split(":")
        access = [{"type": kind, "name": repository, "actions": actions.split(",")}]
        stamp = int(now.timestamp())
        claims = {"iss": ISSUER, "sub": user or "anonymous", "aud": SERVICE, "exp": stamp + 600}
        claims |= {"nbf": stamp - 60, "iat": stamp, "jti": str(stamp), "access": access}
        header = {"alg": "RS256", "typ": "JWT", "x5c": chain}
        signing = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
        signature = key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing}.{b64(signature)}"

    class Tokens(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # (basic credentials, or none)
            query = dict(urllib.parse.parse_qsl(self.path.split("?", 1)[-1]))
            given = self.headers.get("Authorization", "").removeprefix("Basic ")
            allowed = given == wanted if wanted else not refresh
            self.answer({"token": token(query.get("scope", ""))} if allowed else None)

        def do_POST(self) -> None:  # (an OAuth2 refresh token)
            length = int(self.headers.get("Content-Length") or 0)
            form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
            asked = form.get("grant_type") == "refresh_token" and form.get("client_id")
            allowed = refresh and asked and form.get("refresh_token") == refresh
            self.answer({"access_token": token(form.get("scope", ""))} if allowed else None)

        def answer(self, given: dict | None) -> None:
            self.send_response(401 if given is None else 200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps(given or {}).encode())

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Tokens)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/token"
    finally:
        server.shutdown()
        server.server_close()


def pusher_token(realm: str, repository: str, user: str = "", password: str = "") -> str:
    """A token to push to `repository` (as `docker push` asks for one)."""
    scope = urllib.parse.quote(f"repository:{repository}:pull,push")
    headers = {}
    if user:
        pair = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {pair}"
    _, body = _request("GET", f"{realm}?service={SERVICE}&scope={scope}", b"", headers)
    return json.loads(body)["token"]
