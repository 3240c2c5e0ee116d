"""The fleet's JetStream layout, on the hub and on each install, built on NATS's own multi-site
machinery: leaf nodes, one JetStream domain per side, and streams that source or mirror across
domains (docs.nats.io, "JetStream on Leaf Nodes" and "Cross-account subjects", nats-server 2.15).

- On the hub, `KV_hostaffinity-fleet` is a KV bucket's stream with no subjects of its own
  writers could publish to: it *sources* every member install's `KV_hostaffinity-placements`
  and `KV_hostaffinity-topology` through that install's API prefix `$JS.<install-domain>.API`,
  and a subject transform on each source files the install's keys under its token
  (`$KV.hostaffinity-placements.<key>` → `$KV.hostaffinity-fleet.<token>.<key>`, names.fleet_key).
  JetStream tracks each source's last sequence: a link that comes back resumes there, so
  nothing is lost and nothing stored twice.
- On an install, `KV_hostaffinity-fleet` *mirrors* the hub's bucket through `$JS.<hub>.API`:
  the services read the fleet view from their own bus, and while the hub is away it only goes
  stale. It keeps the origin's subjects, so the KV client reads it as it reads any bucket
  (ADR-8: a mirror named as its origin needs no subject rewrite).

- On the hub, `KV_hostaffinity-fleet-leases` holds who writes each fleet group's DRS rule
  (drs-translator fleet_leases.py, reached from installs through `$JS.<hub>.API`, runtime
  bus/hub_leases.py): a bucket whose max age frees the key of a holder that stopped renewing.
  Without a max age a crashed holder would keep its rules for ever, so provisioning always
  sets one.

Each source and the mirror deliver under a prefix of the install's own
(`fleet.hub_deliver_prefix`, `fleet.mirror_deliver_prefix`), which the install's hub
credentials are limited to (`hostaffinity.cli.fleet_access`).

nats-py's KeyValueConfig has no sources or mirror: both are made as their streams, in the shape
nats-py gives a bucket (`$KV.<bucket>.>`, direct gets, history per key); so is the leases
bucket, so that provisioning again can change its max age in place.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    ExternalStream,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamSource,
    SubjectTransform,
)
from nats.js.errors import NotFoundError

from hostaffinity.runtime.bus.kv_entries import live_entries
from hostaffinity.schema import (
    FLEET_BUCKET,
    FLEET_LEASES_BUCKET,
    HUB_DOMAIN,
    PLACEMENTS_BUCKET,
    TOPOLOGY_BUCKET,
    hub_deliver_prefix,
    install_domain,
    jetstream_api,
    mirror_deliver_prefix,
)

FLEET_STREAM: Final = f"KV_{FLEET_BUCKET}"
LEASES_STREAM: Final = f"KV_{FLEET_LEASES_BUCKET}"
# How long the hub keeps a fleet rule's lease nobody renews: a holder renews every third of it,
# and a crashed holder's rules are taken over within it (docs/fleet-groups.md).
DEFAULT_LEASE_MAX_AGE_SECONDS: Final = 30.0
# What an install exports to the hub: these buckets, and nothing else.
EXPORTED_BUCKETS: Final = (PLACEMENTS_BUCKET, TOPOLOGY_BUCKET)
# Consumers on the hub's fleet bucket: one mirror per install, the `fleet-cli` readers.
HUB_MAX_CONSUMERS: Final = 1024


class FleetLayoutError(RuntimeError):
    """The fleet view's stream exists in a shape provisioning cannot turn into this one."""


def _kv_subjects(bucket: str) -> str:
    return f"$KV.{bucket}.>"


def install_sources(install: str) -> list[StreamSource]:
    """The hub's sources of one install: its placements and topology buckets, keys filed
    under its token."""
    external = ExternalStream(
        api=jetstream_api(install_domain(install)), deliver=hub_deliver_prefix(install)
    )
    return [
        StreamSource(
            name=f"KV_{bucket}",
            external=external,
            subject_transforms=[
                SubjectTransform(src=_kv_subjects(bucket), dest=f"$KV.{FLEET_BUCKET}.{install}.>")
            ],
        )
        for bucket in EXPORTED_BUCKETS
    ]


def _kv_stream(name: str, *, replicas: int, **shape: Any) -> StreamConfig:
    """A stream read as a KV bucket (direct gets), whose entries nobody may delete, purge or
    roll up; `shape` adds what the one stream needs."""
    return StreamConfig(
        name=name,
        retention=RetentionPolicy.LIMITS,
        discard=DiscardPolicy.NEW,
        storage=StorageType.FILE,
        num_replicas=replicas,
        allow_direct=True,
        allow_rollup_hdrs=False,
        deny_delete=True,
        deny_purge=True,
        **shape,
    )


