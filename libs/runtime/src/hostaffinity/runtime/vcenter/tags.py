"""vCenter's tags and tag associations, read from the vSphere Automation (REST) API.

Tags are not in the SOAP API pyVmomi speaks: they live in the Automation API under `/rest`
(`com.vmware.cis.tagging`), with a session of its own made from the same credentials
(POST /rest/com/vmware/cis/session with basic auth; the `vmware-api-session-id` header after).
`/rest` is served by vCenter 6.5 to 8 and by vcsim (govmomi vapi/simulator); the cloud provider
reads the same API through govmomi's vapi/tags (kubernetes/cloud-provider-vsphere
pkg/common/connectionmanager/zones.go, withTagsClient).

A read costs a few calls per category and one per tag, however many objects are tagged: the
categories are listed and named, the tags of the wanted ones listed and named, and their
objects fetched in one `list-attached-objects-on-tags`. Each read logs in and out, as the
cloud provider does: reads are minutes apart, and no session is left behind.

One bad entry never spoils a read: `null` where a list is expected is an empty list (govmomi's
vapi/tags/tag_association.go `AttachedObjects.ObjectIDs` has no omitempty, so a tag attached to
nothing comes as `"object_ids": null`, as does vcsim's list of no categories), unknown fields are
ignored, and an entry that does not decode (a category, a tag or an association) is left out
and named in `TagRead.skipped`, for its reader to report once; the rest is read.
"""

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import msgspec

from hostaffinity.runtime.vcenter.session import VCenterError, where
from hostaffinity.runtime.vcenter.settings import VCenterSettings
from hostaffinity.runtime.vcenter.trust import pinned_hex, ssl_context

log = logging.getLogger(__name__)

SESSION_PATH = "/rest/com/vmware/cis/session"
CATEGORY_PATH = "/rest/com/vmware/cis/tagging/category"
TAG_PATH = "/rest/com/vmware/cis/tagging/tag"
ASSOCIATION_PATH = "/rest/com/vmware/cis/tagging/tag-association"
SESSION_HEADER = "vmware-api-session-id"
# Requests in flight at once during a read (one per tag at most).
CONCURRENCY = 8

T = TypeVar("T")


class TagReadError(VCenterError):
    """The tags could not be read; the message says which vCenter, which call and why."""


class _Named(msgspec.Struct):
    id: str
    name: str


class _Tag(msgspec.Struct):
    id: str
    name: str
    category_id: str


class _ObjectId(msgspec.Struct):
    id: str
    type: str = ""


class _Attached(msgspec.Struct):
    tag_id: str
    object_ids: list[_ObjectId] | None = None  # null: attached to nothing


@dataclass(frozen=True, slots=True)
class TagRead:
    """Tagged objects by moid: category name -> tag names (sorted); the categories asked for
    that vCenter does not have (a typo in the config, or not created yet); and the entries of
    vCenter's answers left out because they do not decode, each named with the call and the
    entry (the same bad entry gives the same line at every read)."""

    tags: Mapping[str, Mapping[str, tuple[str, ...]]]
    missing_categories: tuple[str, ...]
    skipped: tuple[str, ...] = ()


async def read_tags(
    settings: VCenterSettings, categories: Collection[str], *, timeout_seconds: float = 60.0
) -> TagRead:
    """The tags of `categories` and the objects they are attached to; raises TagReadError.

    Each call is limited to `timeout_seconds` by asyncio, not by aiohttp's `total`, which on
    Python 3.11 turns a cancellation coming as it expires into a TimeoutError (a TagReadError
    here, which the refresh loop retries): see KubeClient."""
    base = f"{settings.protocol}://{settings.host}:{settings.port}"
    timeout = aiohttp.ClientTimeout(sock_connect=timeout_seconds)
    connector = aiohttp.TCPConnector(limit=CONCURRENCY, ssl=_tls(settings))
    async with aiohttp.ClientSession(base, timeout=timeout, connector=connector) as http:
        try:
            async with asyncio.timeout(timeout_seconds):
                session_id = await _login(http, settings)
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise TagReadError(
                f"vCenter {where(settings)}: tag API login failed: {error!r}"
            ) from error
        api = _Api(http, {SESSION_HEADER: session_id}, settings, timeout_seconds)
        try:
            return await _read(api, set(categories))
        finally:
            await api.logout()


