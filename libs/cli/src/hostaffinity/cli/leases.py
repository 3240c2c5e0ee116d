"""Who leads each leader-elected service: its `coordination.k8s.io/v1` Lease, read as
client-go's leaderelection writes it (runtime/kube/leader.py).

A Lease names a live leader only while `renewTime + leaseDurationSeconds` lies ahead: past it,
any replica may take the Lease over, so nobody is known to be working. A released Lease (no
holder) and a missing one mean the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Final

import msgspec
from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.cli.connections import open_api
from hostaffinity.runtime.kube.client import ResourceRef
from hostaffinity.runtime.process.config import KubernetesSettings

# The leader-elected services, as each names its Lease (`hostaffinity-<service>`).
LEADER_ELECTED: Final = ("node-labeller", "drs-translator", "descheduler")


class LeaseSpec(msgspec.Struct, frozen=True, rename="camel"):
    holder_identity: str | None = None
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_duration_seconds: int = 0


class LeaseMetadata(msgspec.Struct, frozen=True):
    annotations: dict[str, str] = msgspec.field(default_factory=dict)


class Lease(msgspec.Struct, frozen=True):
    spec: LeaseSpec = msgspec.field(default_factory=LeaseSpec)
    metadata: LeaseMetadata = msgspec.field(default_factory=LeaseMetadata)


class Leadership(msgspec.Struct, frozen=True):
    """One service's Lease as of `now`: `holder` is empty unless the leader is live."""

    service: str
    lease: str
    holder: str
    acquired_at: str
    renewed_at: str
    held_seconds: float


def lease_name(service: str) -> str:
    return f"hostaffinity-{service}"


def parse_time(text: str) -> datetime:
    """A Kubernetes Time or MicroTime (RFC 3339, `Z`)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def leadership(service: str, lease: Lease | None, now: datetime) -> Leadership:
    """What the Lease says about the service's leader at `now`."""
    spec = lease.spec if lease is not None else LeaseSpec()
    holder = spec.holder_identity or ""
    if holder and spec.renew_time:
        expires = parse_time(spec.renew_time) + timedelta(seconds=spec.lease_duration_seconds)
        if expires < now:
            holder = ""
    acquired = spec.acquire_time or ""
    held = (now - parse_time(acquired)).total_seconds() if holder and acquired else 0.0
    return Leadership(
        service, lease_name(service), holder, acquired, spec.renew_time or "", round(held, 1)
    )


async def read_leases(
    settings: KubernetesSettings, namespace: str, services: Sequence[str] = LEADER_ELECTED
) -> dict[str, Lease | None]:
    """Each service's Lease in `namespace` (None where there is none)."""
    leases = ResourceRef("coordination.k8s.io", "v1", "leases", namespace)
    found: dict[str, Lease | None] = {}
    async with open_api(settings) as client:
        for service in services:
            try:
                body = await client.request("GET", leases.path(lease_name(service)))
            except ApiException as error:
                if error.status != 404:
                    raise
                found[service] = None
                continue
            found[service] = msgspec.json.decode(body, type=Lease)
    return found
