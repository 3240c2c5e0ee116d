"""The upgrade fault: the first install starts on the previous release (built from its git tag
by tests/platform/previous_release.py) and is rolled, one replica at a time, onto this tree's,
under the workload and the other faults. docs/upgrade.md, "The tested sequence", is the
operator's side of the same order.

The bus is the one this tree provisions from the start (`hostaffinity bus provision` runs
before the rollout, as docs/upgrade.md says); the previous release's services run on it as they
are: its layout and the permissions it needs are a subset of this tree's.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Final

from tests.campaign.history import Clock, EventsRead, Fault
from tests.campaign.install import EXTENDER, LEADER_ELECTED, WEBHOOK, Install
from tests.campaign.processes import THIS_RELEASE, Release
from tests.platform.nats_cluster import NatsCluster
from tests.platform.previous_release import PREVIOUS_VERSION, previous_release_venv

UPGRADE: Final = "upgrade"
# The order of the rollout: the writers of the topology and the DRS rules first (the
# node-labeller, then the drs-translator, whose first cycle renames the previous release's DRS
# objects), then the readers; within a service, replica a then b.
ORDER: Final = (*LEADER_ELECTED, WEBHOOK, EXTENDER)
READY_WITHIN_S: Final = 60.0  # a rollout's progress deadline for one replica
READ_WITHIN_S: Final = 30.0  # `hostaffinity events` over a minute's stream


def previous_release() -> Release:
    """The previous release's services, built on first use."""
    return Release(PREVIOUS_VERSION, previous_release_venv() / "bin")


def rollout_order(install: Install) -> list[str]:
    """The install's replicas in the order the upgrade replaces them."""
    return sorted(
        install.replicas,
        key=lambda name: (ORDER.index(install.replicas[name].service), name),
    )


async def rolling_upgrade(install: Install, clock: Clock) -> None:
    """Each replica stopped gracefully and started on this tree, the next once it is ready (or
    after the progress deadline: the invariants then say what a stuck rollout broke); recorded
    as one fault of the install."""
    start = clock.now()
    for name in rollout_order(install):
        replica = install.replicas[name]
        await replica.replace(THIS_RELEASE)
        deadline = time.monotonic() + READY_WITHIN_S
        while time.monotonic() < deadline:
            if await replica.ready():
                break
            await asyncio.sleep(0.5)
    install.release = THIS_RELEASE
    install.history.faults.append(Fault(start, clock.now(), UPGRADE, install.shape.name))


async def read_events_with_both(install: Install, previous: Release) -> None:
    """`hostaffinity events` of the previous release and of this tree over the install's whole
    stream, as an operator runs it beside a mixed rollout: each must decode every event,
    whichever release wrote it (checked by events-read-by-both-releases)."""
    for release in (previous, THIS_RELEASE):
        install.history.events_read[release.version] = await _read_events(install, release)


async def _read_events(install: Install, release: Release) -> EventsRead:
    assert isinstance(install.bus, NatsCluster)
    settings = install.bus.settings("cli")
    assert settings.nkey_seed_file is not None
    assert settings.tls_ca_file is not None
    process = await asyncio.create_subprocess_exec(
        str(release.bin / "hostaffinity"),
        "events",
        "--since",
        "1h",
        "-o",
        "json",
        "--nats",
        settings.servers[0],
        "--nats-seed",
        settings.nkey_seed_file,
        "--nats-ca-file",
        settings.tls_ca_file,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), READ_WITHIN_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        return EventsRead(error=f"no answer within {READ_WITHIN_S:g} s")
    if process.returncode != 0:
        return EventsRead(error=f"exit {process.returncode}: {err.decode(errors='replace')}")
    try:
        ids = frozenset(json.loads(line)["id"] for line in out.decode().splitlines() if line)
    except (ValueError, KeyError, TypeError) as error:
        return EventsRead(error=f"unreadable output ({error}): {out[:500]!r}")
    return EventsRead(ids)
