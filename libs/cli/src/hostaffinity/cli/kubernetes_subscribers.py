"""Outside subscribers in Kubernetes: the registry and the servers' subscribers.conf in the
Secret `hostaffinity-nats-subscribers`, which every NATS pod mounts (not by subPath, so the
kubelet rewrites the file in place) and whose reloader container signals the server; each
subscriber's seed in a Secret of its own, `hostaffinity-subscriber-<name>` (keys `seed.nk` and
`ca.crt`, what its Deployment mounts to connect).

The `bus secrets` Job creates the registry Secret empty and renders the file again from the
registry on every run, so a new release's table reaches the servers with the release.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Final

from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.cli.bus_credentials import TLS_SECRET, new_user_seed, secret_manifest
from hostaffinity.cli.bus_subscribers import (
    REGISTRY_FILE,
    SUBSCRIBERS_CONF,
    Subscriber,
    decode_registry,
    encode_registry,
    render_subscribers_conf,
)
from hostaffinity.runtime.kube.client import KubeClient, ResourceRef

SUBSCRIBERS_SECRET: Final = "hostaffinity-nats-subscribers"
SEED_KEY: Final = "seed.nk"
CA_KEY: Final = "ca.crt"
HTTP_NOT_FOUND: Final = 404


def subscribers_secret(namespace: str, subscribers: list[Subscriber]) -> dict[str, Any]:
    """The registry Secret, as the NATS pods mount it."""
    return secret_manifest(SUBSCRIBERS_SECRET, namespace, _files(subscribers))


def _files(subscribers: list[Subscriber]) -> dict[str, str | bytes]:
    return {
        REGISTRY_FILE: encode_registry(subscribers),
        SUBSCRIBERS_CONF: render_subscribers_conf(subscribers),
    }


def seed_secret_name(name: str) -> str:
    return f"hostaffinity-subscriber-{name}"


class KubernetesSubscribers:
    """The registry, the servers' file and the seeds, as Secrets of one namespace."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.secrets = ResourceRef("", "v1", "secrets", namespace)

    async def _read(self, name: str) -> dict[str, bytes] | None:
        try:
            stored = json.loads(await self.kube.request("GET", self.secrets.path(name)))
        except ApiException as error:
            if error.status == HTTP_NOT_FOUND:
                return None
            raise
        return {key: base64.b64decode(value) for key, value in (stored.get("data") or {}).items()}

    async def load(self) -> list[Subscriber]:
        data = await self._read(SUBSCRIBERS_SECRET)
        if data is None:
            raise RuntimeError(
                f"no Secret {self.namespace}/{SUBSCRIBERS_SECRET}: has the Job "
                "hostaffinity-bus-secrets (`hostaffinity bus secrets`) run?"
            )
        return decode_registry(data.get(REGISTRY_FILE, b"[]"))

    async def save(self, subscribers: list[Subscriber]) -> bool:
        """Registry and file in one merge patch; False when nothing changed."""
        wanted = {key: _bytes(value) for key, value in _files(subscribers).items()}
        if await self._read(SUBSCRIBERS_SECRET) == wanted:
            return False
        body = {"data": {k: base64.b64encode(v).decode() for k, v in wanted.items()}}
        await self.kube.request(
            "PATCH",
            self.secrets.path(SUBSCRIBERS_SECRET),
            body=body,
            content_type="application/merge-patch+json",
        )
        return True

    async def seed(self, name: str) -> bytes:
        """The subscriber's seed, from its Secret; a new one (with the bus's CA) if it has none."""
        if (kept := await self.kept_seed(name)) is not None:
            return kept
        seed = new_user_seed()
        values: dict[str, str | bytes] = {SEED_KEY: seed}
        tls = await self._read(TLS_SECRET)
        if tls is not None and CA_KEY in tls:
            values[CA_KEY] = tls[CA_KEY]
        secret = secret_manifest(seed_secret_name(name), self.namespace, values)
        secret["metadata"]["labels"]["hostaffinity.io/subscriber"] = name
        await self.kube.request("POST", self.secrets.path(), body=secret)
        return seed

    async def kept_seed(self, name: str) -> bytes | None:
        stored = await self._read(seed_secret_name(name))
        return stored[SEED_KEY].strip() if stored is not None and SEED_KEY in stored else None

    async def forget(self, name: str) -> None:
        try:
            await self.kube.request("DELETE", self.secrets.path(seed_secret_name(name)))
        except ApiException as error:
            if error.status != HTTP_NOT_FOUND:
                raise

    def where(self, name: str) -> str:
        return f"Secret {self.namespace}/{seed_secret_name(name)}, key {SEED_KEY} (and {CA_KEY})"


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value