class _Api:
    """Calls on one Automation API session, each answer's `value` decoded; the entries that do
    not decode are collected in `skipped`."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        headers: dict[str, str],
        settings: VCenterSettings,
        timeout_seconds: float,
    ) -> None:
        self._http = http
        self._headers = headers
        self._settings = settings
        self._timeout_seconds = timeout_seconds
        # What the answers held that did not decode, in the order met.
        self.skipped: list[str] = []

    async def list_of(
        self, method: str, path: str, kind: type[T], *, action: str = "", body: Any = None
    ) -> list[T]:
        """A list answer's entries that decode as `kind` (null: none); each other is skipped."""
        value = await self.call(method, path, action=action, body=body)
        entries = [] if bytes(value) == b"null" else self._whole(method, path, value, _Entries)
        call = f"{method} {path}{f' ({action})' if action else ''}"
        found = (self._entry(call, entry, kind) for entry in entries)
        return [item for item in found if item is not None]

    async def one(self, path: str, kind: type[T]) -> T | None:
        """GET `path`'s answer as `kind`, or None (skipped) when it does not decode."""
        return self._entry(f"GET {path}", await self.call("GET", path), kind)

    def _entry(self, call: str, entry: msgspec.Raw, kind: type[T]) -> T | None:
        try:
            return msgspec.json.decode(entry, type=kind)
        except msgspec.DecodeError as error:
            text = bytes(entry)[:200].decode("utf-8", "replace")
            self.skipped.append(f"{call}: {error}: {text}")
            return None

    def _whole(self, method: str, path: str, raw: bytes | msgspec.Raw, kind: type[T]) -> T:
        """`raw` as `kind`; a TagReadError when the answer as a whole is not what it should be."""
        try:
            return msgspec.json.decode(raw, type=kind)
        except msgspec.DecodeError as error:
            raise TagReadError(
                f"vCenter {where(self._settings)}: {method} {path} answered {error}"
            ) from error

    async def call(
        self, method: str, path: str, *, action: str = "", body: Any = None
    ) -> msgspec.Raw:
        """The answer's `value`, undecoded."""
        params = {"~action": action} if action else None
        try:
            async with (
                asyncio.timeout(self._timeout_seconds),
                self._http.request(
                    method, path, params=params, json=body, headers=self._headers
                ) as answer,
            ):
                payload = await answer.read()
                if answer.status != 200:
                    text = payload[:200].decode("utf-8", "replace").strip()
                    raise TagReadError(
                        f"vCenter {where(self._settings)}: {method} {path}"
                        f"{f' ({action})' if action else ''} answered HTTP {answer.status} {text}"
                    )
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise TagReadError(
                f"vCenter {where(self._settings)}: {method} {path} failed: {error!r}"
            ) from error
        return self._whole(method, path, payload, _Answer).value

    async def logout(self) -> None:
        try:
            async with (
                asyncio.timeout(self._timeout_seconds),
                self._http.delete(SESSION_PATH, headers=self._headers),
            ):
                pass
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            log.debug("tag API logout failed: %r (the session idles out)", error)


class _Answer(msgspec.Struct):
    """Every `/rest` answer wraps its result in `value`."""

    value: msgspec.Raw


_Entries = list[msgspec.Raw]


def _value(payload: bytes, kind: type[T]) -> T:
    return msgspec.json.decode(msgspec.json.decode(payload, type=_Answer).value, type=kind)


async def _login(http: aiohttp.ClientSession, settings: VCenterSettings) -> str:
    auth = {"Authorization": aiohttp.encode_basic_auth(settings.username, settings.password)}
    async with http.post(SESSION_PATH, headers=auth) as answer:
        if answer.status in (401, 403):
            raise TagReadError(
                f"vCenter {where(settings)} refused the tag API login of {settings.username!r} "
                f"(HTTP {answer.status})"
            )
        if answer.status != 200:
            raise TagReadError(
                f"vCenter {where(settings)}: tag API login answered HTTP {answer.status}"
            )
        try:
            return _value(await answer.read(), str)
        except msgspec.DecodeError as error:
            raise TagReadError(
                f"vCenter {where(settings)}: tag API login answered {error}"
            ) from error


async def _read(api: _Api, wanted: set[str]) -> TagRead:
    category_ids = await api.list_of("GET", CATEGORY_PATH, str)
    categories = await _each(category_ids, lambda cid: api.one(f"{CATEGORY_PATH}/id:{cid}", _Named))
    chosen = {c.id: c.name for c in categories if c is not None and c.name in wanted}
    tag_lists = await _each(
        list(chosen),
        lambda cid: api.list_of(
            "POST", f"{TAG_PATH}/id:{cid}", str, action="list-tags-for-category"
        ),
    )
    tag_ids = sorted({tag_id for ids in tag_lists for tag_id in ids})
    tags = {
        tag.id: tag
        for tag in await _each(tag_ids, lambda tid: api.one(f"{TAG_PATH}/id:{tid}", _Tag))
        if tag is not None
    }
    attached = (
        await api.list_of(
            "POST",
            ASSOCIATION_PATH,
            _Attached,
            action="list-attached-objects-on-tags",
            body={"tag_ids": tag_ids},
        )
        if tag_ids
        else []
    )
    by_object: dict[str, dict[str, set[str]]] = {}
    for entry in attached:
        tag = tags.get(entry.tag_id)
        if tag is None or tag.category_id not in chosen:
            continue
        for obj in entry.object_ids or []:
            names = by_object.setdefault(obj.id, {}).setdefault(chosen[tag.category_id], set())
            names.add(tag.name)
    return TagRead(
        tags={
            moid: {category: tuple(sorted(names)) for category, names in per.items()}
            for moid, per in by_object.items()
        },
        missing_categories=tuple(sorted(wanted - set(chosen.values()))),
        skipped=tuple(api.skipped),
    )


async def _each(items: list[str], fetch: Callable[[str], Awaitable[T]]) -> list[T]:
    return list(await asyncio.gather(*(fetch(item) for item in items)))


def _tls(settings: VCenterSettings) -> ssl.SSLContext | aiohttp.Fingerprint | bool:
    """The same trust as the SOAP session: a pinned thumbprint (aiohttp checks it itself; the
    pinned context's check runs only for blocking sockets), a CA bundle, or plain http."""
    if settings.protocol == "http":
        return False
    if settings.thumbprint is not None:
        return aiohttp.Fingerprint(bytes.fromhex(pinned_hex(settings.thumbprint)))
    context = ssl_context(settings)
    return context if context is not None else False
