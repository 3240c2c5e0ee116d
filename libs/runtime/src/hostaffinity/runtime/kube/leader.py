"""Leader election on a `coordination.k8s.io/v1` Lease, the way client-go's leaderelection does
it: create the Lease, renew it with the resourceVersion read (a 409 means someone else wrote
first), take it over once it has not changed for a whole lease duration by *our* clock, and
release it on stop. Times are MicroTime with exactly six fractional digits: `isoformat()` drops
them when microsecond == 0 and the server then answers 400 (fixtures README, finding 6).

Renewing under a deadline is what keeps two leaders apart: when no renewal has *succeeded* for
`renew_deadline_s`, whether the calls failed or simply hang, the leader steps down (and
`on_lost` runs) before `lease_duration_s` has passed, which is the earliest a rival may take the
Lease over. client-go renews under a RenewDeadline context for the same reason
(k8s.io/client-go/tools/leaderelection/leaderelection.go, `renew`). The deadline counts from
when the last successful renewal was *sent*, never from when its answer came back: the server
may have written it any time in between, and a rival counts from that write.

A write that must come from the leader alone (a DRS reconfigure, an eviction) asks
`ensure_leading()` right before it goes out: the work is cancelled when the Lease is lost, but a
process held off the CPU can come back to a write it decided while leading, after a rival took
over (the hour's soak saw a reconfigure 6.5 s after a 2 s Lease's last renewal).

The holder may also keep annotations of its own on the Lease (`annotations`, read at each write
and dropped on release): the runner's is the replica's readiness, which `hostaffinity status`
reads.

Why not `kubernetes_asyncio.leaderelection`: its renew loop checks the deadline only between
attempts, so one hung call keeps it "leading" for as long as the call hangs; it offers no way to
ask whether this replica leads now; and it writes `str(datetime)` times, not MicroTime.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Final

from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.runtime.kube.client import CALL_ERRORS, KubeClient, ResourceRef
from hostaffinity.schema import utc_timestamp

log = logging.getLogger(__name__)
OnLost = Callable[[], Awaitable[None] | None]
Annotations = Callable[[], Mapping[str, str]]


class LeaseLapsed(Exception):
    """A leader-only write was about to go out after this replica stopped leading."""


def no_fence() -> None:
    """The fence of a service that is not leader-elected: every replica may write."""


# The shortest pause between two failed renewals, however near the deadline.
_MIN_PAUSE_S: Final = 0.05


def _pause_after_failure(retry_s: float, left_s: float) -> float:
    """The pause before trying again after a failed renewal: the retry period, but at most half
    of what is left before the renew deadline, so the tries get closer as it nears. A leader
    whose API server was down (refused, reset) for most of the deadline still renews once the
    server is back, instead of waiting out a full retry period past the deadline: only the
    deadline decides leadership, not where the outage fell between two retries."""
    return max(0.0, min(retry_s, max(left_s / 2, _MIN_PAUSE_S), left_s))


class LeaderElector:
    """`async with LeaderElector(...) as elector: await elector.wait_until_leader()`.

    One elector leads at most once: after stepping down it stops campaigning, and its owner
    (the service runner) ends the process so that a fresh replica campaigns again.
    """

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
        annotations: Annotations | None = None,
    ) -> None:
        if not retry_period_s < renew_deadline_s < lease_duration_s:
            raise ValueError("need retry period < renew deadline < lease duration")
        self._client = client
        self._leases = ResourceRef("coordination.k8s.io", "v1", "leases", namespace)
        self._name = name
        self.identity = identity
        self._duration = lease_duration_s
        self._renew_deadline = renew_deadline_s
        self._retry = retry_period_s
        self._on_lost = on_lost
        self._annotations = annotations
        self._leading = asyncio.Event()
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        # When the last successful write of the Lease by us was sent (monotonic seconds).
        self.renewed_at = 0.0
        self._task: asyncio.Task[None] | None = None

    @property
    def is_leader(self) -> bool:
        """True only while the last successful renewal is younger than the renew deadline."""
        return self._leading.is_set() and time.monotonic() < self.renewed_at + self._renew_deadline

    def ensure_leading(self) -> None:
        """Raise `LeaseLapsed` unless this replica leads now (`is_leader`). Cheap and safe to
        call from a worker thread, just before the call it guards."""
        if not self.is_leader:
            age = time.monotonic() - self.renewed_at
            raise LeaseLapsed(
                f"{self.identity} no longer leads {self._name} (last renewal {age:.1f} s ago, "
                f"renew deadline {self._renew_deadline:g} s): the write was not sent"
            )

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
        self._task = asyncio.create_task(self._campaign(), name=f"lease-{self._name}")

    async def stop(self, *, release: bool = True) -> None:
        """Stop campaigning; give the Lease up at once so a successor need not wait it out."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.is_leader and release:
            with contextlib.suppress(*CALL_ERRORS):
                async with asyncio.timeout(self._renew_deadline):
                    await self._release()
        self._leading.clear()

    async def _campaign(self) -> None:
        while True:
            if await self._attempt(self._renew_deadline):
                break
            await asyncio.sleep(self._retry)
        log.info("%s became leader of %s", self.identity, self._name)
        self._leading.set()
        while await self._renew():
            pass
        log.warning("%s lost leadership of %s", self.identity, self._name)
        self._leading.clear()
        if self._on_lost is not None:
            result = self._on_lost()
            if result is not None:
                await result

    async def _renew(self) -> bool:
        """One renewal round: retry until a renewal succeeds (True) or the deadline passes or a
        rival holds the Lease (False)."""
        deadline = self.renewed_at + self._renew_deadline
        await asyncio.sleep(min(self._retry, max(0.0, deadline - time.monotonic())))
        while (left := deadline - time.monotonic()) > 0:
            if await self._attempt(left):
                return True
            if self._observed is not None and self._observed[0] != self.identity:
                return False
            await asyncio.sleep(_pause_after_failure(self._retry, deadline - time.monotonic()))
        return False

    async def _attempt(self, limit_s: float) -> bool:
        """One try, bounded by `limit_s`; a failure or a hung call is a plain False."""
        sent = time.monotonic()
        try:
            async with asyncio.timeout(limit_s):
                written = await self._try_acquire_or_renew()
        except CALL_ERRORS as exc:
            log.warning("lease %s: %s", self._name, str(exc) or type(exc).__name__)
            return False
        if written:
            self.renewed_at = sent
        return written

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
        now = utc_timestamp()
        if holder != self.identity:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            spec["acquireTime"] = now
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=math.ceil(self._duration),
            renewTime=now,
        )
        self._annotate(lease)
        return await self._write(lease)

    async def _create(self) -> bool:
        now = utc_timestamp()
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self._name, "namespace": self._leases.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": math.ceil(self._duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        self._annotate(lease)
        try:
            await self._client.request("POST", self._leases.path(), body=lease)
        except ApiException as exc:
            if exc.status == 409:  # AlreadyExists: a rival created it first
                return False
            raise
        self._observed = (self.identity, now)
        return True

    async def _write(self, lease: dict[str, Any]) -> bool:
        """PUT with the resourceVersion we read: 409 Conflict means we lost the race."""
        try:
            await self._client.request("PUT", self._leases.path(self._name), body=lease)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        spec = lease["spec"]
        self._observed = (spec["holderIdentity"] or "", str(spec["renewTime"]))
        return True

    async def _release(self) -> None:
        lease = json.loads(await self._client.request("GET", self._leases.path(self._name)))
        spec = lease.get("spec") or {}
        if spec.get("holderIdentity") != self.identity:
            return
        now = utc_timestamp()
        spec.update(holderIdentity=None, leaseDurationSeconds=1, renewTime=now, acquireTime=now)
        lease["spec"] = spec
        if self._annotations is not None:  # they described the holder that is leaving
            own = (lease.get("metadata") or {}).get("annotations") or {}
            for key in self._annotations():
                own.pop(key, None)
        await self._write(lease)

    def _annotate(self, lease: dict[str, Any]) -> None:
        if self._annotations is not None:
            metadata = lease.setdefault("metadata", {})
            metadata["annotations"] = (metadata.get("annotations") or {}) | dict(
                self._annotations()
            )
