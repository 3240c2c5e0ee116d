"""The NATS connection a service holds for its lifetime, and its entry points to JetStream.

The connection never gives up: the first connection is retried with exponential backoff (a
service may start before NATS), NATS reconnects without limit afterwards, and every disconnect
and reconnect is logged, so a late, restarted or failed-over server costs a pause, not a
service. The identity (an nkey seed file, or creds) and TLS come from
`NatsSettings`; the server enforces what that identity may do (k8s/base/nats/auth.conf), so a
service never creates the layout: it waits until provisioning made what it uses.
"""

import asyncio
import logging
import ssl
from collections.abc import Iterable
from typing import Final

import msgspec
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nats.js.errors import ServiceUnavailableError

from hostaffinity.runtime.bus.deadletters import DeadLetterQueue
from hostaffinity.runtime.bus.kv import TopologyStore
from hostaffinity.runtime.bus.layout import (
    BusLayout,
    LayoutMissing,
    missing_parts,
    provision_layout,
)
from hostaffinity.runtime.bus.publishing import publish
from hostaffinity.runtime.bus.stranded import StrandedRequests
from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested
from hostaffinity.runtime.process.config import NatsSettings
from hostaffinity.schema import (
    EVENT_TYPES,
    TOPOLOGY_BUCKET,
    Event,
    encode_event,
    event_subject,
    event_type_of,
)

_log = logging.getLogger(__name__)

UNLIMITED_RECONNECTS: Final = -1
FIRST_CONNECT_ATTEMPTS: Final = 1  # nats-py tries each server this many times more
LAYOUT_RETRY_SECONDS: Final = 2.0
PROVISION_ATTEMPTS: Final = 5


def event_type(event: Event) -> str:
    """The `type` tag of an event; only the schema's declared types get a subject."""
    tag = event_type_of(type(event))
    if tag not in EVENT_TYPES:
        raise TypeError(f"{type(event).__name__} is not one of the schema's event types")
    return tag


def tls_context(settings: NatsSettings) -> ssl.SSLContext | None:
    """A client TLS context when a CA or client certificate is configured, else None."""
    if settings.tls_ca_file is None and settings.tls_cert_file is None:
        return None
    context = ssl.create_default_context(cafile=settings.tls_ca_file)
    if settings.tls_cert_file is not None:
        context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    return context


