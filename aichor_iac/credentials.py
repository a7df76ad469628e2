"""What the stack makes for an experiment's progress receiver (issue 52): a CA, a certificate
for the receiver's host names signed by it, its key and the clients' token, as Pulumi
resources (pulumi-tls, pulumi-random) kept in the stack's state; one set per experiment, or
per sweep for all its trials."""

from __future__ import annotations

import pulumi
import pulumi_random
import pulumi_tls

from . import planning
from .experiment.model import Experiment
from .k8s import progress
from .k8s.context import Context
from .settings import Settings

# By the experiment Secret's key: the CA's and the certificate's PEM, the key's, the token,
# each marked secret
Credentials = dict[str, pulumi.Output[str]]

# How long the progress receiver's CA and certificate are valid: longer than any experiment's
# stack lives, shorter than a forgotten one's.
PROGRESS_CERT_HOURS = 24 * 365


def progress_credentials(
    name: str, hosts: list[str], opts: pulumi.ResourceOptions | None = None
) -> Credentials:
    """The progress receiver's CA, its certificate for `hosts` signed by that CA, its key and
    the clients' token (pulumi-tls and pulumi-random: made once per stack, kept in its state)."""
    ca_key = pulumi_tls.PrivateKey(f"{name}-progress-ca-key", algorithm="ECDSA", opts=opts)
    ca = pulumi_tls.SelfSignedCert(
        f"{name}-progress-ca",
        private_key_pem=ca_key.private_key_pem,
        is_ca_certificate=True,
        validity_period_hours=PROGRESS_CERT_HOURS,
        allowed_uses=["cert_signing", "digital_signature"],
        subject=pulumi_tls.SelfSignedCertSubjectArgs(common_name=f"{name} progress CA"),
        opts=opts,
    )
    key = pulumi_tls.PrivateKey(f"{name}-progress-key", algorithm="ECDSA", opts=opts)
    request = pulumi_tls.CertRequest(
        f"{name}-progress-request",
        private_key_pem=key.private_key_pem,
        dns_names=hosts,
        subject=pulumi_tls.CertRequestSubjectArgs(common_name=hosts[0][:64]),
        opts=opts,
    )
    cert = pulumi_tls.LocallySignedCert(
        f"{name}-progress-cert",
        cert_request_pem=request.cert_request_pem,
        ca_private_key_pem=ca_key.private_key_pem,
        ca_cert_pem=ca.cert_pem,
        validity_period_hours=PROGRESS_CERT_HOURS,
        allowed_uses=["digital_signature", "key_encipherment", "server_auth"],
        opts=opts,
    )
    token = pulumi_random.RandomPassword(
        f"{name}-progress-token", length=48, special=False, opts=opts
    )
    found = {
        progress.CA: ca.cert_pem,
        progress.CERT: cert.cert_pem,
        progress.KEY: key.private_key_pem,
        progress.TOKEN: token.result,
    }
    return {k: pulumi.Output.secret(v) for k, v in found.items()}


def sweep_credentials(named: dict[str, Experiment], settings: Settings) -> dict[str, Credentials]:
    """One set of progress credentials per sweep of a stack, for all its trials (the
    certificate names each trial's receiver): a sweep of 1,000 trials makes 6 resources for
    them, not 6,000. A trial's clients could post to another trial's receiver with it: the
    trials are one user's, with one template."""
    if not settings.progress:
        return {}
    found = sweep_hosts(named, settings)
    return {sweep: progress_credentials(sweep, hosts) for sweep, hosts in found.items()}


def sweep_hosts(named: dict[str, Experiment], settings: Settings) -> dict[str, list[str]]:
    """Each sweep's receivers' hosts, every trial's. A sweep that learns names all its trials,
    the later ones before their values are known (its certificate stays the same as they
    come): each is its first known trial's entry point under the trial's name."""
    hosts: dict[str, list[str]] = {}
    for name, manifest in named.items():
        if (trial := manifest.trial) is None or (trial.learns and trial.sweep in hosts):
            continue
        names = trial.names or (name,)
        hosts.setdefault(trial.sweep, []).extend(
            progress.host(Context(planning.blueprint(manifest, settings, n))) for n in names
        )
    return hosts
