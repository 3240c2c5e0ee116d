"""Raw JSON calls through kubernetes_asyncio's ApiClient: its config, auth and transport, but
none of its generated models (too slow and too big for the hot path; see ARCHITECTURE.md).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.runtime.process.config import KubernetesSettings

# Set in every pod by the kubelet; its presence means in-cluster credentials are mounted.
SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"


@dataclass(frozen=True)
class ResourceRef:
    """Where a resource lives in the REST tree (`namespace=None` means all namespaces)."""

    group: str
    version: str
    plural: str
    namespace: str | None = None

    def path(self, name: str | None = None) -> str:
        """The collection's path, or one object's; names are escaped, so `x?dryRun=All` stays a
        name and never becomes a query (nor `a/b` a subresource)."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        scope = f"/namespaces/{_segment(self.namespace)}" if self.namespace else ""
        return f"{root}{scope}/{self.plural}" + (f"/{_segment(name)}" if name else "")


def _segment(value: str) -> str:
    return quote(value, safe="")


NODES: Final = ResourceRef("", "v1", "nodes")
PODS: Final = ResourceRef("", "v1", "pods")
NAMESPACES: Final = ResourceRef("", "v1", "namespaces")


# A call that failed on the way: refused, reset or closed mid-answer (aiohttp raises these as
# ClientError subclasses, and some as plain OSError such as ConnectionResetError), or past
# its time limit. Transient: every caller retries it, none ends on it.
TRANSPORT_ERRORS: Final = (aiohttp.ClientError, OSError, TimeoutError)
# Every way a call can fail: the server's answer (ApiException) or the transport.
CALL_ERRORS: Final = (ApiException, *TRANSPORT_ERRORS)


def api_error(status: int, body: bytes) -> ApiException:
    """An ApiException carrying the server's Status body, like the generated client raises."""
    error = ApiException(status=status, reason=_reason(body))
    error.body = body
    return error


def _reason(body: bytes) -> str:
    try:
        parsed = json.loads(body)
    except ValueError:
        return ""
    return str(parsed.get("reason", "")) if isinstance(parsed, dict) else ""


class KubeClient:
    """JSON in, JSON out; errors as `ApiException` with the HTTP status.

    Every call has a client-side limit (`KubernetesSettings`): kubernetes_asyncio's default
    `aiohttp.ClientTimeout()` has none, so a hung API server would hold a caller for ever. The
    limit of a whole call is asyncio's (`asyncio.timeout`), not aiohttp's `total`: on Python
    3.11, aiohttp 3.14 enters its `total` timer twice while the answer's headers are awaited, so
    a cancellation that comes as the timer expires is undone with it and a TimeoutError raised
    instead, which every caller retries (docs/reliability.md, "Cancellation under Python 3.11").
    """

    def __init__(self, api: ApiClient, settings: KubernetesSettings | None = None) -> None:
        self._api = api
        self.settings = settings or KubernetesSettings()
        self._request_timeout = aiohttp.ClientTimeout(
            sock_connect=self.settings.connect_timeout_seconds
        )

    @property
    def server(self) -> str:
        """The API server's address, as the kubeconfig (or --server) names it."""
        return str(self._api.configuration.host)

    async def _send(
        self,
        method: str,
        path: str,
        query: dict[str, str] | None,
        body: Any,
        content_type: str,
        client_timeout: aiohttp.ClientTimeout | None,
    ) -> aiohttp.ClientResponse:
        response: aiohttp.ClientResponse = await self._api.call_api(
            path,
            method,
            query_params=list((query or {}).items()),
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=client_timeout,
        )
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> bytes:
        """The raw JSON body of a 2xx answer; anything else raises ApiException."""
        async with asyncio.timeout(self.settings.request_timeout_seconds):
            response = await self._send(
                method, path, query, body, content_type, self._request_timeout
            )
            async with response:
                data = await response.read()
        if not 200 <= response.status <= 299:
            raise api_error(response.status, data)
        return data

    @asynccontextmanager
    async def stream(self, path: str, query: dict[str, str]) -> AsyncIterator[aiohttp.StreamReader]:
        """An open watch: newline-delimited JSON events until the server ends the stream.

        The server is asked to end it after `watch_timeout_seconds`; reading gives up when
        nothing arrived for that long plus `watch_read_margin_seconds`.
        """
        watch_s = self.settings.watch_timeout_seconds
        query = {"timeoutSeconds": str(watch_s), **query}
        timeout = aiohttp.ClientTimeout(
            sock_connect=self.settings.connect_timeout_seconds,
            sock_read=watch_s + self.settings.watch_read_margin_seconds,
        )
        response = await self._send("GET", path, query, None, "application/json", timeout)
        async with response:
            if response.status != 200:
                raise api_error(response.status, await response.read())
            yield response.content


async def api_client(settings: KubernetesSettings) -> ApiClient:
    """An ApiClient from the configured kubeconfig, else in-cluster, else ~/.kube/config.

    kubernetes_asyncio does the loading (auth plugins, certificates, token refresh); we only
    choose the source, so the product talks to a real API server the usual way.
    """
    configuration = Configuration()
    if settings.kubeconfig is None and os.environ.get(SERVICE_HOST_ENV):
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        await k8s_config.load_kube_config(
            config_file=settings.kubeconfig,
            context=settings.context,
            client_configuration=configuration,
        )
    if settings.server is not None:
        configuration.host = settings.server
    return ApiClient(configuration)
