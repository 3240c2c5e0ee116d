"""A loopback TCP proxy a test can cut: `reset()` aborts every open connection at once, as a load
balancer failover or a firewall dropping its state table would, while new connections still get
through. Code under test points at the proxy; the test's own clients go to the server directly.

    proxy = TcpProxy("127.0.0.1", vc.port)
    await proxy.start()
    settings = vc.settings(port=proxy.port)
    proxy.reset()   # every client connection through the proxy sees a reset now
    await proxy.refuse()   # ... and new ones are refused until `await proxy.accept()`
    proxy.partition()   # open connections stay open but carry nothing, until `reset()`
"""

import asyncio
import contextlib


class TcpProxy:
    """Forwards bytes both ways between each client connection and its own upstream one."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._server: asyncio.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._cut: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def refuse(self) -> None:
        """Reset every connection and refuse new ones, as a server that went away."""
        await self.stop()

    async def accept(self) -> None:
        """Accept connections again on the same port after `refuse`."""
        await self.start()

    def partition(self) -> int:
        """Drop every byte of the open connections, both ways, and keep them open: a network
        partition before TCP gives up. What a client writes meanwhile is lost, not delayed.
        New connections still get through; `reset()` ends the partitioned ones."""
        for client, upstream in self._pairs:
            self._cut.update((client, upstream))
        return len(self._pairs)

    def reset(self) -> int:
        """Abort every open connection (both sides); returns how many there were."""
        pairs, self._pairs = self._pairs, set()
        self._cut.clear()
        for client, upstream in pairs:
            client.transport.abort()
            upstream.transport.abort()
        return len(pairs)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self.reset()
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        try:
            await asyncio.gather(
                self._client_to_server(reader, up_writer), self._server_to_client(up_reader, writer)
            )
        finally:
            self._pairs.discard(pair)

    # One method per direction, so a subclass can shape one direction's traffic.
    async def _client_to_server(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        await self._pipe(source, sink)

    async def _server_to_client(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        await self._pipe(source, sink)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        """Copy until either side ends (dropping what a partition cuts); then close the sink so
        the other end sees the end too."""
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await source.read(65536):
                if sink in self._cut:
                    continue
                sink.write(data)
                await sink.drain()
        sink.close()


class SlowRequests(TcpProxy):
    """Every chunk a client sends reaches vCenter `latency` seconds late: a slow link."""

    def __init__(self, upstream_host: str, upstream_port: int, latency: float) -> None:
        super().__init__(upstream_host, upstream_port)
        self.latency = latency

    async def _client_to_server(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        while chunk := await source.read(65536):
            await asyncio.sleep(self.latency)
            sink.write(chunk)
        sink.close()
