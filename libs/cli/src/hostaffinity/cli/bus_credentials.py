"""The bus's secrets: one nkey per identity and the TLS material of the NATS servers.

Made once and kept: locally as files under the dev state folder (`<identity>.nk`, the seed a
client signs with, and `nats-server.env`, the public keys the server checks against), in
Kubernetes as two Secrets (`hostaffinity-nats-identities`: `<identity>.nk` and `<identity>.pub`
for each identity; `hostaffinity-nats-tls`: CA, server certificate and key). Nothing existing is
replaced, so running the step again is safe and a restarted server keeps accepting the seeds its
clients hold; an identity a newer release adds is added beside the existing ones.
"""

from __future__ import annotations

import base64
import datetime
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import nkeys

from hostaffinity.cli.bus_access import IDENTITIES
from hostaffinity.cli.bus_subscribers import LocalSubscribers
from hostaffinity.runtime.http.certificates import ServingIdentity, issue

IDENTITIES_SECRET: Final = "hostaffinity-nats-identities"
TLS_SECRET: Final = "hostaffinity-nats-tls"
SERVER_ENV_FILE: Final = "nats-server.env"
SEED_SUFFIX: Final = ".nk"
PUBLIC_SUFFIX: Final = ".pub"
NATS_SERVICE: Final = "nats"
NATS_HEADLESS_SERVICE: Final = "nats-headless"
_SEED_BYTES: Final = 32


def new_user_seed() -> bytes:
    """A fresh user nkey seed (`SU…`), from 32 random bytes."""
    return bytes(nkeys.encode_seed(os.urandom(_SEED_BYTES), nkeys.PREFIX_BYTE_USER))


def public_key(seed: bytes) -> str:
    """The public key (`U…`) of a user seed: what the server is told."""
    return bytes(nkeys.from_seed(bytearray(seed)).public_key).decode()


# What `kubectl port-forward svc/nats 4222` is dialled by: docs/install.md's tls://127.0.0.1:4222.
LOOPBACK_NAMES: Final = ("localhost", "127.0.0.1", "::1")


def server_hostnames(
    namespace: str, service: str = NATS_SERVICE, headless: str = NATS_HEADLESS_SERVICE
) -> list[str]:
    """Every name a client or a route may dial a NATS server by: the client Service, the
    headless Service, each pod of the StatefulSet through it (`nats-0.nats-headless...`: one
    DNS label, so one wildcard each), and the loopback names and addresses of a port-forward
    (the fleet hub's servers: its own Services, fleet_registry.py)."""
    names = []
    for suffix in ("", f".{namespace}", f".{namespace}.svc", f".{namespace}.svc.cluster.local"):
        names += [f"{service}{suffix}", f"{headless}{suffix}", f"*.{headless}{suffix}"]
    return [*names, *LOOPBACK_NAMES]


def server_tls(hostnames: Sequence[str], now: datetime.datetime | None = None) -> ServingIdentity:
    """A CA and the certificate every NATS server presents to clients and to each other (routes
    are mutual TLS, so it is also a client certificate)."""
    moment = now or datetime.datetime.now(datetime.UTC)
    return issue(hostnames, moment, ca_name="hostaffinity-nats-ca", client_auth=True)


def write_local_credentials(directory: Path, owner: int | None = None) -> dict[str, Path]:
    """`<identity>.nk` for every identity that has none yet, the server's environment file
    from all of them and the servers' subscribers.conf (bus_subscribers.py); returns the seed
    files by identity. With `owner` (a uid; root only) the
    files are handed to it: compose writes them as root into a fresh volume and the services
    read them as uid 65532."""
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    for who in IDENTITIES:
        path = directory / f"{who.name}{SEED_SUFFIX}"
        if not path.exists():
            path.touch(mode=0o600)
            path.write_bytes(new_user_seed() + b"\n")
        files[who.name] = path
    keys = {name: public_key(path.read_bytes().strip()) for name, path in files.items()}
    (directory / SERVER_ENV_FILE).write_text(server_environment(keys), encoding="utf-8")
    # The servers include subscribers.conf: rendered again by this release's table.
    subscribers = LocalSubscribers(directory)
    subscribers.save(subscribers.load())
    if owner is not None:
        for path in (directory, *files.values()):
            os.chown(path, owner, owner)
    return files


def server_environment(public_keys: Mapping[str, str]) -> str:
    """`NAME=value` lines (shell- and compose-readable) of the server's public-key variables."""
    lines = [f"{who.public_key_variable}={public_keys[who.name]}" for who in IDENTITIES]
    return "\n".join(lines) + "\n"


def _encoded(values: Mapping[str, str | bytes]) -> dict[str, str]:
    return {
        key: base64.b64encode(value.encode() if isinstance(value, str) else value).decode()
        for key, value in values.items()
    }


def secret_manifest(name: str, namespace: str, values: Mapping[str, str | bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "hostaffinity"},
        },
        "type": "Opaque",
        "data": _encoded(values),
    }


def identities_secret(namespace: str) -> dict[str, Any]:
    return secret_manifest(IDENTITIES_SECRET, namespace, new_identities(set()))


def new_identities(present: set[str]) -> dict[str, str | bytes]:
    """A fresh seed and its public key for every identity whose seed is not among the Secret
    keys `present` (all of them for a new Secret; an upgrade's new identities for an old one)."""
    values: dict[str, str | bytes] = {}
    for who in IDENTITIES:
        if f"{who.name}{SEED_SUFFIX}" in present:
            continue
        seed = new_user_seed()
        values[f"{who.name}{SEED_SUFFIX}"] = seed
        values[f"{who.name}{PUBLIC_SUFFIX}"] = public_key(seed)
    return values


def encoded(values: Mapping[str, str | bytes]) -> dict[str, str]:
    """Secret `data` values: base64 of the bytes."""
    return _encoded(values)


def tls_secret(namespace: str) -> dict[str, Any]:
    bundle = server_tls(server_hostnames(namespace))
    values = {"ca.crt": bundle.ca_pem, "tls.crt": bundle.cert_pem, "tls.key": bundle.key_pem}
    return secret_manifest(TLS_SECRET, namespace, values)
