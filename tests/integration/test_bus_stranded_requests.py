"""A request sent on a connection that then broke fails at the reconnect, not at its timeout:
nats-py alone waits out the 5 s, the answer having gone with the old connection (the campaign's
slowest recovery: a labeller's KV put sent just before a partition healed)."""

from __future__ import annotations

import asyncio

import pytest
from nats.errors import TimeoutError as NatsTimeoutError

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.process.config import NatsSettings
from tests.platform.bus_values import node_placement as placement
from tests.platform.nats import NatsServer
from tests.platform.tcp_proxy import TcpProxy

REQUEST_TIMEOUT_S = 5.0


async def test_a_put_sent_into_a_partition_fails_at_the_reconnect(
    nats_server: NatsServer, bus: Bus
) -> None:
    proxy = TcpProxy("127.0.0.1", nats_server.port)
    await proxy.start()
    settings = NatsSettings(servers=[f"nats://127.0.0.1:{proxy.port}"])
    writer = await Bus.connect(
        settings, name="writer", reconnect_wait_seconds=1, request_timeout_seconds=REQUEST_TIMEOUT_S
    )
    loop = asyncio.get_running_loop()
    try:
        store = await writer.topology()
        proxy.partition()  # what the put sends is lost; the connection looks open
        put = asyncio.create_task(store.put_node(placement("node-1", "host-11", version=1)))
        await asyncio.sleep(0.5)
        assert not put.done(), "the put was answered through a partition"
        healed = loop.time()
        proxy.reset()  # the partition heals: the client sees its connection end and reconnects
        with pytest.raises(NatsTimeoutError):
            await put
        assert loop.time() - healed < REQUEST_TIMEOUT_S - 1.0, "it waited out its timeout"

        # Tried again, it goes through on the new connection.
        await store.put_node(placement("node-1", "host-11", version=1))
        reader = await bus.topology()
        assert (await reader.get_node("node-1")) is not None
    finally:
        await writer.close()
        await proxy.stop()
