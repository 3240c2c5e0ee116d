"""The topology bucket's bootstrap at scale: a real nats-server holding `--nodes` placements
(5,000 by default, as many as the cluster has nodes), each watch start timed until
`Bootstrapped` (every stored value yielded, ended by the stream's last sequence), and each
`snapshot()` the labeller's resync takes. Prints median, p99, values/s and peak RSS.

    uv run --frozen python bench/topology_watch_bench.py [--nodes 5000] [--rounds 20]
"""

import import_roots  # noqa: F401  (pytest's import roots on sys.path, before any test helper)

# isort: split

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from figures import peak_rss_mib, percentile

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.kv import Bootstrapped, TopologyStore
from tests.platform.bus_values import node_placement as placement
from tests.platform.nats import NatsServer


async def time_bootstrap(store: TopologyStore) -> tuple[float, int]:
    """Seconds from opening a watch to `Bootstrapped`, and how many values came before it."""
    started = time.perf_counter()
    values = 0
    async with store.watch() as changes:
        async for change in changes:
            if isinstance(change, Bootstrapped):
                return time.perf_counter() - started, values
            values += 1
    raise RuntimeError("the watch ended before Bootstrapped")


async def time_snapshot(store: TopologyStore) -> tuple[float, int]:
    started = time.perf_counter()
    snapshot = await store.snapshot()
    return time.perf_counter() - started, len(snapshot.nodes)


def report(what: str, samples: list[float], values: int) -> None:
    median = statistics.median(samples)
    print(
        f"{what}: median {median * 1000:.1f} ms, p99 {percentile(samples, 0.99) * 1000:.1f} ms, "
        f"{values / median:,.0f} values/s ({len(samples)} rounds)"
    )


async def main(nodes: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        server = NatsServer(Path(workdir))
        await server.start()
        bus = await Bus.connect(server.settings(), name="bench")
        try:
            store = await bus.provision()
            for start in range(0, nodes, 500):
                batch = range(start, min(nodes, start + 500))
                await asyncio.gather(
                    *(store.put_node(placement(f"node-{i}", f"host-{i % 50}", 1)) for i in batch)
                )
            print(f"scale: {nodes} placements in the topology bucket, real nats-server")
            for what, measure in (
                ("watch to Bootstrapped", time_bootstrap),
                ("snapshot", time_snapshot),
            ):
                samples = []
                for _ in range(rounds):
                    seconds, seen = await measure(store)
                    if seen != nodes:
                        raise RuntimeError(f"{what} saw {seen} of {nodes} values")
                    samples.append(seconds)
                report(what, samples, nodes)
            print(f"peak RSS: {peak_rss_mib():.0f} MiB")
        finally:
            await bus.close()
            await server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.nodes, args.rounds))
