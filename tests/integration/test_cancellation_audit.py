"""The Python 3.11 cancellation audit (docs/reliability.md, "Cancellation under Python 3.11"):
each timeout mechanism of the aiohttp and kubernetes-asyncio calls we make, and the nats-py
waits our loops depend on, with a cancellation landing in the same loop turns as the reply or
the timeout (tests/platform/coinciding_cancel.py).

First the canary: nats-py's request, through a real nats-server, drops such a cancellation on
Python 3.11 (its `asyncio.wait_for`, python/cpython#86296) and not from 3.12: the sweep finds
the loss where there is one. Then every mechanism we rely on keeps the cancellation at every
offset: kubernetes-asyncio's calls are aiohttp requests with a `ClientTimeout` (KubeClient's
request and watch stream, against real HTTP servers in another thread), aiohttp's `total`
timeout (its TimerContext), its `sock_read` timeout (a protocol timer, no cancellation at
all), its `connect`/`sock_connect` timeouts (`ceil_timeout`, asyncio.timeout on 3.11), the
vCenter tag reads (an aiohttp session with a `total` timeout), and the aiohttp server's
shutdown. Last, our loops over nats-py requests end at every offset: each checks for a
swallowed cancellation after its request (`raise_if_cancel_requested`).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

import aiohttp
import pytest
from aiohttp import web
from aiohttp.helpers import ceil_timeout
from kubernetes_asyncio.client import ApiClient, Configuration

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.sampled import SampledPublisher
from hostaffinity.runtime.kube.client import KubeClient
from hostaffinity.runtime.kube.informer import InformerEvent, KeyedDispatcher
from hostaffinity.runtime.process.config import KubernetesSettings
from hostaffinity.runtime.process.workqueue import WorkQueue
from hostaffinity.runtime.vcenter.settings import VCenterSettings
from hostaffinity.runtime.vcenter.tags import TagReadError, read_tags
from tests.platform.coinciding_cancel import Outcome, sweep
from tests.platform.unusable_access import silent_listener

LOSES_WITH_RESULT = sys.version_info < (3, 12)  # python/cpython#86296
# A call's limit, and the sweep that cancels it as that limit comes due: once the request waits
# for its answer, the loop is blocked until past the limit.
TIMEOUT = 0.3
PAST_THE_TIMEOUT: Final = {"hold": 0.4, "offsets": 4, "settle_seconds": 0.1}
# An answer sent this long after its request, and the sweep that cancels the call as it lands:
# the request is out, then the loop is blocked until the answer is on the socket.
ANSWER_DELAY = 0.1
AS_THE_ANSWER_LANDS: Final = {"hold": 0.2, "settle_seconds": 0.05}


def kept_everywhere(outcomes: dict[int, Outcome]) -> None:
    """No offset lost the cancellation; the early ones cancelled and the late ones came after
    the operation had ended on its own (its reply or its timeout), so the sweep went through
    the turns where the two meet."""
    assert Outcome.LOST not in outcomes.values(), outcomes
    assert Outcome.CANCELLED in outcomes.values(), outcomes
    assert Outcome.FINISHED_FIRST in outcomes.values(), outcomes


class _Answers(BaseHTTPRequestHandler):
    """A JSON object for every GET, ANSWER_DELAY after the request; `/watch` sends its headers
    and then nothing (a watch that stays quiet)."""

    def do_GET(self) -> None:
        if self.path.startswith("/watch"):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            self.server.quiet.wait()  # type: ignore[attr-defined]
            return
        time.sleep(ANSWER_DELAY)  # the answer lands while the sweep holds the loop
        body = b'{"kind": "Namespace", "metadata": {"name": "default"}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


@contextmanager
def http_server_in_a_thread() -> Iterator[str]:
    """A real HTTP server outside the event loop: its answer reaches the socket while the loop
    is blocked, as a remote API server's does."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    server.daemon_threads = True
    server.quiet = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.quiet.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()


@contextmanager
def kube_client(url: str, settings: KubernetesSettings) -> Iterator[KubeClient]:
    yield KubeClient(ApiClient(Configuration(host=url)), settings)


async def closing(client: KubeClient) -> None:
    await client._api.close()


# -- the canary ----------------------------------------------------------------------------------


