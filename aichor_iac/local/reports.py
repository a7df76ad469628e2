"""Progress reports of a local run: the credentials of its receiver (a CA made for the run, a
certificate for the receiver's host names signed by it, a token); the receiver is the same
sidecar a cluster runs."""

from __future__ import annotations

import datetime
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

VALID_DAYS = 7  # a local run's credentials: longer than any run, never reused


@dataclass(frozen=True)
class Credentials:
    """The files of a receiver and its clients (PEM, and the token as text)."""

    ca: Path
    cert: Path
    key: Path
    token: Path


def credentials(folder: Path, hosts: Sequence[str]) -> Credentials:
    """A CA, a certificate for `hosts` signed by it, its key and a token, written in `folder`
    (readable by this user only): TLS with a host name check, as on a cluster."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "aichor-iac progress CA")])

    def signed(subject: x509.Name, public: object, *extensions: tuple) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(public)  # type: ignore[arg-type]
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        )
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(ca_key, hashes.SHA256())

    ca = signed(ca_name, ca_key.public_key(), (x509.BasicConstraints(ca=True, path_length=0), True))
    cert = signed(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0][:64])]),
        key.public_key(),
        (x509.SubjectAlternativeName([x509.DNSName(host) for host in hosts]), False),
        (x509.BasicConstraints(ca=False, path_length=None), True),
    )
    pem = serialization.Encoding.PEM
    files = {
        "ca.crt": ca.public_bytes(pem),
        "tls.crt": cert.public_bytes(pem),
        "tls.key": key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        "token": secrets.token_urlsafe(32).encode(),
    }
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name, data in files.items():
        path = folder / name
        path.touch(mode=0o600)
        path.write_bytes(data)
    return Credentials(folder / "ca.crt", folder / "tls.crt", folder / "tls.key", folder / "token")
