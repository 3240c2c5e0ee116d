"""`hostaffinity events` over a full stream: a real nats-server whose events stream has the
shipped layout (max age 7 days, `hostaffinity bus provision`) holding `--events` events
(100,000 by default) of a realistic mix of types, the last `--recent` (1,000) published a couple
of seconds after the rest. Each question is read `--rounds` times through the command's own
reader (`event_log.read_events`: one ordered consumer, filtered by subject, started by time):

- the whole week, every type (`--since 7d`);
- the whole week, one type of 5 % (`--type pod.evicted --since 7d`);
- the whole week, one pod (`--pod default/web-7 --since 7d`: the pod-naming types, then the pod);
- only the recent ones (`--since <time between>`): the server starts the consumer there.

Then the command itself once, end to end (`hostaffinity events --since 7d -o json`, to
/dev/null), start-up included. Prints median and slowest seconds, events/s and peak RSS.

    uv run --frozen python bench/events_bench.py [--events 100000] [--recent 1000] [--rounds 5]
"""

import argparse
import asyncio
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from figures import peak_rss_mib  # noqa: E402

from hostaffinity.cli.event_log import read_events  # noqa: E402
from hostaffinity.cli.event_query import EventQuery  # noqa: E402
from hostaffinity.runtime.bus.client import Bus  # noqa: E402
from hostaffinity.schema import (  # noqa: E402
    ExtenderDecision,
    NodeLabelled,
    PodEvicted,
    PodMutated,
    TopologyEvent,
    VmMoved,
)
from tests.platform.nats import NatsServer  # noqa: E402

AT = "2026-11-25T10:00:00+00:00"
PUBLISH_BATCH = 500


def event(number: int) -> TopologyEvent:
    """The mix a busy cluster sends: mostly sampled decisions and mutations, some moves and
    labels, 5 % evictions (every 20th), each naming one of 100 pods or 50 nodes."""
    pod, node = f"default/web-{number % 100}", f"node-{number % 50}"
    common = {"id": f"bench-{number}", "occurred_at": AT, "source": "bench"}
    kind = number % 20
    if kind == 0:
        return PodEvicted(
            **common, pod=pod, pod_uid="u", node=node, strategy="s", rule="r", result="evicted"
        )
    if kind < 3:
        return VmMoved(
            **common, node=node, vm_moid="vm", from_host_moid="h1", from_host_name="esx-1",
            to_host_moid="h2", to_host_name="esx-2", version=number,
        )  # fmt: skip
    if kind < 5:
        return NodeLabelled(
            **common, node=node, labels={"hostaffinity.io/esxi-host": "esx-2"}, version=1
        )
    if kind < 10:
        return PodMutated(**common, pod=pod, request_uid="r", twins=1)
    return ExtenderDecision(**common, verb="filter", pod=pod, pod_uid="u", outcome="filtered")


async def fill(bus: Bus, first: int, count: int) -> None:
    for start in range(first, first + count, PUBLISH_BATCH):
        batch = range(start, min(start + PUBLISH_BATCH, first + count))
        await asyncio.gather(*(bus.publish_event(event(n)) for n in batch))


async def count(bus: Bus, query: EventQuery) -> tuple[float, int]:
    started = time.perf_counter()
    read = 0
    async for _ in read_events(bus, query, follow=False):
        read += 1
    return time.perf_counter() - started, read


async def command_once(server: NatsServer) -> float:
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "hostaffinity"), "events", "--since", "7d",
        "-o", "json", "--nats", server.url,
        stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    if await process.wait() != 0:
        raise RuntimeError("hostaffinity events failed")
    return time.perf_counter() - started


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        server = NatsServer(Path(workdir))
        await server.start()
        try:
            await server.provision()
            async with server.connection("bench") as bus:
                started = time.perf_counter()
                await fill(bus, 0, args.events - args.recent)
                await asyncio.sleep(2)
                between = datetime.datetime.now(datetime.UTC)
                await asyncio.sleep(1)
                await fill(bus, args.events - args.recent, args.recent)
                filled = time.perf_counter() - started
                info = await bus.js.stream_info("HOSTAFFINITY_EVENTS")
                print(
                    f"stream: {info.state.messages} events, {info.state.bytes / 2**20:.1f} MiB, "
                    f"max age {info.config.max_age / 86400:g} d (filled in {filled:.1f} s)"
                )
                week = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=7)
                questions = {
                    "--since 7d": EventQuery(since=week),
                    "--type pod.evicted --since 7d": EventQuery(types=("pod.evicted",), since=week),
                    "--pod default/web-7 --since 7d": EventQuery(pod="default/web-7", since=week),
                    "--since <recent>": EventQuery(since=between),
                }
                for label, query in questions.items():
                    samples, read = [], 0
                    for _ in range(args.rounds):
                        seconds, read = await count(bus, query)
                        samples.append(seconds)
                    median = statistics.median(samples)
                    print(
                        f"  {label:<32} {read:>7} events   median {median:6.2f} s   "
                        f"slowest {max(samples):6.2f} s   {read / median:>9,.0f} events/s"
                    )
            print(f"  command end to end (--since 7d -o json > /dev/null): "
                  f"{await command_once(server):.1f} s")  # fmt: skip
        finally:
            await server.stop()
    print(f"peak RSS {peak_rss_mib():.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--recent", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
