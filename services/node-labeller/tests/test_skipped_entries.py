"""A bad entry of vCenter's tag answers is logged and counted once, when it first appears, not
at every read (every 5 s on a site reading often), and again only if it comes back."""

import logging

import pytest
from prometheus_client import REGISTRY

from hostaffinity.node_labeller.metrics import TagReadMetrics
from hostaffinity.node_labeller.tag_refresh import SkippedEntries
from hostaffinity.runtime.process.telemetry import setup_telemetry

SKIPPED = "hostaffinity_labeller_tag_entries_skipped_total"


def exported(vcenter: str) -> float:
    return sum(
        sample.value
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.name == SKIPPED and sample.labels.get("vcenter") == vcenter
    )


def test_each_bad_entry_is_reported_once_while_it_lasts(caplog: pytest.LogCaptureFixture) -> None:
    setup_telemetry("hostaffinity-tests")
    entries = SkippedEntries("vc-once", TagReadMetrics())
    assert any(
        sample.name == SKIPPED and sample.labels.get("vcenter") == "vc-once"
        for family in REGISTRY.collect()
        for sample in family.samples
    ), "served at 0 before the first one"
    broken, other = "GET /tag/id:1: Object missing required field `name`: {}", "GET /tag/id:2: x"
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            entries.read([broken])
        entries.read([broken, other])
        entries.read([])  # fixed in vCenter ...
        entries.read([broken])  # ... and broken again
    lines = [r.getMessage() for r in caplog.records if "does not decode" in r.getMessage()]
    assert len(lines) == 3
    assert broken in lines[0]
    assert other in lines[1]
    assert broken in lines[2]
    assert exported("vc-once") == 3
