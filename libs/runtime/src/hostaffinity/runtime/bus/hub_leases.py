"""Keys on the fleet hub that exactly one install may hold at a time (a fleet group's DRS rule):
read, created, renewed and deleted from an install's own bus, through the hub's JetStream domain.

An install's NATS servers join the hub as a leaf node, each side with its own JetStream domain,
so a request for `$JS.<hub domain>.API.>` reaches the hub's JetStream. nats-py's KeyValue only
addresses a bucket of its own domain; the writes here are sent as nats.go sends them to another
domain (kv.go, kvSubjectsPreDomainTmpl): on `$JS.<domain>.API.$KV.<bucket>.<key>`, which the
leaf node connection maps back to `$KV.<bucket>.<key>` in the hub's domain, each carrying
`Nats-Expected-Last-Subject-Sequence` so the hub refuses a write that did not see the key's last
one (JetStream error 10071, or 10164 on a replicated stream). The current value is read with a
stream message get on the bucket's stream in that domain. A key the bucket's max age expired,
or one deleted, reads as free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import BadRequestError, NotFoundError

KV_OPERATION: Final = "KV-Operation"
_GONE: Final = frozenset({"DEL", "PURGE"})
EXPECTED_LAST_SUBJECT_SEQUENCE: Final = "Nats-Expected-Last-Subject-Sequence"
# "wrong last sequence" (10071); a replicated stream says "key revision mismatch" (10164).
_WRONG_LAST: Final = frozenset({10071, 10164})


class LeaseTaken(Exception):
    """Someone wrote the key after the revision this write expected: it is not ours."""


@dataclass(frozen=True, slots=True)
class HubKey:
    """A key's value as the hub holds it (None: free) and the revision a write must expect."""

    value: bytes | None
    revision: int


class HubLeases:
    """One bucket on the hub, in the hub's JetStream domain."""

    def __init__(self, nc: Client, domain: str, bucket: str, *, timeout: float = 2.0) -> None:
        self._js: JetStreamContext = nc.jetstream(domain=domain, timeout=timeout)
        self._domain = domain
        self._bucket = bucket
        self._stream = f"KV_{bucket}"
        self._timeout = timeout

    @property
    def domain(self) -> str:
        return self._domain

    async def max_age_seconds(self) -> float:
        """How long the hub keeps a key nobody rewrites (the bucket's max age; 0: for ever)."""
        info = await self._js.stream_info(self._stream)
        return float(info.config.max_age or 0.0)

    async def read(self, key: str) -> HubKey:
        try:
            message = await self._js.get_last_msg(self._stream, f"$KV.{self._bucket}.{key}")
        except NotFoundError:
            return HubKey(None, 0)
        operation = (message.headers or {}).get(KV_OPERATION)
        return HubKey(None if operation in _GONE else message.data, message.seq or 0)

    async def write(self, key: str, value: bytes, after: int) -> int:
        """Create (`after` 0, or the revision of its deletion) or renew (`after` the revision
        read or written last); the new revision. Raises `LeaseTaken` when `after` is not the
        key's last revision any more."""
        return await self._publish(key, value, after, {})

    async def delete(self, key: str, after: int) -> None:
        """Let go of the key, unless someone wrote it after `after`."""
        await self._publish(key, b"", after, {KV_OPERATION: "DEL"})

    async def _publish(self, key: str, value: bytes, after: int, headers: dict[str, str]) -> int:
        subject = f"$JS.{self._domain}.API.$KV.{self._bucket}.{key}"
        headers = {**headers, EXPECTED_LAST_SUBJECT_SEQUENCE: str(after)}
        try:
            ack = await self._js.publish(subject, value, timeout=self._timeout, headers=headers)
        except BadRequestError as error:
            if error.err_code in _WRONG_LAST:
                raise LeaseTaken(f"{key}: written since revision {after}") from error
            raise
        return ack.seq
