"""The self-signed path at start: one identity for all replicas, its CA in the webhook config.

The first replica to start makes the CA and serving certificate and creates the Secret; the
others find it (a create that loses the race gets 409 and reads the winner's). A Secret that no
longer fits (names changed, close to its end, unreadable) is replaced under its
resourceVersion, so two replicas renewing at once cannot both win. Then every webhook of our
MutatingWebhookConfiguration gets the CA as its `caBundle`, through a JSON patch whose `test`
operations fail (422) if the webhooks moved meanwhile, which is then read again and retried.
"""

from __future__ import annotations

import base64
import datetime
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.runtime.http.certificates import ServingIdentity, issue, still_serves
from hostaffinity.runtime.kube.client import KubeClient, ResourceRef

_log = logging.getLogger(__name__)
CA_KEY: Final = "ca.crt"
CERT_KEY: Final = "tls.crt"
PRIVATE_KEY: Final = "tls.key"
WEBHOOK_CONFIGURATIONS: Final = ResourceRef(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"
)
PATCH_ATTEMPTS: Final = 5
Clock = Callable[[], datetime.datetime]


class RegistrationError(RuntimeError):
    """The identity or the caBundle could not be settled; the message says which and why."""


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _identity(secret: dict[str, Any]) -> ServingIdentity | None:
    data = secret.get("data") or {}
    try:
        return ServingIdentity(
            *(base64.b64decode(data[key]) for key in (CA_KEY, CERT_KEY, PRIVATE_KEY))
        )
    except (KeyError, TypeError, ValueError):
        return None


def _secret(name: str, identity: ServingIdentity, resource_version: str = "") -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {"app.kubernetes.io/part-of": "hostaffinity"},
    }
    if resource_version:
        metadata["resourceVersion"] = resource_version
    blobs = (identity.ca_pem, identity.cert_pem, identity.key_pem)
    data = {
        key: base64.b64encode(blob).decode("ascii")
        for key, blob in zip((CA_KEY, CERT_KEY, PRIVATE_KEY), blobs, strict=True)
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "kubernetes.io/tls",
        "data": data,
    }


def ca_bundle_patch(configuration: dict[str, Any], ca_pem: bytes) -> list[dict[str, Any]]:
    """JSON patch setting every webhook's caBundle, guarded by each webhook's name."""
    bundle = base64.b64encode(ca_pem).decode("ascii")
    operations: list[dict[str, Any]] = []
    for position, webhook in enumerate(configuration.get("webhooks") or []):
        if (webhook.get("clientConfig") or {}).get("caBundle") == bundle:
            continue
        path = f"/webhooks/{position}"
        operations.append({"op": "test", "path": f"{path}/name", "value": webhook["name"]})
        operations.append({"op": "add", "path": f"{path}/clientConfig/caBundle", "value": bundle})
    return operations


class WebhookRegistration:
    """Settles the serving identity and writes its CA into the webhook configuration."""

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        secret_name: str,
        configuration_name: str,
        hostnames: Sequence[str],
        clock: Clock = _utcnow,
    ) -> None:
        self._client = client
        self._secrets = ResourceRef("", "v1", "secrets", namespace)
        self._secret_name = secret_name
        self._configuration_name = configuration_name
        self._hostnames = list(hostnames)
        self._clock = clock

    async def _read_secret(self) -> dict[str, Any] | None:
        try:
            body = await self._client.request("GET", self._secrets.path(self._secret_name))
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        secret: dict[str, Any] = json.loads(body)
        return secret

    def _fits(self, secret: dict[str, Any] | None) -> ServingIdentity | None:
        identity = None if secret is None else _identity(secret)
        if identity is not None and still_serves(identity, self._hostnames, self._clock()):
            return identity
        return None

    async def serving_identity(self) -> ServingIdentity:
        """The identity every replica serves with: the Secret's, or a new one stored there."""
        existing = await self._read_secret()
        kept = self._fits(existing)
        if kept is not None:
            return kept
        identity = issue(self._hostnames, self._clock())
        try:
            if existing is None:
                body = _secret(self._secret_name, identity)
                await self._client.request("POST", self._secrets.path(), body=body)
                _log.info("created webhook serving certificate in Secret %s", self._secret_name)
            else:
                version = existing["metadata"]["resourceVersion"]
                body = _secret(self._secret_name, identity, version)
                await self._client.request("PUT", self._secrets.path(self._secret_name), body=body)
                _log.info("renewed webhook serving certificate in Secret %s", self._secret_name)
        except ApiException as error:
            if error.status != 409:
                raise
            winner = self._fits(await self._read_secret())
            if winner is None:
                raise RegistrationError(
                    f"Secret {self._secret_name} changed under us and does not fit"
                ) from error
            return winner
        return identity

    async def publish_ca(self, ca_pem: bytes) -> None:
        """Write the CA into every webhook of our configuration (retrying if it moved)."""
        path = WEBHOOK_CONFIGURATIONS.path(self._configuration_name)
        for _ in range(PATCH_ATTEMPTS):
            configuration = json.loads(await self._client.request("GET", path))
            operations = ca_bundle_patch(configuration, ca_pem)
            if not operations:
                return
            try:
                await self._client.request(
                    "PATCH", path, body=operations, content_type="application/json-patch+json"
                )
            except ApiException as error:
                if error.status not in (409, 422):
                    raise
                continue
            _log.info("caBundle written into %s", self._configuration_name)
            return
        raise RegistrationError(f"{self._configuration_name} kept changing; caBundle not written")
