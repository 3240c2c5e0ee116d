"""`hostaffinity events` for people, against a real nats-server: the server filters by type and
start time, the command by the object an event names; a table or JSON lines."""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any

import pytest

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import ExtenderDecision, NodePlaced, PodEvicted, VmMoved
from tests.platform.console import exit_code
from tests.platform.nats import NatsServer

AT = "2026-11-25T10:00:00+00:00"
MOVED = VmMoved(
    id="m1", occurred_at=AT, source="node-labeller", node="node-a", vm_moid="vm-1",
    from_host_moid="host-1", from_host_name="esx-1", to_host_moid="host-2",
    to_host_name="esx-2", version=2,
)  # fmt: skip
PLACED = NodePlaced(
    id="p1", occurred_at=AT, source="node-labeller", node="node-b", vm_moid="vm-2",
    host_moid="host-3", host_name="esx-3", cluster_name="c", datacenter="dc", matched_by="name",
    version=1,
)  # fmt: skip
EVICTED = PodEvicted(
    id="e1", occurred_at=AT, source="descheduler", pod="default/web-1", pod_uid="u1",
    node="node-a", strategy="host-anti-affinity", rule="r", result="evicted",
)  # fmt: skip
DECIDED = ExtenderDecision(
    id="d1", occurred_at=AT, source="scheduler-extender", verb="filter", pod="default/web-2",
    pod_uid="u2", outcome="filtered",
)  # fmt: skip


async def events(
    nats_server: NatsServer, capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, str, str]:
    capsys.readouterr()
    command = ["events", *argv, "--nats", nats_server.url, "--connect-timeout", "10"]
    code = await asyncio.to_thread(exit_code, command)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def ids(nats_server: NatsServer, capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    code, out, err = await events(nats_server, capsys, *argv, "-o", "json")
    assert code == 0, err
    documents: list[dict[str, Any]] = [json.loads(line) for line in out.splitlines()]
    return [document["id"] for document in documents]


@pytest.fixture
async def published(bus: Bus) -> None:
    for event in (MOVED, PLACED, EVICTED, DECIDED):
        await bus.publish_event(event)


@pytest.mark.usefixtures("published")
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ((), ["m1", "p1", "e1", "d1"]),
        (("--type", "pod.evicted,vm.moved"), ["m1", "e1"]),
        (("--type", "pod.evicted", "--type", "node.placed"), ["p1", "e1"]),
        (("--pod", "default/web-1"), ["e1"]),
        (("--pod", "default/web-2", "--type", "pod.evicted"), []),
        (("--node", "node-a"), ["m1", "e1"]),
        (("--host", "esx-3"), ["p1"]),
        (("--host", "esx-2"), ["m1"]),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else "",
)
async def test_events_since_a_duration_filtered_by_type_and_object(
    nats_server: NatsServer,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    expected: list[str],
) -> None:
    assert await ids(nats_server, capsys, "--since", "1h", *argv) == expected


async def test_the_start_time_is_the_servers_to_apply(
    bus: Bus, nats_server: NatsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    await bus.publish_event(MOVED)
    await asyncio.sleep(1.1)
    between = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    await asyncio.sleep(1.1)
    await bus.publish_event(PLACED)
    assert await ids(nats_server, capsys, "--since", between.isoformat()) == ["p1"]
    later = (between + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert await ids(nats_server, capsys, "--since", later) == []


@pytest.mark.usefixtures("published")
async def test_a_table_for_people(
    nats_server: NatsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = await events(
        nats_server, capsys, "--since", "1h", "--node", "node-a", "-o", "table"
    )
    assert code == 0
    header, moved, evicted = out.splitlines()
    assert header.split() == ["TIME", "TYPE", "OBJECT", "DETAILS"]
    assert moved.split()[:4] == ["2026-11-25", "10:00:00", "vm.moved", "node-a"]
    assert "from_host_name=esx-1" in moved
    assert "to_host_name=esx-2" in moved
    assert evicted.split()[:4] == ["2026-11-25", "10:00:00", "pod.evicted", "default/web-1"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--since", "yesterday"), "--since 'yesterday': give a duration"),
        (("--type", "pod.deleted"), "unknown event types pod.deleted"),
        (("--pod", "web-1"), "--pod 'web-1': give NAMESPACE/NAME"),
    ],
)
async def test_a_bad_filter_is_said_plainly(
    nats_server: NatsServer,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    message: str,
) -> None:
    code, _, err = await events(nats_server, capsys, *argv)
    assert code == 1
    assert message in err
