"""Reading vSphere HA's dasConfig into the record the CLI audits (pyVmomi data objects as vCenter
returns them; the round trip through vcsim is tests/integration/test_cli_host_failure.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pyVmomi import vim

from hostaffinity.drs_translator.ha_settings import HaSettingsRecorder, ha_settings
from hostaffinity.drs_translator.records import OwnershipRecords
from tests.platform.builders.drs import VCENTER, GatedKeyValue

_vim: Any = vim


def das(**fields: Any) -> Any:
    return _vim.cluster.DasConfigInfo(**fields)


def respect(value: str, key: str = "das.respectVmVmAntiAffinityRules") -> list[Any]:
    return [_vim.option.OptionValue(key=key, value=value)]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        pytest.param(None, (False, False, "", 0, "", True), id="no-das-config"),
        pytest.param(das(), (False, False, "", 0, "", True), id="never-configured"),
        pytest.param(
            das(
                enabled=True,
                admissionControlEnabled=True,
                admissionControlPolicy=_vim.cluster.FailoverLevelAdmissionControlPolicy(
                    failoverLevel=2
                ),
                option=respect("true"),
            ),
            (True, True, "host-failures", 2, "true", True),
            id="host-failures-respecting",
        ),
        pytest.param(
            das(
                enabled=True,
                admissionControlPolicy=_vim.cluster.FailoverResourcesAdmissionControlPolicy(
                    cpuFailoverResourcesPercent=25, memoryFailoverResourcesPercent=25
                ),
                failoverLevel=1,
                option=respect("False", key="das.respectvmvmantiaffinityrules"),
            ),
            (True, False, "resource-percentage", 1, "False", False),
            id="percentage-not-respecting-any-case",
        ),
        pytest.param(
            das(
                enabled=True,
                admissionControlPolicy=_vim.cluster.FailoverHostAdmissionControlPolicy(
                    failoverHosts=[_vim.HostSystem("host-9")]
                ),
            ),
            (True, False, "dedicated-hosts", 0, "", True),
            id="dedicated-hosts-option-unset",
        ),
    ],
)
def test_das_config_becomes_the_record(config: Any, expected: tuple[Any, ...]) -> None:
    got = ha_settings("vc", "domain-c7", config, "2026-01-01T00:00:00+00:00")
    assert (got.vcenter, got.cluster_moid, got.observed_at) == (
        "vc",
        "domain-c7",
        "2026-01-01T00:00:00+00:00",
    )
    assert (
        got.enabled,
        got.admission_control_enabled,
        got.admission_control_policy,
        got.failover_level,
        got.respect_option,
        got.respects_vm_anti_affinity,
    ) == expected
    assert got.restarts_respect_anti_affinity is (expected[0] and expected[5])


class NoHaCluster:
    """vCenter's side: every cluster answers without HA."""

    async def ha_config(self, cluster_moid: str) -> Any:
        return None


async def test_a_stop_that_comes_with_the_settings_write_ends_the_recorder() -> None:
    """The recorder writes a cluster's settings, then sleeps `refresh_seconds`. A stop that came
    with the write's ack was lost by nats-py's wait_for (Python 3.11) and the recorder slept on
    through the drain: the drs-translator did not stop within 15 s in CI."""
    kv = GatedKeyValue()
    records = OwnershipRecords(kv, VCENTER, "test-cluster")  # type: ignore[arg-type]
    records.by_cluster = {"domain-c7": {}}
    recorder = HaSettingsRecorder(kv, NoHaCluster(), records, VCENTER, 3600)  # type: ignore[arg-type]
    running = asyncio.create_task(recorder.run())
    try:
        await asyncio.wait_for(kv.waiting.wait(), 5.0)
        kv.ack.set_result(1)  # the ack and the stop in the same loop step
        running.cancel()
        done, _ = await asyncio.wait({running}, timeout=2.0)
        assert running in done, "the recorder slept on after it was cancelled"
        assert running.cancelled()
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
