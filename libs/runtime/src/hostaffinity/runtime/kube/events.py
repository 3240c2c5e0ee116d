"""Kubernetes Events about the objects a service acts on: how bad input reaches an operator.

A problem seen again is one Event *series*: repeats of the same (object, reason, message) raise
`count` and `lastTimestamp` on the Event already written instead of creating new ones, as
client-go's recorder does (k8s.io/client-go/tools/record/events_cache.go, v1.36: `EventLogger`
counts repeats in an LRU of 4096 entries; the spam filter is a token bucket, burst 25, one token
per 5 minutes). Here each series has its own bucket: a repeat that finds it empty is counted
locally and its count goes out with the next write, so the API sees at most `burst` writes at
once and then one per `refill_seconds` per series, and the count stays true. The series table is
an LRU of `max_series` entries, so memory is bounded however many objects misbehave; an evicted
series that recurs starts a new Event.

Recording never raises: an Event that cannot be written is logged and tried again with the next
repeat, so reporting a problem never becomes a second problem. An Event the server no longer has
(Events expire, one hour by default) is written anew with the series' count.
"""

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.runtime.kube.client import KubeClient, ResourceRef
from hostaffinity.schema import utc_timestamp

log = logging.getLogger(__name__)

# A core/v1 Event about a cluster-scoped object must live in "default" (the API server answers
# 422 otherwise; see tests/fixtures/kube-apiserver/06-create-events.json, E5).
CLUSTER_SCOPED_EVENT_NAMESPACE = "default"
# client-go's maxLruCacheEntries, defaultSpamBurst and 1/defaultSpamQPS.
MAX_SERIES = 4096
BURST = 25
REFILL_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an Event is about."""

    kind: str
    name: str
    uid: str = ""
    namespace: str = ""
    api_version: str = "v1"


_SeriesKey = tuple[ObjectRef, str, str]


@dataclass(slots=True)
class _Series:
    """One (object, reason, message): how often it happened, and the Event that says so."""

    count: int
    tokens: float
    refilled_at: float
    name: str = ""  # empty until the Event is created
    namespace: str = ""

    def take_token(self, now: float, burst: int, refill_seconds: float) -> bool:
        self.tokens = min(burst, self.tokens + (now - self.refilled_at) / refill_seconds)
        self.refilled_at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class EventRecorder:
    """Writes core/v1 Events for one component (e.g. `hostaffinity-node-labeller`)."""

    def __init__(
        self,
        client: KubeClient,
        component: str,
        instance: str,
        *,
        max_series: int = MAX_SERIES,
        burst: int = BURST,
        refill_seconds: float = REFILL_SECONDS,
    ) -> None:
        self._client = client
        self._component = component
        self._instance = instance
        self._max_series = max_series
        self._burst = burst
        self._refill_seconds = refill_seconds
        self._series: OrderedDict[_SeriesKey, _Series] = OrderedDict()

    async def record(
        self,
        about: ObjectRef,
        reason: str,
        message: str,
        kind: Literal["Normal", "Warning"] = "Warning",
    ) -> bool:
        """Count one occurrence; True when it was written now (created or its count raised),
        False when the rate limit held it back or the API failed (the next repeat carries it)."""
        series = self._occurrence((about, reason, message))
        if not series.take_token(time.monotonic(), self._burst, self._refill_seconds):
            return False
        now = utc_timestamp()
        try:
            if not (series.name and await self._raise_count(series, now)):
                await self._create(about, series, reason, message, kind, now)
        except Exception:  # an Event is best effort; never fail the caller
            log.exception("could not record event %s on %s %s", reason, about.kind, about.name)
            return False
        return True

    def _occurrence(self, key: _SeriesKey) -> _Series:
        """The key's series with this occurrence counted; the least recently seen is forgotten
        when the table is full."""
        series = self._series.get(key)
        if series is not None:
            self._series.move_to_end(key)
            series.count += 1
            return series
        series = _Series(count=1, tokens=self._burst, refilled_at=time.monotonic())
        self._series[key] = series
        if len(self._series) > self._max_series:
            self._series.popitem(last=False)
        return series

    async def _raise_count(self, series: _Series, now: str) -> bool:
        """PATCH the series' count onto its Event; False when the server no longer has it."""
        try:
            await self._client.request(
                "PATCH",
                _events(series.namespace).path(series.name),
                body={"count": series.count, "lastTimestamp": now},
                content_type="application/merge-patch+json",
            )
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    async def _create(
        self,
        about: ObjectRef,
        series: _Series,
        reason: str,
        message: str,
        kind: str,
        now: str,
    ) -> None:
        namespace = about.namespace or CLUSTER_SCOPED_EVENT_NAMESPACE
        name = f"{about.name}.{time.time_ns():x}"
        body = self._body(about, name, namespace, reason, message, kind, now, series.count)
        await self._client.request("POST", _events(namespace).path(), body=body)
        series.name, series.namespace = name, namespace

    def tracked_series(self) -> int:
        """How many series the recorder remembers (bounded by `max_series`)."""
        return len(self._series)

    def _body(
        self,
        about: ObjectRef,
        name: str,
        namespace: str,
        reason: str,
        message: str,
        kind: str,
        now: str,
        count: int,
    ) -> dict[str, object]:
        involved: dict[str, str] = {
            "apiVersion": about.api_version,
            "kind": about.kind,
            "name": about.name,
        }
        if about.uid:
            involved["uid"] = about.uid
        if about.namespace:
            involved["namespace"] = about.namespace
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": kind,
            "count": count,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "reportingInstance": self._instance,
        }


def _events(namespace: str) -> ResourceRef:
    return ResourceRef("", "v1", "events", namespace)
