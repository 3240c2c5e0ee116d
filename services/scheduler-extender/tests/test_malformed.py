"""Bad input to the extender: every malformed body is a 400 with a short reason or a 413, never a
500, and the server keeps answering; pods that are never bound cost bounded memory.

The server runs on its own event loop in a thread so hypothesis can drive it with plain blocking
HTTP calls, one example at a time.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes_asyncio.client import ApiClient, Configuration
from prometheus_client import REGISTRY

from hostaffinity.affinity.model import ObjectMeta, Pod
from hostaffinity.runtime.bus.sampled import SampledPublisher
from hostaffinity.runtime.kube.client import KubeClient
from hostaffinity.runtime.process.telemetry import setup_telemetry
from hostaffinity.scheduler_extender.binder import Binder
from hostaffinity.scheduler_extender.core.cache import ExtenderCache
from hostaffinity.scheduler_extender.http import ExtenderServer
from hostaffinity.scheduler_extender.metrics import ExtenderMetrics
from hostaffinity.schema import EventFactory

HOSTS = {"n1": "h1", "n2": "h1", "n3": "h2"}
MAX_BODY = 64 * 1024
REASON_LIMIT = 300
VERBS = ("filter", "prioritize", "bind")
POD = {"metadata": {"name": "p", "namespace": "default", "uid": "u", "labels": {"app": "a"}}}
VALID = {
    "filter": {"Pod": POD, "Nodes": None, "NodeNames": ["n1", "n3"]},
    "prioritize": {"Pod": POD, "Nodes": None, "NodeNames": ["n1", "n3"]},
    "bind": {"PodName": "p", "PodNamespace": "default", "PodUID": "u", "Node": "n1"},
}


class ServerThread:
    """An ExtenderServer on its own loop; `post` is a blocking HTTP call to it."""

    def __init__(self, cache: ExtenderCache) -> None:
        self.cache = cache
        self.metrics = ExtenderMetrics(cache)
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.server: ExtenderServer | None = None

    async def _start(self) -> None:
        decisions = SampledPublisher("scheduler-extender", _discard, ratio=0.0, capacity=1)
        # Binds go to a closed port: a bind that decodes fails with a BindError (200 + Error).
        self._api = ApiClient(Configuration(host="http://127.0.0.1:9"))
        binder = Binder(KubeClient(self._api), 0.5)
        self.server = ExtenderServer(
            self.cache,
            binder,
            self.metrics,
            decisions,
            EventFactory("scheduler-extender"),
            max_body_bytes=MAX_BODY,
        )
        await self.server.start("127.0.0.1", 0)

    async def _stop(self) -> None:
        assert self.server is not None
        await self.server.stop()
        await self._api.close()

    def __enter__(self) -> ServerThread:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        assert self.server is not None
        self._http = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=10)
        return self

    def __exit__(self, *_: object) -> None:
        self._http.close()
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def post(self, verb: str, body: bytes) -> tuple[int, Any]:
        self._http.request("POST", f"/{verb}", body=body)
        response = self._http.getresponse()
        data = response.read()
        if response.getheader("Connection", "").lower() == "close":
            self._http.close()
        return response.status, json.loads(data) if data.startswith((b"{", b"[")) else data


async def _discard(_event: object) -> None:
    return None


@pytest.fixture
def served(make_cache: Callable[..., ExtenderCache]) -> Iterator[ServerThread]:
    with ServerThread(make_cache(HOSTS)) as running:
        yield running


def _nested(depth: int, opener: bytes) -> bytes:
    if opener == b"[":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


nesting = st.builds(
    lambda verb, depth, opener, where: (
        verb,
        b'{"Pod":' + _nested(depth, opener) + b"}" if where else _nested(depth, opener),
    ),
    st.sampled_from(VERBS),
    st.integers(10_000, 30_000),
    st.sampled_from([b"[", b"{"]),
    st.booleans(),
)
# Bytes that are never valid UTF-8: a lone continuation, an overlong form, a surrogate, 0xff.
invalid_utf8 = st.sampled_from([b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xff", b"\xc3\x28"])
bad_strings = st.builds(
    lambda verb, junk, field: (
        verb,
        json.dumps(VALID[verb]).replace(f'"{field}"', '"@@"', 1).encode().replace(b"@@", junk),
    ),
    st.sampled_from(VERBS),
    invalid_utf8,
    st.sampled_from(["p", "default", "u"]),
)
wrong_values = st.one_of(
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.lists(st.integers(), min_size=1, max_size=3),
)
wrong_types = st.builds(
    lambda verb, value, field: (verb, json.dumps({**VALID[verb], field: value}).encode()),
    st.sampled_from(("filter", "prioritize")),
    wrong_values,
    st.sampled_from(["Pod", "NodeNames", "Nodes"]),
) | st.builds(
    lambda value, field: ("bind", json.dumps({**VALID["bind"], field: value}).encode()),
    wrong_values,
    st.sampled_from(["PodName", "PodNamespace", "PodUID", "Node"]),
)
huge = st.builds(
    lambda verb, size: (verb, b'{"PodName": "' + b"x" * size + b'"}'),
    st.sampled_from(VERBS),
    st.integers(MAX_BODY, 4 * MAX_BODY),
)
garbage = st.tuples(st.sampled_from(VERBS), st.binary(min_size=0, max_size=200)).filter(
    lambda case: not case[1].strip().startswith((b"{", b"["))
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=st.one_of(nesting, bad_strings, wrong_types, huge, garbage))
def test_malformed_bodies_get_400_or_413_and_the_server_goes_on(
    served: ServerThread, case: tuple[str, bytes]
) -> None:
    verb, body = case
    status, answer = served.post(verb, body)
    if len(body) > MAX_BODY:
        assert status == 413
    else:
        assert status == 400, (status, answer)
        assert set(answer) == {"Error"}
        assert answer["Error"].startswith(f"malformed {verb} request: ")
        assert 0 < len(answer["Error"]) < REASON_LIMIT
    assert served.post("filter", json.dumps(VALID["filter"]).encode())[0] == 200


# 10,000 never-bound pods, each with a 16 KiB annotation nobody reads: kept, they would be 160 MiB
# of annotations alone. Measured growth with the defaults (capacity 10,000, only the opt-in
# annotation kept): about 7 MiB; the bound asserted leaves room for allocator noise.
NEVER_BOUND = 10_000
RSS_BOUND_MIB = 32


def rss_mib() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        pages = int(statm.read().split()[1])
    return pages * 4096 / 2**20


def test_ten_thousand_never_bound_pods_leave_rss_within_a_bound(
    make_cache: Callable[..., ExtenderCache],
) -> None:
    cache = make_cache(HOSTS)
    with ServerThread(cache) as running:
        running.post("filter", json.dumps(VALID["filter"]).encode())
        before = rss_mib()
        for i in range(NEVER_BOUND):
            pod = {"metadata": {**POD["metadata"], "name": f"p-{i}", "uid": f"u-{i}",
                                "annotations": {"note": "x" * 16384}}}  # fmt: skip
            body = {"Pod": pod, "Nodes": None, "NodeNames": ["n1", "n3"]}
            assert running.post("filter", json.dumps(body).encode())[0] == 200
        grown = rss_mib() - before
    assert len(cache.in_flight) == NEVER_BOUND
    assert all(not e.pod.metadata.annotations for e in cache.in_flight.unplaced())
    assert grown < RSS_BOUND_MIB, f"RSS grew {grown:.1f} MiB for {NEVER_BOUND} never-bound pods"


def test_in_flight_pods_are_bounded_by_count_and_age() -> None:
    now = [0.0]
    cache = ExtenderCache(inflight_capacity=3, inflight_max_age_seconds=10, clock=lambda: now[0])
    for i in range(5):
        cache.note_incoming(_pod(f"p{i}"))
    assert [e.pod.metadata.name for e in cache.in_flight.unplaced()] == ["p2", "p3", "p4"]
    assert (cache.in_flight.evicted, cache.in_flight.expired) == (2, 0)
    now[0] = 10.0
    cache.note_incoming(_pod("p5"))
    assert [e.pod.metadata.name for e in cache.in_flight.unplaced()] == ["p5"]
    assert (cache.in_flight.evicted, cache.in_flight.expired) == (2, 3)


def _pod(name: str) -> Pod:
    return Pod(metadata=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}"))


def refused_counted(path: str, status: str) -> float:
    """`hostaffinity_extender_requests_refused_total` as /metrics shows it."""
    wanted = {"path": path, "status": status}
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        for sample in metric.samples
        if sample.name == "hostaffinity_extender_requests_refused_total"
        and wanted.items() <= sample.labels.items()
    )


def test_every_refused_request_is_counted_whatever_refused_it(
    make_cache: Callable[..., ExtenderCache],
) -> None:
    setup_telemetry("hostaffinity-tests")  # the Prometheus exporter a service installs
    cases = [
        ("filter", b"{", "/filter", "400"),  # ours: does not decode
        ("bind", b'{"PodName": "' + b"x" * MAX_BODY + b'"}', "/bind", "413"),  # aiohttp's
        ("nowhere", b"{}", "other", "404"),  # the router's
    ]
    before = {case: refused_counted(case[2], case[3]) for case in cases}
    with ServerThread(make_cache(HOSTS)) as running:
        for case in cases:
            assert running.post(case[0], case[1])[0] == int(case[3])
    for case in cases:
        assert refused_counted(case[2], case[3]) == before[case] + 1, case
