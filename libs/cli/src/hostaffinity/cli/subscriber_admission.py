"""Whether every server runs the subscribers.conf just written, seen as the subscriber sees it.

A server loads the new file some time after it is told (a signal locally, the kubelet's sync and
the reloader in Kubernetes); until then it still admits a removed subscriber and refuses a new
one. The reload itself has two edges (nats-server v2.15, server/reload.go reloadAuthorization and
server/auth.go processClientOrLeafAuthentication):
- every connection open but not yet past its CONNECT is judged against the new users without
  credentials, and turned away (`Authorization Violation`);
- a CONNECT whose user was looked up just before the new users were in place is given that
  user's permissions after the reload re-checked the open connections: the connection keeps
  the permissions from before for its whole life.
So `bus subscriber add` returns, and opens its provisioning connection, only once each server
given admits the subscriber's seed, and `remove` returns once each refuses it. Each answer comes
from a fresh connection judged by the new table, so both edges are behind it: a connection made
afterwards, the subscriber's own included, gets the new permissions at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Final

import nats.errors
from nats.aio.client import Client

from hostaffinity.runtime.bus.client import tls_context
from hostaffinity.runtime.process.config import NatsSettings

_ATTEMPT_SECONDS: Final = 2
_RETRY_SECONDS: Final = 0.2


class NotYet(Exception):
    """The server did not answer this attempt: unreachable, or slow."""


async def admits(url: str, name: str, seed: bytes, ca_file: str | None) -> bool:
    """Whether the server at `url` lets `name` in with `seed` now; NotYet when it cannot say."""
    client = Client()

    async def quiet(_: Exception) -> None:
        """A refusal is the answer here, not an error to log."""

    try:
        await client.connect(
            [url],
            name=f"hostaffinity-subscriber-check-{name}",
            nkeys_seed_str=seed.decode(),
            inbox_prefix=f"_INBOX_{name}",
            tls=tls_context(NatsSettings(servers=[url], tls_ca_file=ca_file)),
            allow_reconnect=False,
            max_reconnect_attempts=0,
            connect_timeout=_ATTEMPT_SECONDS,
            error_cb=quiet,
        )
    except nats.errors.Error as error:
        if "authorization violation" in str(error).lower():
            return False
        raise NotYet(str(error)) from None
    except (OSError, TimeoutError) as error:
        raise NotYet(str(error) or type(error).__name__) from None
    await client.close()
    return True


async def wait_until_every_server(
    urls: Sequence[str],
    name: str,
    seed: bytes,
    ca_file: str | None,
    *,
    admitted: bool,
    wait_seconds: float,
) -> None:
    """Until each server at `urls` admits `name` (or, with `admitted=False`, refuses it), all
    within `wait_seconds`."""
    url, last = urls[0], "no answer yet"
    try:
        async with asyncio.timeout(wait_seconds):
            for url in urls:
                last = "no answer yet"
                while True:
                    try:
                        if await admits(url, name, seed, ca_file) == admitted:
                            break
                        last = "still " + ("refused" if admitted else "admitted")
                    except NotYet as error:
                        last = str(error)
                    await asyncio.sleep(_RETRY_SECONDS)
    except TimeoutError:
        wanted = "admit" if admitted else "refuse"
        raise RuntimeError(
            f"the server at {url} did not {wanted} subscriber {name} within {wait_seconds:g} s "
            f"({last}): has it reloaded subscribers.conf?"
        ) from None
