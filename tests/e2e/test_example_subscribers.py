"""The example subscribers (examples/, Python and Go) against the shipped bus (three servers,
TLS): 1,000 events published, the subscriber killed with SIGKILL halfway and started again, and
every event handled exactly once by id. Ten of the events are also published a second time
outside JetStream's duplicate window (no `Nats-Msg-Id`: new stream messages, the same event
ids), so deduplication by id is exercised on every run, not only when the kill happens to fall
between a commit and its ack.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import nats.errors
import pytest
from nats.js.errors import NoStreamResponseError

from hostaffinity.schema import EVENTS_STREAM, VmMoved, encode_event, event_subject
from tests.e2e.harness import eventually
from tests.platform.console import exit_code
from tests.platform.nats_cluster import NatsCluster

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "proto" / "schemas"
GO_BINARY = ROOT / "build" / "go-subscriber"
EVENTS = 1000
REPEATED = 10
KILL_AT = EVENTS // 2
ACK_WAIT_SECONDS = 2.0  # so what was in flight at the kill comes again soon
DONE_SECONDS = 120.0
PUBLISH_SECONDS = 30.0


def handled_by_python(store: Path) -> list[str]:
    if not store.exists():
        return []
    with sqlite3.connect(store) as db:
        try:
            return [row[0] for row in db.execute("SELECT id FROM handled ORDER BY row")]
        except sqlite3.OperationalError:  # the subscriber has not made its tables yet
            return []


def handled_by_go(store: Path) -> list[str]:
    if not store.exists():
        return []
    lines = store.read_text(encoding="utf-8").splitlines(keepends=True)
    return [json.loads(line)["id"] for line in lines if line.endswith("\n")]


def python_command(cluster: NatsCluster, seed: Path, store: Path) -> list[str]:
    servers = [option for url in cluster.urls for option in ("--nats", url)]
    return [
        sys.executable, str(ROOT / "examples" / "python-subscriber" / "subscriber.py"),
        *servers, "--name", "cmdb", "--seed", str(seed),
        "--ca", str(cluster.tls_dir / "ca.crt"), "--schemas", str(SCHEMAS), "--store", str(store),
    ]  # fmt: skip


def go_command(cluster: NatsCluster, seed: Path, store: Path) -> list[str]:
    if not GO_BINARY.exists() or GO_BINARY.stat().st_mtime < _go_source_mtime():
        subprocess.run(["bash", str(ROOT / "scripts" / "build-go-subscriber.sh")], check=True)
    return [
        str(GO_BINARY), "-nats", ",".join(cluster.urls), "-name", "cmdb", "-seed", str(seed),
        "-ca", str(cluster.tls_dir / "ca.crt"), "-schemas", str(SCHEMAS), "-store", str(store),
    ]  # fmt: skip


def _go_source_mtime() -> float:
    return (ROOT / "examples" / "go-subscriber" / "main.go").stat().st_mtime


EXAMPLES = {
    "python": (python_command, handled_by_python, "handled.sqlite"),
    "go": (go_command, handled_by_go, "handled.jsonl"),
}


def moved(number: int) -> VmMoved:
    return VmMoved(
        id=f"vm.moved:test:vm-{number}:1",
        occurred_at="2026-11-25T12:00:00Z",
        source="test",
        node=f"node-{number}",
        vm_moid=f"vm-{number}",
        from_host_moid="host-1",
        from_host_name="esx-1",
        to_host_moid="host-2",
        to_host_name="esx-2",
        version=1,
    )


async def publish_events(cluster: NatsCluster) -> set[str]:
    """EVENTS events as the node-labeller publishes them, then REPEATED of them again without
    `Nats-Msg-Id` (as a publisher retrying after the duplicate window would)."""
    events = [moved(number) for number in range(EVENTS)]
    async with cluster.connection("node-labeller") as bus:
        for event in events:
            await _retried(lambda event=event: bus.publish_event(event))
        for event in events[:REPEATED]:
            await _retried(
                lambda event=event: bus.js.publish(event_subject("vm.moved"), encode_event(event))
            )
    return {event.id for event in events}


async def _retried(publish: Callable[[], Awaitable[object]]) -> None:
    """As a service retries: a stream between leaders answers nobody for a moment."""
    async with asyncio.timeout(PUBLISH_SECONDS):
        while True:
            try:
                await publish()
                return
            except (nats.errors.TimeoutError, NoStreamResponseError):
                await asyncio.sleep(0.2)


async def drained(cluster: NatsCluster) -> None:
    """Until the consumer has nothing left to deliver and nothing unacked."""
    deadline = time.monotonic() + DONE_SECONDS
    async with cluster.connection("cli") as cli:
        while True:
            info = await cli.js.consumer_info(EVENTS_STREAM, "cmdb")
            if info.num_pending == 0 and info.num_ack_pending == 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"consumer cmdb not drained: {info}")
            await asyncio.sleep(0.2)


def running_until(
    subscriber: asyncio.subprocess.Process, done: Callable[[], bool], workdir: Path
) -> Callable[[], bool]:
    """`done`, failing at once with the subscriber's log when it exited on its own."""

    def check() -> bool:
        if subscriber.returncode is not None:
            log = (workdir / "subscriber.log").read_text(errors="replace")[-2000:]
            raise AssertionError(f"the subscriber exited with {subscriber.returncode}:\n{log}")
        return done()

    return check