def hub_fleet_stream(installs: Iterable[str], *, replicas: int, history: int) -> StreamConfig:
    """The hub's fleet view: every member install's sources, in a stable order."""
    sources = [source for install in sorted(set(installs)) for source in install_sources(install)]
    return _kv_stream(
        FLEET_STREAM,
        replicas=replicas,
        subjects=[_kv_subjects(FLEET_BUCKET)],
        max_msgs_per_subject=history,
        max_consumers=HUB_MAX_CONSUMERS,
        sources=sources or None,
    )


def hub_leases_stream(*, replicas: int, max_age_seconds: float) -> StreamConfig:
    """The hub's fleet rule leases: one revision per key, every key gone `max_age_seconds` after
    its last write."""
    if max_age_seconds <= 0:
        raise ValueError(
            f"the lease max age must be above 0 s (got {max_age_seconds:g}): without one a "
            "crashed holder would keep its fleet rules for ever"
        )
    return _kv_stream(
        LEASES_STREAM,
        replicas=replicas,
        subjects=[_kv_subjects(FLEET_LEASES_BUCKET)],
        max_msgs_per_subject=1,
        max_age=max_age_seconds,
        # JetStream refuses a duplicate window longer than the max age; lease writes carry no
        # message id anyway.
        duplicate_window=max_age_seconds,
    )


def install_fleet_mirror(install: str, *, replicas: int) -> StreamConfig:
    """An install's read-only copy of the hub's fleet view."""
    return _kv_stream(
        FLEET_STREAM,
        replicas=replicas,
        max_msgs_per_subject=1,
        mirror_direct=True,
        max_consumers=256,
        mirror=StreamSource(
            name=FLEET_STREAM,
            external=ExternalStream(
                api=jetstream_api(HUB_DOMAIN), deliver=mirror_deliver_prefix(install)
            ),
        ),
    )


async def provision_hub(
    js: JetStreamContext,
    installs: Iterable[str],
    *,
    replicas: int,
    history: int,
    lease_max_age_seconds: float = DEFAULT_LEASE_MAX_AGE_SECONDS,
) -> StreamConfig:
    """Create the hub's fleet view, or update its sources to exactly `installs` (an install
    that left stops being sourced; what it had sent stays until its keys are replaced); and
    create or update the fleet rule leases bucket with its max age."""
    leases = hub_leases_stream(replicas=replicas, max_age_seconds=lease_max_age_seconds)
    wanted = hub_fleet_stream(installs, replicas=replicas, history=history)
    try:
        current = (await js.stream_info(FLEET_STREAM)).config
    except NotFoundError:
        await js.add_stream(wanted)
    else:
        if current.mirror is not None:
            raise FleetLayoutError(f"stream {FLEET_STREAM} on the hub is a mirror, not the view")
        await js.update_stream(wanted)
    try:
        await js.stream_info(LEASES_STREAM)
    except NotFoundError:
        await js.add_stream(leases)
    else:
        await js.update_stream(leases)
    return wanted


async def forget_departed(js: JetStreamContext, installs: Iterable[str]) -> int:
    """Delete from the hub's view every key of an install no longer among `installs` (it left
    the fleet: its sources are gone, its keys would stay forever). Deletes are markers, which
    the installs' mirrors receive as any other change; returns how many keys went."""
    kept = set(installs)
    view = await js.key_value(FLEET_BUCKET)
    gone = [key for key in await live_entries(view) if key.partition(".")[0] not in kept]
    for key in gone:
        await view.delete(key)
    return len(gone)


async def provision_mirror(js: JetStreamContext, install: str, *, replicas: int) -> None:
    """Create the install's mirror of the hub's view; one mirroring elsewhere is refused (a
    mirror's origin cannot change in place: delete the stream, then provision again)."""
    wanted = install_fleet_mirror(install, replicas=replicas)
    try:
        current = (await js.stream_info(FLEET_STREAM)).config
    except NotFoundError:
        await js.add_stream(wanted)
        return
    origin = current.mirror.external if current.mirror is not None else None
    if origin is None or origin.deliver != mirror_deliver_prefix(install):
        raise FleetLayoutError(
            f"stream {FLEET_STREAM} exists but does not mirror the hub for install {install} "
            f"(mirror: {current.mirror}); delete it, then run `hostaffinity bus provision` again"
        )
    if current.num_replicas != replicas:
        await js.update_stream(current.evolve(num_replicas=replicas))