async def test_nats_requests_drop_a_cancellation_that_comes_with_the_reply(bus: Bus) -> None:
    """On 3.11 some offset returns the reply and drops the cancellation: why our loops over
    nats-py calls check `raise_if_cancel_requested` (process/cancellation.py)."""

    # Answered by nats-server itself (JetStream's account info), so the reply reaches the
    # socket while the sweep holds the loop.
    outcomes = await sweep(lambda: bus.nc.request("$JS.API.INFO", b"", timeout=5), hold=0.05)
    assert (Outcome.LOST in outcomes.values()) is LOSES_WITH_RESULT, outcomes


# -- kubernetes-asyncio and aiohttp ----------------------------------------------------------


async def test_a_kube_call_whose_answer_comes_with_the_cancellation_is_cancelled() -> None:
    """KubeClient.request -> kubernetes_asyncio's call_api -> aiohttp, the answer on the socket
    as the cancellation comes: aiohttp awaits it directly, so the task is cancelled."""
    with http_server_in_a_thread() as url, kube_client(url, KubernetesSettings()) as client:
        try:
            outcomes = await sweep(
                lambda: client.request("GET", "/api/v1/namespaces/default"),
                **AS_THE_ANSWER_LANDS,
            )
        finally:
            await closing(client)
    kept_everywhere(outcomes)


async def test_a_kube_calls_timeout_coming_due_with_the_cancellation_is_cancelled() -> None:
    """KubeClient.request's `total` limit (aiohttp's TimerContext) expiring in the same turn
    as the cancellation: a cancellation, not the TimeoutError every caller retries on."""
    settings = KubernetesSettings(request_timeout_seconds=TIMEOUT)
    with silent_listener() as port, kube_client(f"http://127.0.0.1:{port}", settings) as client:
        try:
            with pytest.raises(TimeoutError):  # the limit works on its own
                await client.request("GET", "/api/v1/namespaces/default")
            outcomes = await sweep(
                lambda: client.request("GET", "/api/v1/namespaces/default"), **PAST_THE_TIMEOUT
            )
        finally:
            await closing(client)
    kept_everywhere(outcomes)


async def test_a_quiet_watchs_read_timeout_coming_due_with_the_cancellation_is_cancelled() -> None:
    """KubeClient.stream's `sock_read` limit: aiohttp's protocol timer sets ServerTimeoutError
    on the payload and cancels nothing, so a cancellation in the same turn wins."""
    settings = KubernetesSettings(watch_timeout_seconds=1, watch_read_margin_seconds=0)

    async def read_watch(client: KubeClient) -> bytes:
        async with client.stream("/watch", {}) as lines:
            return await lines.readline()

    with http_server_in_a_thread() as url, kube_client(url, settings) as client:
        try:
            with pytest.raises(aiohttp.ServerTimeoutError):  # the limit works on its own
                await read_watch(client)
            # Its headers in, the quiet watch's read timer runs (1 s); blocked until past it.
            outcomes = await sweep(
                lambda: read_watch(client), hold=1.0, offsets=4, settle_seconds=0.3
            )
        finally:
            await closing(client)
    kept_everywhere(outcomes)


async def test_aiohttps_connect_timeout_coming_due_with_the_cancellation_is_cancelled() -> None:
    """`ceil_timeout`, which aiohttp puts around connecting (`connect`, `sock_connect`, our
    KubernetesSettings.connect_timeout_seconds): asyncio.timeout on 3.11, which hands a
    cancellation that came with its expiry on."""
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def connecting() -> None:
        async with ceil_timeout(TIMEOUT):
            await asyncio.shield(never)

    with pytest.raises(TimeoutError):
        await connecting()
    kept_everywhere(await sweep(connecting, **PAST_THE_TIMEOUT))
    never.cancel()


async def test_a_vcenter_tag_read_timing_out_with_the_cancellation_is_cancelled() -> None:
    """read_tags' session-wide `total` limit (the tag refresh loop retries on TagReadError)."""
    with silent_listener() as port:
        vcenter = VCenterSettings(
            host="127.0.0.1", port=port, protocol="http", username="u", password="p"
        )
        with pytest.raises(TagReadError):  # the limit works on its own
            await read_tags(vcenter, ["zone"], timeout_seconds=TIMEOUT)
        outcomes = await sweep(
            lambda: read_tags(vcenter, ["zone"], timeout_seconds=TIMEOUT), **PAST_THE_TIMEOUT
        )
    kept_everywhere(outcomes)


