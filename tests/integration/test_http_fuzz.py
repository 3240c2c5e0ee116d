"""Every HTTP entry point under bad input (tests/platform/bad_input.py): the admission webhook's
/mutate over HTTPS, the extender's /filter, /prioritize and /bind, and every service's health
and metrics paths. Only a 4xx or a well-formed answer comes back, never a 5xx, and nothing is
logged with a traceback; the service is still ready afterwards.
"""

from __future__ import annotations

import copy
import json
import logging
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.extender_harness import extender
from tests.integration.webhook_harness import (
    FIXTURE,
    ready,
    service,
    shipped_configuration,  # noqa: F401 (the fixture, used by name)
    written_ca,
)
from tests.platform.bad_input import malformed, wrong_types
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.recorded_fixtures import fixture_dir

FILTER_ARGS = fixture_dir("kube-scheduler-extender") / "filter-args-full-nodes.json"
SERVER_ERROR = 500


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
    encoded = json.dumps(valid).encode()
    yield from malformed(encoded)
    yield from wrong_types(valid)


def uid_in(body: bytes, review: dict[str, Any]) -> Any:
    """The uid a 200 must answer for: the body's, or the valid review's where only a field the
    webhook does not read was spoilt (msgspec skips unknown fields without decoding them)."""
    try:
        return json.loads(body)["request"]["uid"]
    except (ValueError, KeyError, TypeError):
        return review["request"]["uid"]


def tracebacks(records: list[logging.LogRecord]) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in records if r.exc_info is not None]


def answered_well(name: str, status: int, body: bytes) -> list[str]:
    """A problem, if any: a 5xx, or a 200 whose body is not JSON."""
    if status >= SERVER_ERROR:
        return [f"{name}: {status} {body[:200]!r}"]
    if status == 200:
        try:
            json.loads(body)
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
    problems: list[str] = []
    async with service(nats_server, kubeconfig, kube_double) as running:
        ca = written_ca(kube_double)
        assert ca is not None
        trust = ssl.create_default_context(cadata=ca.decode())
        url = f"https://127.0.0.1:{running.webhook.port}/mutate"
        sent = 0
        async with aiohttp.ClientSession() as http:
            for name, body in [*bodies(review), *review_variants(review)]:
                async with http.post(url, data=body, ssl=trust) as response:
                    answer = await response.read()
                sent += 1
                problems += answered_well(name, response.status, answer)
                if response.status == 200:
                    uid = json.loads(answer).get("response", {}).get("uid")
                    if uid != uid_in(body, review):
                        problems.append(f"{name}: answered for uid {uid!r}")
        assert await ready(running.health_port)
    assert sent > 500
    assert problems == [], "\n".join(problems)
    assert tracebacks(caplog.records) == []


async def test_the_extender_answers_bad_arguments_with_4xx_or_a_result(
    nats_server: NatsServer, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    arguments = json.loads(FILTER_ARGS.read_text())
    binding = {"PodName": "p", "PodNamespace": "default", "PodUID": "u", "Node": "n"}
    problems: list[str] = []
    async with extender(nats_server, kubeconfig) as running, aiohttp.ClientSession() as http:
        base = f"http://127.0.0.1:{running.server.port}"
        for verb, valid in (("filter", arguments), ("prioritize", arguments), ("bind", binding)):
            for name, body in bodies(valid):
                async with http.post(f"{base}/{verb}", data=body) as response:
                    problems += answered_well(
                        f"{verb}: {name}", response.status, await response.read()
                    )
        assert await ready(running.health_port)
    assert problems == [], "\n".join(problems)
    assert tracebacks(caplog.records) == []


async def test_health_and_metrics_answer_any_method_and_body_without_a_5xx(
    nats_server: NatsServer, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    problems: list[str] = []
    async with extender(nats_server, kubeconfig) as running, aiohttp.ClientSession() as http:
        base = f"http://127.0.0.1:{running.health_port}"
        for path in ("/healthz", "/readyz", "/metrics", "/nope", "/metrics/../healthz", "/%ff"):
            for method in ("GET", "POST", "PUT", "DELETE", "PATCH"):
                for name, body in malformed(b"{}"):
                    async with http.request(method, base + path, data=body) as response:
                        answer = await response.read()
                    if response.status >= SERVER_ERROR:
                        problems.append(
                            f"{method} {path} {name}: {response.status} {answer[:100]!r}"
                        )
        assert await ready(running.health_port)
    assert problems == [], "\n".join(problems)
    assert tracebacks(caplog.records) == []