@pytest.mark.parametrize("language", sorted(EXAMPLES))
async def test_an_example_subscriber_handles_every_event_once_across_a_kill(
    nats_cluster: NatsCluster, tmp_path: Path, language: str
) -> None:
    command_of, handled, store_name = EXAMPLES[language]
    argv = nats_cluster.subscriber_command(
        "add", "cmdb", "--events", "vm.moved", "--ack-wait", str(ACK_WAIT_SECONDS)
    )
    assert await asyncio.to_thread(exit_code, argv) == 0
    seed = nats_cluster.credentials_dir / "subscribers" / "cmdb.nk"
    published = await publish_events(nats_cluster)
    store = tmp_path / store_name
    command = command_of(nats_cluster, seed, store)
    log = (tmp_path / "subscriber.log").open("wb")

    first = await asyncio.create_subprocess_exec(*command, stdout=log, stderr=log)
    try:
        await eventually(
            running_until(first, lambda: len(handled(store)) >= KILL_AT, tmp_path),
            "half handled",
            DONE_SECONDS,
        )
    finally:
        first.send_signal(signal.SIGKILL)
        await first.wait()
    assert len(handled(store)) < EVENTS, "killed too late to show a restart"

    second = await asyncio.create_subprocess_exec(*command, stdout=log, stderr=log)
    try:
        await eventually(
            running_until(second, lambda: len(handled(store)) >= EVENTS, tmp_path),
            "all handled",
            DONE_SECONDS,
        )
        await drained(nats_cluster)
    finally:
        if second.returncode is None:
            second.send_signal(signal.SIGTERM)
        await second.wait()
        log.close()

    ids = handled(store)
    assert len(ids) == EVENTS, (tmp_path / "subscriber.log").read_text()[-2000:]
    assert set(ids) == published
    # The repeats (the stream's last messages, so the second run's) came and were skipped by id.
    counts = re.findall(r"duplicates skipped (\d+)", (tmp_path / "subscriber.log").read_text())
    assert int(counts[-1]) >= REPEATED


class ExpiringPull:
    """A pull subscription whose time ran out between nats-py's two pull requests: nats-py
    (2.x, `_fetch_n`) then raises asyncio's TimeoutError, not its own."""

    async def fetch(self, batch: int, timeout: float) -> list[object]:  # noqa: ASYNC109 (nats-py's)
        raise TimeoutError  # asyncio.TimeoutError is this builtin since Python 3.11


async def test_the_python_subscriber_asks_again_when_a_fetch_expires_either_way() -> None:
    path = ROOT / "examples" / "python-subscriber" / "subscriber.py"
    spec = importlib.util.spec_from_file_location("example_subscriber", path)
    assert spec is not None
    assert spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert await example.next_batch(ExpiringPull()) == []