async def test_an_http_servers_shutdown_timing_out_with_the_cancellation_is_cancelled() -> None:
    """aiohttp's runner.cleanup() (our health, webhook and extender servers) first waits
    `shutdown_timeout` for a handler in progress (`ceil_timeout`), catches what ends the wait
    and re-raises it only when the task is being cancelled. A cancellation that comes as that
    wait expires must end the cleanup; the rest of it takes another `shutdown_timeout`, so no
    offset here sees it finish on its own."""
    started: list[tuple[web.AppRunner, asyncio.Task[Any]]] = []

    async def slow(_request: web.Request) -> web.Response:
        await asyncio.sleep(3600)
        return web.Response()

    async def shut_down(http: aiohttp.ClientSession) -> None:
        app = web.Application()
        app.router.add_get("/", slow)
        runner = web.AppRunner(app, shutdown_timeout=TIMEOUT, handle_signals=False)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        calling = asyncio.create_task(http.get(f"http://127.0.0.1:{runner.addresses[0][1]}/"))
        started.append((runner, calling))
        await asyncio.sleep(0.02)  # the request is being handled
        await runner.cleanup()

    async with aiohttp.ClientSession() as http:
        try:
            outcomes = await sweep(lambda: shut_down(http), hold=0.4, offsets=4, settle_seconds=0.1)
        finally:
            for runner, calling in started:
                calling.cancel()
                await asyncio.gather(calling, return_exceptions=True)
                with contextlib.suppress(Exception):
                    await runner.cleanup()
            # A cleanup cut short leaves its connections' handlers: end them here.
            handlers = [
                task
                for task in asyncio.all_tasks()
                if getattr(task.get_coro(), "__qualname__", "").startswith("RequestHandler.")
            ]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
    assert set(outcomes.values()) == {Outcome.CANCELLED}, outcomes


# -- our loops over nats-py calls ----------------------------------------------------------------


async def test_waiting_for_the_layout_ends_at_a_cancellation_its_request_dropped(bus: Bus) -> None:
    """Bus.wait_for_layout asks for the streams until they exist; a cancellation nats-py's
    request dropped used to leave it asking for ever (the stop then hit the drain bound)."""
    outcomes = await sweep(
        lambda: bus.wait_for_layout(["AUDIT_NEVER_PROVISIONED"], retry_seconds=0.001), hold=0.05
    )
    assert set(outcomes.values()) == {Outcome.CANCELLED}, outcomes  # it never ends on its own


def js_info(bus: Bus) -> Callable[..., Awaitable[object]]:
    """A call nats-server itself answers (JetStream's account info), as a handler's or a
    publisher's NATS call."""

    async def ask(*_args: object) -> object:
        return await bus.nc.request("$JS.API.INFO", b"", timeout=5)

    return ask


async def test_the_sampled_publisher_ends_at_a_cancellation_a_publish_dropped(bus: Bus) -> None:
    """SampledPublisher.run (the extender's and the webhook's sampled events) with events
    always waiting: a dropped cancellation would keep it publishing."""

    async def publishing() -> None:
        publisher = SampledPublisher("audit", js_info(bus), ratio=1.0, capacity=10_000)
        for i in range(5_000):
            publisher.offer(str(i), lambda: None)  # type: ignore[arg-type,return-value]
        await publisher.run()

    outcomes = await sweep(publishing, hold=0.05)
    assert set(outcomes.values()) == {Outcome.CANCELLED}, outcomes


async def test_a_work_queue_ends_at_a_cancellation_a_handler_dropped(bus: Bus) -> None:
    """WorkQueue.run (the node-labeller's nodes) with keys always waiting and a handler that
    calls NATS."""

    async def working() -> None:
        queue: WorkQueue[int] = WorkQueue("audit")
        for key in range(5_000):
            queue.add(key)
        await queue.run(js_info(bus), workers=1)

    outcomes = await sweep(working, hold=0.05)
    assert set(outcomes.values()) == {Outcome.CANCELLED}, outcomes


async def test_an_informers_workers_end_at_a_cancellation_a_handler_dropped(bus: Bus) -> None:
    """KeyedDispatcher (every informer's handlers) with events always waiting: the informer's
    end cancels its workers and waits for them, which a dropped cancellation would hang."""

    async def dispatching() -> None:
        dispatcher: KeyedDispatcher[int] = KeyedDispatcher(js_info(bus), shards=1, idle_s=5.0)
        for key in range(5_000):
            dispatcher.submit(InformerEvent("ADDED", str(key), key))
        try:
            await asyncio.sleep(3600)
        finally:
            await dispatcher.close()

    outcomes = await sweep(dispatching, hold=0.05, settle_seconds=0.01)
    assert set(outcomes.values()) == {Outcome.CANCELLED}, outcomes
