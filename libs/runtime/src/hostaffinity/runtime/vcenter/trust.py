"""Whether we trust vCenter's certificate, and one line saying what to set when we do not.

A real vCenter serves a certificate its own CA (the VMCA) signed, which no system CA store holds:
the site gives us that CA (`vcenters[i].ca_file`) or pins the certificate by its SHA-256
thumbprint (`vcenters[i].thumbprint`). Both live in the `ssl` context pyVmomi opens every
connection with.

The pin is checked by the context itself, right after each handshake and before a byte of a
request (the login's password among them) is sent. pyVmomi's own `thumbprint=` is no help: it
is consulted only when CA verification has failed, and then turns verification off on the
shared context for every later connection (pyVmomi 9 SoapAdapter.py `_Connect`).

When trust fails, the error names the setting to change, by the key the config loader reads
(`vcenters[0].ca_file`; where only the item is at hand, as in a session, `vcenters[name=<its
name>].ca_file`), and carries the thumbprint the server presents, read over an unverified
handshake that sends nothing: the operator compares it with vCenter's own (Administration >
Certificate Management) before pinning it.
"""

from __future__ import annotations

import hashlib
import re
import socket
import ssl
from pathlib import Path
from typing import Any, Final

from hostaffinity.runtime.process.config import ConfigError
from hostaffinity.runtime.vcenter.settings import VCenterSettings

_PREFIX: Final = re.compile(r"^sha256:", re.IGNORECASE)
# Where a handshake made only to check or read the certificate gives up.
PROBE_TIMEOUT_SECONDS: Final = 10.0
# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and _IP_ADDRESS_MISMATCH: the certificate is trusted
# but names another host.
_NAME_MISMATCH: Final = frozenset({62, 64})


class VCenterTrustError(ConfigError):
    """vCenter's certificate is not trusted: a setting to change, which the message names.
    Retrying helps only once the setting (or the mounted Secret behind it) changes."""


class ThumbprintMismatch(ssl.SSLError):
    """The server presented a certificate other than the pinned one (an `OSError`, as every
    failed handshake is, so pyVmomi lets it through unchanged)."""


class PinnedContext(ssl.SSLContext):
    """A client context that accepts exactly one certificate, by its SHA-256 thumbprint."""

    pinned: str

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        tls = super().wrap_socket(*args, **kwargs)
        der = tls.getpeercert(binary_form=True)
        if der is None or hashlib.sha256(der).hexdigest() != self.pinned:
            tls.close()
            raise ThumbprintMismatch("the certificate is not the pinned one")
        return tls


def item_key(settings: VCenterSettings, key: str | None) -> str:
    """The key of this vCenter's item in messages: `key` (`vcenters[<index>]`) when the caller
    knows where the item sits, else the item by its name."""
    return key if key is not None else f"vcenters[name={settings.known_as}]"


def ssl_context(settings: VCenterSettings, key: str | None = None) -> ssl.SSLContext | None:
    """The TLS context for https, None for http. Built here so that pyVmomi's own default, which
    skips verification for localhost, never applies. With `ca_file` only that bundle is trusted
    (not the system CAs too), as a site's VMCA root is meant to be; with `thumbprint`, only the
    certificate it names."""
    if settings.protocol == "http":
        return None
    if settings.thumbprint is not None:
        pinned = PinnedContext(ssl.PROTOCOL_TLS_CLIENT)
        pinned.check_hostname = False  # the pin names the certificate; no CA vouches for it
        pinned.verify_mode = ssl.CERT_NONE
        pinned.pinned = pinned_hex(settings.thumbprint)
        return pinned
    try:
        context = ssl.create_default_context(cafile=settings.ca_file)
    except OSError as error:  # ssl.SSLError too: a file that holds no PEM certificate
        raise VCenterTrustError(
            f"vcenter: {item_key(settings, key)}.ca_file ({settings.ca_file}) is not a "
            f"readable PEM CA bundle: "
            f"{error.strerror or error}"
        ) from error
    if not settings.verify_tls:  # simulators only
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def check_ca_file(settings: VCenterSettings, key: str | None = None) -> None:
    """The configured CA bundle exists and holds PEM certificates: a Secret not mounted is
    named as such, not taken for an untrusted certificate at the first login. A pinned
    thumbprint replaces the bundle, which need not exist then."""
    if settings.thumbprint is not None:
        return
    if settings.ca_file is not None and not Path(settings.ca_file).is_file():
        item = item_key(settings, key)
        raise ConfigError(
            f"configured file missing: {item}.ca_file ({settings.ca_file}); or pin the "
            f"certificate with {item}.thumbprint"
        )
    ssl_context(settings, key)


def pinned_hex(thumbprint: str) -> str:
    """A configured thumbprint as compared: lower-case hex, no prefix or colons."""
    return _PREFIX.sub("", thumbprint).replace(":", "").lower()


def thumbprint_of(der: bytes) -> str:
    """`SHA256:AB:CD:…`, the form `vcenters[i].thumbprint` takes and messages print."""
    digest = hashlib.sha256(der).hexdigest().upper()
    return "SHA256:" + ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def handshake(host: str, port: int, context: ssl.SSLContext) -> bytes:
    """The DER certificate the server presents in a TLS handshake under `context`."""
    with (
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_SECONDS) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    if der is None:
        raise ssl.SSLError(f"{host}:{port} presented no certificate")
    return der


def presented_certificate(host: str, port: int) -> bytes:
    """The certificate the server presents, unverified: only ever compared or printed."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return handshake(host, port, context)


def check_trust(settings: VCenterSettings, key: str | None = None) -> None:
    """Handshake with vCenter as a login would and check its certificate, without logging in
    (what `--check-config` runs). Untrusted: `VCenterTrustError`; unreachable: `OSError`
    saying so."""
    context = ssl_context(settings, key)
    if context is None:
        return
    try:
        handshake(settings.host, settings.port, context)
    except (ssl.SSLCertVerificationError, ThumbprintMismatch) as error:
        raise untrusted(settings, error, key) from error
    except OSError as error:
        raise OSError(
            f"vcenter: cannot reach {settings.host}:{settings.port} to check its certificate: "
            f"{error}"
        ) from error


def untrusted(
    settings: VCenterSettings,
    error: ssl.SSLCertVerificationError | ThumbprintMismatch,
    key: str | None = None,
) -> VCenterTrustError:
    """One line: whose certificate, why it is not trusted, which setting to change, and the
    thumbprint the server presents (to compare with vCenter's before pinning it)."""
    address = f"{settings.host}:{settings.port}"
    item = item_key(settings, key)
    try:
        presented = thumbprint_of(presented_certificate(settings.host, settings.port))
    except OSError:
        presented = "SHA256:<its thumbprint>"
    if isinstance(error, ThumbprintMismatch):
        return VCenterTrustError(
            f"vcenter: certificate of {address} has thumbprint {presented}, not the "
            f"{item}.thumbprint {settings.thumbprint}; if vCenter's certificate was replaced, "
            f"set {item}.thumbprint to {presented}"
        )
    if error.verify_code in _NAME_MISMATCH:
        fix = f"set {item}.host to a name the certificate carries"
    else:
        fix = f"set {item}.ca_file to the CA bundle that signed it (vCenter's /certs/download.zip)"
    reason = error.verify_message.rstrip(".")
    return VCenterTrustError(
        f"vcenter: certificate of {address} not trusted ({reason}); {fix}, "
        f"or {item}.thumbprint to {presented}"
    )
