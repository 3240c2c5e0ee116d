"""Every HTTP entry point under bad input at volume (tests/platform/fuzz_inputs.py: the classes
of bad_input.py, then seeded random mutations of a valid body): the admission webhook's /mutate
over HTTPS, the extender's /filter, /prioritize and /bind, and the health and metrics paths.
Only a 4xx or a well-formed answer comes back, never a 5xx, and nothing is logged with a
traceback; the service is still ready afterwards.

Each entry point gets `HTTP_SAMPLE` inputs in CI over real HTTP; `FUZZ_INPUTS=10000` runs the
full 10,000 per entry point (docs/development.md, with the time it takes).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import ssl
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from yarl import URL

from tests.integration.extender_harness import extender
from tests.integration.webhook_harness import (
    FIXTURE,
    ready,
    service,
    shipped_configuration,  # noqa: F401 (the fixture, used by name)
    written_ca,
)
from tests.platform.fuzz_inputs import fuzz_count, fuzzed, health_requests
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.recorded_fixtures import fixture_dir

FILTER_ARGS = fixture_dir("kube-scheduler-extender") / "filter-args-full-nodes.json"
SERVER_ERROR = 500
HTTP_SAMPLE = 2_000
# Requests in flight at once, as several kube-schedulers or API servers would send them.
IN_FLIGHT = 8


def review_variants(review: dict[str, Any]) -> Iterator[tuple[str, bytes]]:
    """What only an AdmissionReview can get wrong: no uid, other kinds, operations, resources."""
    without_uid = copy.deepcopy(review)
    del without_uid["request"]["uid"]
    yield "no uid", json.dumps(without_uid).encode()
    for operation in ("UPDATE", "DELETE", "CONNECT", "EXPLODE"):
        changed = copy.deepcopy(review)
        changed["request"]["operation"] = operation
        yield f"operation {operation}", json.dumps(changed).encode()
    for kind in ("Deployment", "Node", "Secret"):
        changed = copy.deepcopy(review)
        changed["request"]["kind"]["kind"] = kind
        changed["request"]["object"]["kind"] = kind
        yield f"kind {kind}", json.dumps(changed).encode()
    uid = review["request"]["uid"].encode()
    yield "invalid UTF-8 in the uid", json.dumps(review).encode().replace(uid, uid + b"\xff", 1)
    other = copy.deepcopy(review)
    other["kind"], other["apiVersion"] = "TokenReview", "authentication.k8s.io/v1"
    yield "another review kind", json.dumps(other).encode()
    no_object = copy.deepcopy(review)
    no_object["request"]["object"] = None
    yield "no object", json.dumps(no_object).encode()


def bodies(valid: Any) -> Iterator[tuple[str, bytes]]:
    return fuzzed(valid, fuzz_count(HTTP_SAMPLE))


Check = Callable[[str, bytes, int, bytes], list[str]]


async def send_all(
    http: aiohttp.ClientSession,
    inputs: Iterable[tuple[str, str, str, bytes]],
    check: Check,
    tls: ssl.SSLContext | None = None,
) -> tuple[int, list[str]]:
    """Send every (name, method, url, body) with IN_FLIGHT at once; the count sent and what
    `check` found wrong in the answers."""
    problems: list[str] = []
    sent = 0
    pending = iter(inputs)

    async def worker() -> None:
        nonlocal sent
        for name, method, url, body in pending:
            try:
                async with http.request(
                    method, URL(url, encoded=True), data=body, ssl=tls
                ) as answer:
                    status, content = answer.status, await answer.read()
            except aiohttp.ClientResponseError as refused:
                # aiohttp's own 400 for a request line it cannot parse is followed by bytes
                # its client refuses to read: the status is what the server said.
                status, content = refused.status, refused.message.encode()
            problems.extend(check(name, body, status, content))
            sent += 1

    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    return sent, problems


def answers_for_its_uid(uid: Any, body: bytes, review: dict[str, Any]) -> bool:
    """Whether a 200 answers for the body's uid: the one it carries as JSON says, or, where a
    byte the webhook never decodes spoilt the JSON for Python (msgspec skips unknown fields
    unread), a uid the body names; never one it does not."""
    try:
        return bool(uid == json.loads(body)["request"]["uid"])
    except (ValueError, KeyError, TypeError):
        return isinstance(uid, str) and f'"uid": {json.dumps(uid)}'.encode() in body


def tracebacks(records: list[logging.LogRecord]) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in records if r.exc_info is not None]


def answered_well(name: str, status: int, body: bytes) -> list[str]:
    """A problem, if any: a 5xx, or a 200 whose body is not JSON."""
    if status >= SERVER_ERROR:
        return [f"{name}: {status} {body[:200]!r}"]
    if status == 200:
        try:  # numbers as text: Python's int() refuses over 4,300 digits, JSON does not
            json.loads(body, parse_int=str, parse_float=str)
        except ValueError:
            return [f"{name}: 200 with a body that is not JSON: {body[:200]!r}"]
    return []


@pytest.mark.usefixtures("shipped_configuration")
async def test_the_webhook_answers_bad_reviews_with_4xx_or_a_review(
    kube_double: KubeDouble,
    nats_server: NatsServer,
    kubeconfig: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    review = json.loads(FIXTURE.read_text())["reviews"][0]["request_body"]

    def check(name: str, body: bytes, status: int, answer: bytes) -> list[str]:
        problems = answered_well(name, status, answer)
        if status == 200 and not problems:
            uid = json.loads(answer).get("response", {}).get("uid")
            if not answers_for_its_uid(uid, body, review):
                problems.append(f"{name}: answered for uid {uid!r}")
        return problems

    async with service(nats_server, kubeconfig, kube_double) as running:
        ca = written_ca(kube_double)
        assert ca is not None
        trust = ssl.create_default_context(cadata=ca.decode())
        url = f"https://127.0.0.1:{running.webhook.port}/mutate"
        inputs = [*bodies(review), *review_variants(review)]
        async with aiohttp.ClientSession() as http:
            sent, problems = await send_all(
                http, ((name, "POST", url, body) for name, body in inputs), check, trust
            )
        assert await ready(running.health_port)
    assert sent == len(inputs) >= fuzz_count(HTTP_SAMPLE)
    assert problems == [], "\n".join(problems)
    assert tracebacks(caplog.records) == []


def answered(name: str, body: bytes, status: int, answer: bytes) -> list[str]:
    return answered_well(name, status, answer)


@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind"])
async def test_the_extender_answers_bad_arguments_with_4xx_or_a_result(
    verb: str, nats_server: NatsServer, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    arguments = json.loads(FILTER_ARGS.read_text())
    binding = {"PodName": "p", "PodNamespace": "default", "PodUID": "u", "Node": "n"}
    valid = binding if verb == "bind" else arguments
    async with extender(nats_server, kubeconfig) as running, aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{running.server.port}/{verb}"
        sent, problems = await send_all(
            http, ((name, "POST", url, body) for name, body in bodies(valid)), answered
        )
        assert await ready(running.health_port)
    assert sent == fuzz_count(HTTP_SAMPLE)
    assert problems == [], "\n".join(problems)
    assert tracebacks(caplog.records) == []


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
async def test_health_and_metrics_answer_any_request_without_a_5xx(
    path: str, nats_server: NatsServer, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def no_5xx(name: str, body: bytes, status: int, answer: bytes) -> list[str]:
        return [f"{name}: {status} {answer[:100]!r}"] if status >= SERVER_ERROR else []

    async with extender(nats_server, kubeconfig) as running, aiohttp.ClientSession() as http:
        base = f"http://127.0.0.1:{running.health_port}"
        requests = (
            (name, method, base + target, body)
            for name, method, target, body in health_requests(path, fuzz_count(HTTP_SAMPLE))
        )
        sent, problems = await send_all(http, requests, no_5xx)
        assert await ready(running.health_port)
    assert sent == fuzz_count(HTTP_SAMPLE)
    assert problems == [], "\n".join(problems)
    assert tracebacks(caplog.records) == []