class Bus:
    """A connected NATS client and its JetStream context."""

    def __init__(self, nc: Client, js: JetStreamContext, settings: NatsSettings) -> None:
        self.nc = nc
        self.js = js
        self.settings = settings
        # The cluster identity every event this bus publishes carries (set by the runner once
        # it is known; empty for the CLI, which publishes nothing of its own).
        self.cluster = ""

    @classmethod
    async def connect(
        cls,
        settings: NatsSettings,
        *,
        name: str,
        reconnect_wait_seconds: int = 2,
        request_timeout_seconds: float = 5.0,
        give_up_after_seconds: float | None = None,
        quiet: bool = False,
    ) -> "Bus":
        """Connect as `name` (shown in NATS monitoring), retrying until the first connection
        succeeds, and keep reconnecting for ever after it.

        A command at a terminal (the CLI) passes `give_up_after_seconds`, after which the last
        failure is raised as `BusUnreachable`, and `quiet`, which logs retries, disconnects and
        connection errors at debug: its user wants one line at the end, not a warning per try.
        """
        if missing := settings.missing_files():
            # A Secret not mounted: retrying cannot help, and a refused connection would hide it.
            raise ConfigFileError(f"configured files missing: {', '.join(missing)}")
        trouble = logging.DEBUG if quiet else logging.WARNING
        loop = asyncio.get_running_loop()
        deadline = None if give_up_after_seconds is None else loop.time() + give_up_after_seconds
        delay = settings.connect_retry_initial_seconds
        while True:
            try:
                # A round is bounded by nats-py's connect timeout per attempt; it is never
                # cancelled midway, which would leave the half-made client's tasks behind.
                nc = await _connect_once(settings, name, reconnect_wait_seconds, trouble)
            except (OSError, TimeoutError, NatsError) as err:
                reason = str(err) or type(err).__name__
                if deadline is not None and loop.time() + delay >= deadline:
                    raise BusUnreachable(
                        f"cannot reach NATS at {', '.join(settings.servers)} "
                        f"within {give_up_after_seconds:g} s ({reason})"
                    ) from None
                _log.log(
                    trouble,
                    "cannot reach NATS at %s (%s); retrying in %.1f s",
                    ", ".join(settings.servers),
                    reason,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, settings.connect_retry_max_seconds)
                continue
            _log.info(
                "connected to NATS at %s", nc.connected_url.netloc if nc.connected_url else "?"
            )
            return cls(nc, nc.jetstream(timeout=request_timeout_seconds), settings)

    def link_epoch(self) -> int | None:
        """How many times the connection was re-established; None while it is down. Anything
        read through an earlier epoch (a watch, a subscription) may have missed messages."""
        if not self.nc.is_connected:
            return None
        return int(self.nc.stats["reconnects"])

    async def provision(self, layout: BusLayout | None = None) -> TopologyStore:
        """Create or update the streams and buckets (the provisioning step's job, with the
        `provision` identity); returns the topology bucket, typed.

        Without a layout, the one `NatsSettings` describes applies.
        """
        chosen = layout or BusLayout.of(self.settings)
        attempt = 1
        while True:
            try:
                return TopologyStore(await provision_layout(self.js, chosen))
            except (NatsTimeoutError, ServiceUnavailableError) as error:
                raise_if_cancel_requested()  # a request before it may have swallowed it
                # A cluster that has just formed may leave a request unanswered while its
                # stream leaders are elected, or find no peers yet to place a replicated
                # stream on (503, err_code 10005 "no suitable peers for placement", a peer
                # still offline); every step is create-or-update, so ask again.
                if attempt == PROVISION_ATTEMPTS:
                    raise
                _log.warning(
                    "the bus could not take a provisioning request yet (%s; attempt %d of %d);"
                    " asking again",
                    getattr(error, "description", None) or "no answer",
                    attempt,
                    PROVISION_ATTEMPTS,
                )
                attempt += 1
                await asyncio.sleep(LAYOUT_RETRY_SECONDS)

    async def wait_for_layout(
        self,
        streams: Iterable[str],
        *,
        retry_seconds: float = LAYOUT_RETRY_SECONDS,
    ) -> None:
        """Return once every stream (a bucket: KV_<bucket>) exists as provisioned; until
        then say which are missing and how to make them, and look again. A service started
        before the provisioning Job stays not ready instead of failing."""
        wanted = list(streams)
        announced: list[str] = []
        while True:
            try:
                missing = await missing_parts(self.js, wanted)
            except NatsError as error:
                raise_if_cancel_requested()  # nats-py's request may have swallowed it (3.11)
                # No answer is not "missing": a partition or a stream leader being elected. Ask
                # again rather than fail the work (which would restart the process for nothing).
                _log.warning(
                    "the bus did not say whether it is provisioned (%r); asking again", error
                )
                await asyncio.sleep(retry_seconds)
                continue
            raise_if_cancel_requested()  # nats-py's request may have swallowed it (3.11)
            if not missing:
                break
            if missing != announced:
                _log.warning("%s", LayoutMissing.naming(missing))
                announced = missing
            await asyncio.sleep(retry_seconds)
        if announced:
            _log.info("the bus is provisioned now")

    async def topology(self, *, parked_as: str | None = None) -> TopologyStore:
        """The existing topology bucket, for a service that does not own the layout; with
        `parked_as` (a service), its watches park the values they cannot decode in
        `hostaffinity.dlq.<service>` (its identity must be allowed to publish there)."""
        kv = await self.js.key_value(TOPOLOGY_BUCKET)
        if parked_as is None:
            return TopologyStore(kv)
        return TopologyStore(kv, DeadLetterQueue(self.js, parked_as, f"KV_{TOPOLOGY_BUCKET}"))

    async def publish_event(self, event: Event) -> PubAck:
        """Publish on `hostaffinity.events.<type>` with `Nats-Msg-Id` = `event.id`, stamped
        with this install's cluster identity (`cluster`, when set), whoever built the event.

        A repeat within the duplicate window is not stored again: `ack.duplicate` is then True.
        """
        if self.cluster and event.cluster != self.cluster:
            event = msgspec.structs.replace(event, cluster=self.cluster)
        return await publish(
            self.js, event_subject(event_type(event)), encode_event(event), msg_id=event.id
        )

    async def close(self) -> None:
        """Flush what is buffered and close; consumers should be stopped first."""
        await self.nc.close()


async def _connect_once(
    settings: NatsSettings, name: str, reconnect_wait_seconds: int, trouble: int
) -> Client:
    """One round of first-connection attempts (each server at most twice). With unlimited
    reconnects nats-py would retry the first connection by itself, at a fixed pace and out of
    the caller's sight; limited here, it raises `NoServersError`, so the caller's backoff and
    log lines decide, and reconnecting without limit is switched on once connected."""
    nc = Client()
    stranded = StrandedRequests(nc)

    async def disconnected() -> None:
        stranded.note()
        if not nc.is_closed:  # close() also reports a disconnect
            _log.log(trouble, "disconnected from NATS; reconnecting")

    async def reconnected() -> None:
        failed = stranded.fail()
        if failed:
            _log.info("reconnected to NATS; %d request(s) sent before it failed at once", failed)
        else:
            _log.info("reconnected to NATS")

    async def closed() -> None:
        _log.info("NATS connection closed")

    failures: list[str] = []

    async def error(err: Exception) -> None:
        failures.append(str(err) or type(err).__name__)
        _log.log(trouble, "NATS connection error: %s", err)

    connecting = nc.connect(
        settings.servers,
        name=name,
        max_reconnect_attempts=FIRST_CONNECT_ATTEMPTS,
        reconnect_time_wait=reconnect_wait_seconds,
        disconnected_cb=disconnected,
        reconnected_cb=reconnected,
        closed_cb=closed,
        error_cb=error,
        inbox_prefix=settings.inbox_prefix,
        user_credentials=settings.creds_file,
        nkeys_seed=settings.nkey_seed_file,
        tls=tls_context(settings),
    )
    try:
        await connecting
    except NatsError as err:
        # "no servers available" alone hides why: name the last failure the attempts reported.
        if failures:
            raise NatsError(failures[-1]) from err
        raise
    nc.options["max_reconnect_attempts"] = UNLIMITED_RECONNECTS
    return nc


class ConfigFileError(RuntimeError):
    """A file the NATS settings name does not exist; retrying will not help."""


class BusUnreachable(RuntimeError):
    """No NATS server answered before the caller's deadline; says where and the last failure."""
