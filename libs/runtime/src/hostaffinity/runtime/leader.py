"""Leader election on a `coordination.k8s.io/v1` Lease, the way client-go's leaderelection does
it: create the Lease, renew it with the resourceVersion read (a 409 means someone else wrote
first), take it over once it has not changed for a whole lease duration by *our* clock, and
release it on stop. Times are MicroTime with exactly six fractional digits: `isoformat()` drops
them when microsecond == 0 and the server then answers 400 (fixtures README, finding 6).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.runtime.kube import KubeClient, ResourceRef

log = logging.getLogger(__name__)
OnLost = Callable[[], Awaitable[None] | None]


def micro_time(moment: datetime | None = None) -> str:
    """A MicroTime the server accepts: UTC, always six fractional digits."""
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """`async with LeaderElector(...) as elector: await elector.wait_until_leader()`."""

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        on_lost: OnLost | None = None,
    ) -> None:
        self._client = client
        self._leases = ResourceRef("coordination.k8s.io", "v1", "leases", namespace)
        self._name = name
        self.identity = identity
        self._duration = lease_duration_s
        self._renew_deadline = renew_deadline_s
        self._retry = retry_period_s
        self._on_lost = on_lost
        self._leading = asyncio.Event()
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._renewed_at = 0.0
        self._task: asyncio.Task[None] | None = None

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    async def wait_until_leader(self) -> None:
        await self._leading.wait()

    async def __aenter__(self) -> LeaderElector:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"lease-{self._name}")

    async def stop(self, *, release: bool = True) -> None:
        """Stop campaigning; give the Lease up at once so a successor need not wait it out."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.is_leader and release:
            with contextlib.suppress(ApiException, aiohttp.ClientError, TimeoutError, OSError):
                await self._release()
        self._leading.clear()

    async def _loop(self) -> None:
        while True:
            try:
                leading = await self._try_acquire_or_renew()
            except (ApiException, aiohttp.ClientError, TimeoutError, OSError) as exc:
                log.warning("lease %s: %s", self._name, exc)
                leading = self.is_leader and (
                    time.monotonic() - self._renewed_at < self._renew_deadline
                )
            await self._set_leading(leading)
            await asyncio.sleep(self._retry)

    async def _set_leading(self, leading: bool) -> None:
        if leading and not self.is_leader:
            log.info("%s became leader of %s", self.identity, self._name)
            self._leading.set()
        elif not leading and self.is_leader:
            log.warning("%s lost leadership of %s", self.identity, self._name)
            self._leading.clear()
            if self._on_lost is not None:
                result = self._on_lost()
                if result is not None:
                    await result

    async def _try_acquire_or_renew(self) -> bool:
        try:
            lease = json.loads(await self._client.request("GET", self._leases.path(self._name)))
        except ApiException as exc:
            if exc.status != 404:
                raise
            return await self._create()
        spec: dict[str, Any] = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, str(spec.get("renewTime")))
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        duration = float(spec.get("leaseDurationSeconds") or self._duration)
        expired = time.monotonic() - self._observed_at > duration
        if holder and holder != self.identity and not expired:
            return False
        now = micro_time()
        if holder != self.identity:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            spec["acquireTime"] = now
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=int(self._duration),
            renewTime=now,
        )
        return await self._write(lease)

    async def _create(self) -> bool:
        now = micro_time()
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self._name, "namespace": self._leases.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self._duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        try:
            await self._client.request("POST", self._leases.path(), body=lease)
        except ApiException as exc:
            if exc.status == 409:  # AlreadyExists: a rival created it first
                return False
            raise
        self._renewed_at = time.monotonic()
        return True

    async def _write(self, lease: dict[str, Any]) -> bool:
        """PUT with the resourceVersion we read: 409 Conflict means we lost the race."""
        try:
            await self._client.request("PUT", self._leases.path(self._name), body=lease)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        self._renewed_at = time.monotonic()
        return True

    async def _release(self) -> None:
        lease = json.loads(await self._client.request("GET", self._leases.path(self._name)))
        spec = lease.get("spec") or {}
        if spec.get("holderIdentity") != self.identity:
            return
        now = micro_time()
        spec.update(holderIdentity=None, leaseDurationSeconds=1, renewTime=now, acquireTime=now)
        lease["spec"] = spec
        await self._write(lease)
