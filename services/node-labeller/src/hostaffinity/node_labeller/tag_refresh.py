"""Reads vCenter's tags (and rack host groups) for the failure-domain labels, again every
`refresh_seconds`.

Apart from the inventory watch: tags are in the Automation API (runtime vcenter/tags.py), which
has no change feed PropertyCollector could follow, and they change rarely. What moves often is a
VM between hosts, and each host's domains are already known then: a vMotion is relabelled from the
last read, as quickly as the host label.

An entry of vCenter's answers that does not decode (runtime vcenter/tags.py leaves it out) costs
only itself: the rest of the read is applied, and the entry is logged and counted once, when it
first appears, not at every read.
"""

import asyncio
import logging
from collections.abc import Iterable

from hostaffinity.node_labeller.config import FailureDomainSettings
from hostaffinity.node_labeller.core.reconcile import Tags
from hostaffinity.node_labeller.host_groups import read_host_group_racks
from hostaffinity.node_labeller.labeller import Labeller
from hostaffinity.node_labeller.metrics import TagReadMetrics
from hostaffinity.runtime.vcenter.session import VCenterError
from hostaffinity.runtime.vcenter.settings import VCenterSettings
from hostaffinity.runtime.vcenter.tags import TagRead, read_tags

log = logging.getLogger(__name__)
# A failed read is tried again sooner than the refresh period, at most this long after.
RETRY_SECONDS = 10.0


async def refresh_tags_forever(
    vcenter: VCenterSettings, settings: FailureDomainSettings, labeller: Labeller
) -> None:
    """Read the configured categories' tags (and host groups) until cancelled and hand each read
    to `labeller`; a failed read is logged and counted, and the labels stay as the last read
    made them."""
    counted = TagReadMetrics()
    skipped = SkippedEntries(vcenter.known_as, counted)
    while True:
        try:
            read = await _read(vcenter, settings, skipped)
        except VCenterError as error:
            counted.read(vcenter.known_as, ok=False)
            delay = min(settings.refresh_seconds, RETRY_SECONDS)
            log.warning(
                "%s; failure-domain labels stay as they are; next try in %.0fs", error, delay
            )
            labeller.on_tags(vcenter.known_as, None)
            await asyncio.sleep(delay)
            continue
        counted.read(vcenter.known_as, ok=True)
        labeller.on_tags(vcenter.known_as, read)
        await asyncio.sleep(settings.refresh_seconds)


class SkippedEntries:
    """The entries the last read left out: each is logged and counted when it first appears (and
    again only if it comes back after a read without it)."""

    def __init__(self, vcenter: str, metrics: TagReadMetrics) -> None:
        self._vcenter = vcenter
        self._metrics = metrics
        self._known: set[str] = set()
        metrics.skipped(vcenter, 0)  # served at 0 from the start, so the first one is an increase

    def read(self, entries: Iterable[str]) -> None:
        current = set(entries)
        for entry in sorted(current - self._known):
            self._metrics.skipped(self._vcenter, 1)
            log.warning(
                "vCenter %s: an entry of its tag answers does not decode and is left out (the "
                "rest is applied): %s",
                self._vcenter,
                entry,
            )
        self._known = current


async def _read(
    vcenter: VCenterSettings, settings: FailureDomainSettings, skipped: SkippedEntries
) -> Tags:
    tags = TagRead({}, ())
    if settings.categories:
        tags = await read_tags(vcenter, settings.categories)
    skipped.read(tags.skipped)
    for category in tags.missing_categories:
        log.warning(
            "vCenter has no tag category %r (failure_domains); its label is not set", category
        )
    prefix = settings.rack_host_group_prefix
    racks = await asyncio.to_thread(read_host_group_racks, vcenter, prefix) if prefix else {}
    return Tags(tags.tags, racks)
