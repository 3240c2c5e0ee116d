"""Run the double as its own process, for benchmarks that must not share a process with it.

`python -m tests.platform.kube_double.serve --nodes 2000 --prefix node-` prints
`KUBE_DOUBLE_URL=<url> TOKEN=<token>` once serving, then serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from .double import KubeDouble


async def _serve(nodes: int, prefix: str) -> None:
    double = KubeDouble(history_limit=100_000)
    for index in range(1, nodes + 1):
        double.seed({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"{prefix}{index}"}})
    await double.start()
    print(f"KUBE_DOUBLE_URL={double.url} TOKEN={double.token}", flush=True)
    await until_signalled(double)


async def until_signalled(double: KubeDouble) -> None:
    """Serve until SIGTERM or SIGINT, then stop: a double run as a process of its own."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await double.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=0, help="Nodes to create before serving")
    parser.add_argument("--prefix", default="node-", help="node names are <prefix>1..<prefix>N")
    args = parser.parse_args()
    asyncio.run(_serve(args.nodes, args.prefix))


if __name__ == "__main__":
    main()
