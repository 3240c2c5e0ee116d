"""`KubeDouble`: start/stop the fake apiserver and the test hooks that reach around HTTP."""

from __future__ import annotations

import base64
import copy
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from aiohttp import web
from kubernetes_asyncio.client import Configuration

from . import admission, fieldsets
from .auth import User
from .faults import ObjectFault, PatchHold
from .journal import Exchange
from .registry.serviceaccounts import register_service_account
from .resources import RESOURCES, Resource, for_kind, lookup
from .server import KubeApiServer
from .store import Store, key_of

if TYPE_CHECKING:
    from hostaffinity.runtime.http.certificates import ServingIdentity

    from .webhooks import Endpoints, WebhookCall

_SYSTEM_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")


class KubeDouble:
    """A Kubernetes API test double on a loopback port.

    `time_scale` shrinks every server-side duration (watch timeouts, bookmark timing, the 3 s
    consistent-read wait) so recorded exchanges replay fast. `watch_progress=False` behaves like
    the etcd 3.4.23 recordings (no RequestWatchProgress), the default like etcd 3.6.
    `merges_label_keys=False` stores a created pod's affinity terms as a v1.28 to v1.30 server
    does, its matchLabelKeys / mismatchLabelKeys dropped, not merged (label_keys.py).
    """

    def __init__(
        self,
        *,
        admin_token: str = "hostaffinity-admin-token",
        time_scale: float = 1.0,
        watch_progress: bool = True,
        history_limit: int = 10_000,
        merges_label_keys: bool = True,
    ) -> None:
        self.token = admin_token
        self.store = Store(history_limit)
        admin = User("kubernetes-admin", ("kubeadm:cluster-admins", "system:authenticated"), True)
        self.server = KubeApiServer(
            store=self.store,
            tokens={admin_token: admin},
            time_scale=time_scale,
            watch_progress=watch_progress,
        )
        self.server.merges_label_keys = merges_label_keys
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._tls: ServingIdentity | None = None
        for name in _SYSTEM_NAMESPACES:
            self.seed(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                manager="kube-apiserver",
            )

    async def start(
        self, host: str = "127.0.0.1", port: int = 0, *, tls: ServingIdentity | None = None
    ) -> None:
        """Serve on `host:port` (0: any free port); over https with `tls`'s certificate, which
        kubectl needs: it sends no bearer token over plain http."""
        self._runner = web.AppRunner(self.server.app(), shutdown_timeout=1.0)
        await self._runner.setup()
        self._tls = tls if tls is not None else self._tls
        context = None
        if self._tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            with tempfile.TemporaryDirectory() as folder:
                cert, key = Path(folder) / "tls.crt", Path(folder) / "tls.key"
                cert.write_bytes(self._tls.cert_pem)
                key.write_bytes(self._tls.key_pem)
                context.load_cert_chain(cert, key)
        site = web.TCPSite(self._runner, host, port, ssl_context=context)
        await site.start()
        bound = self._runner.addresses[0]
        self.url = f"{'https' if context else 'http'}://{bound[0]}:{bound[1]}"

    async def stop(self) -> None:
        self.server.close_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def configuration(self, token: str | None = None) -> Configuration:
        """A kubernetes_asyncio Configuration (host + bearer token) for code under test, on a
        double served over http (over https, use `write_kubeconfig`, which carries the CA)."""
        config = Configuration(host=self.url)
        config.api_key = {"BearerToken": token or self.token}
        config.api_key_prefix = {"BearerToken": "Bearer"}
        return config

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig file for the double, so code under test loads credentials as for real."""
        cluster: dict[str, str] = {"server": self.url}
        if self._tls is not None:
            cluster["certificate-authority-data"] = base64.b64encode(self._tls.ca_pem).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "double", "cluster": cluster}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "double", "context": {"cluster": "double", "user": "admin"}}],
            "current-context": "double",
        }
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    # -- test hooks ---------------------------------------------------------------------------

    def seed(self, obj: dict[str, Any], *, manager: str | None = None) -> dict[str, Any]:
        """Store an object as is (uid, labels, managedFields kept), at the next revision."""
        resource = for_kind(obj["apiVersion"], obj["kind"])
        obj = admission.to_storage(resource, obj)
        admission.check_custom(resource, obj)  # a hand-made KubeVirt object must be a valid one
        if resource.kind == "Namespace":
            admission.normalize(resource, obj)
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj.setdefault("status", {"phase": "Active"})
        if "managedFields" in obj["metadata"]:
            manager = None
        return self.server.commit_new(resource, obj, manager)

    def read(
        self, api_version: str, plural: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """The stored object, bypassing HTTP (a copy)."""
        group, _, version = api_version.rpartition("/")
        resource = lookup(group, version, plural)
        if resource is None:
            raise KeyError(f"{api_version} {plural} is not served")
        return self.store.get(resource.storage_key, (namespace or "", name))

    def write(self, obj: dict[str, Any], *, manager: str = "test-hook") -> dict[str, Any]:
        """Replace a stored object directly, as another client's unconditional update would."""
        resource = for_kind(obj["apiVersion"], obj["kind"])
        obj = copy.deepcopy(obj)
        admission.check_custom(resource, obj)
        old = self.store.get(resource.storage_key, key_of(obj))
        if old is not None and resource.managed_fields:
            obj["metadata"]["managedFields"] = fieldsets.record_update(
                old["metadata"].get("managedFields", []),
                manager=manager,
                api_version=resource.api_version,
                subresource=None,
                old=old,
                new=obj,
                now=admission.now_time(),
            )
        return self.store.write(resource.storage_key, obj)

    def delete(
        self, api_version: str, plural: str, name: str, namespace: str | None = None
    ) -> None:
        group, _, version = api_version.rpartition("/")
        resource = lookup(group, version, plural)
        assert resource is not None
        self.store.delete(resource.storage_key, (namespace or "", name))

    def call_webhooks(
        self, endpoints: Endpoints, on_call: Callable[[WebhookCall], None] = lambda call: None
    ) -> None:
        """From now on, creates go through the stored MutatingWebhookConfigurations, a
        `clientConfig.service` reached at `endpoints(namespace, name)` (webhooks.py)."""
        # Imported here: the double also runs in a service image (compose's API server), which
        # lacks the CEL runtime the webhooks' matchConditions need.
        from .webhooks import MutatingWebhooks

        self.server.mutating = MutatingWebhooks(self.store, endpoints, on_call)

    def record_requests(self) -> list[Exchange]:
        """From now on, every request and its status, in the order they were answered."""
        self.server.journal = []
        return self.server.journal

    def disconnect_watches(self) -> None:
        """End every open watch stream now, as an apiserver restart or LB reset would."""
        self.server.disconnect_watches()

    async def kill(self) -> None:
        """Go away as a SIGKILLed kube-apiserver does: open watches and connections end and new
        ones are refused, while the store (etcd) keeps everything for `revive`."""
        self.server.disconnect_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def revive(self) -> None:
        """Serve again on the same address after `kill`, at the same resourceVersions."""
        host, port = self.url.partition("://")[2].rsplit(":", 1)
        await self.start(host, int(port))

    def compact(self) -> None:
        """Forget the event history: watches and Exact lists from older RVs now get 410."""
        self.store.compact()

    def hold_patches(self, plural: str, name: str, namespace: str | None = None) -> PatchHold:
        """Delay PATCHes of one object until `release()` (core/v1 and other groups alike)."""
        hold = PatchHold()
        for resource in _resources_named(plural):
            self.server.holds[(resource.storage_key, (namespace or "", name))] = hold
        return hold

    def hold_watches(self, plural: str) -> PatchHold:
        """Delay every watch's live events of a resource until `release()`; they then arrive
        back to back, as from an apiserver whose watch cache fell behind under load."""
        hold = PatchHold()
        for resource in _resources_named(plural):
            self.server.watch_holds[resource.storage_key] = hold
        return hold

    def release_watches(self, plural: str) -> None:
        """End `hold_watches` for the resource (releasing what it held)."""
        for resource in _resources_named(plural):
            hold = self.server.watch_holds.pop(resource.storage_key, None)
            if hold is not None:
                hold.release()

    def fault(self, plural: str, name: str, namespace: str | None = None) -> ObjectFault:
        """The fault hook of one object (every verb on its path); healthy until told otherwise."""
        resources = _resources_named(plural)
        key = (resources[0].storage_key, (namespace or "", name))
        fault = self.server.faults.setdefault(key, ObjectFault())
        for resource in resources:
            self.server.faults[(resource.storage_key, (namespace or "", name))] = fault
        return fault

    def service_account_token(self, namespace: str, name: str) -> str:
        """A token for a ServiceAccount with no RBAC permissions (creating the SA if needed)."""
        account = self.store.get("serviceaccounts", (namespace, name))
        if account is None:
            account = self.seed(
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": namespace},
                }
            )
        return register_service_account(self.server.tokens, account)


def _resources_named(plural: str) -> list[Resource]:
    return [r for r in RESOURCES if r.plural == plural]
