"""Serving certificates: a self-signed CA and the certificate it signs, for the webhook and
for the bus (NATS clients and routes).

The API server calls admission webhooks over HTTPS only and verifies the server against the
`caBundle` of the webhook configuration. Where cert-manager runs, it issues the certificate into
a Secret and injects the CA (k8s/components/cert-manager). Elsewhere the service makes its own,
as kopf does for its webhooks (nolar/kopf kopf/_kits/webhooks.py WebhookServer._build_ssl: a
self-signed certificate for the server's names, whose PEM becomes the caBundle). Unlike kopf's
single operator process, several replicas serve here, so the CA and certificate are made once
and kept in a Secret they all read (registration.py); this module is the pure crypto.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY = datetime.timedelta(days=3650)
SERVING_VALIDITY = datetime.timedelta(days=365)
# Made again at a start this close to the serving certificate's end.
RENEW_BEFORE = datetime.timedelta(days=30)
# Clocks of the API server and this pod may differ a little.
CLOCK_SKEW = datetime.timedelta(minutes=5)
CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True, content_commitment=False, key_encipherment=False,
    data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
    encipher_only=False, decipher_only=False,
)  # fmt: skip


@dataclass(frozen=True)
class ServingIdentity:
    """PEM blobs: the CA for the caBundle, and the serving certificate with its key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def service_hostnames(service: str, namespace: str) -> list[str]:
    """The names the API server may use for a Service-referenced webhook."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def issue(
    hostnames: Sequence[str],
    now: datetime.datetime,
    *,
    ca_name: str = "hostaffinity-webhook-ca",
    client_auth: bool = False,
) -> ServingIdentity:
    """A new CA and a serving certificate for `hostnames` (DNS names or IP addresses).

    With `client_auth` the certificate may also present itself as a client: NATS routes are
    mutual TLS, each server both dials and accepts with the same certificate.
    """
    if not hostnames:
        raise ValueError("a serving certificate needs at least one hostname")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    issuer = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    usages = [ExtendedKeyUsageOID.SERVER_AUTH]
    if client_auth:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    ca = (
        x509.CertificateBuilder()
        .subject_name(issuer)
        .issuer_name(issuer)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(CA_KEY_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostnames[0])]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + SERVING_VALIDITY)
        .add_extension(x509.SubjectAlternativeName([_san(n) for n in hostnames]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return ServingIdentity(ca.public_bytes(pem), cert.public_bytes(pem), _key_pem(key))


def still_serves(
    identity: ServingIdentity, hostnames: Sequence[str], now: datetime.datetime
) -> bool:
    """Whether a kept identity still fits: it parses, the certificate names every hostname,
    and it is not within RENEW_BEFORE of its end."""
    try:
        cert = x509.load_pem_x509_certificate(identity.cert_pem)
        x509.load_pem_x509_certificate(identity.ca_pem)
        serialization.load_pem_private_key(identity.key_pem, password=None)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, x509.ExtensionNotFound):
        return False
    covered = all(_san(n) in names for n in hostnames)
    return covered and cert.not_valid_after_utc - RENEW_BEFORE > now


def server_context(identity: ServingIdentity) -> ssl.SSLContext:
    """A TLS server context for the identity (ssl loads key material from files only, so it
    goes through a private temporary directory that is removed right after)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory(prefix="hostaffinity-tls-") as directory:
        cert, key = Path(directory, "tls.crt"), Path(directory, "tls.key")
        cert.write_bytes(identity.cert_pem)
        key.touch(mode=0o600)
        key.write_bytes(identity.key_pem)
        context.load_cert_chain(cert, key)
    return context
