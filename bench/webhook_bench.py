"""Admission webhook benchmark: CPU per review and reviews per second, opted-in and plain pods.

    uv run --frozen python bench/webhook_bench.py [--reviews 20000] [--https 3000]

The review bodies are the real one kube-apiserver v1.36.2 sent (shared fixture
kube-apiserver-admission/pod-create-review.json: a Deployment pod with managedFields, volumes,
tolerations, a required and a preferred hostname term) and the same pod without the opt-in
annotation ("plain": what every pod costs in cluster-wide mode, where matchConditions are off).

1. In process: decode + plan + encode, the whole work of one review, timed one by one on this
   thread's CPU clock (targets: < 0.3 ms for a plain pod, < 1 ms for an opted-in one).
2. Over HTTPS: the real server with a self-signed certificate, one review after another from a
   keep-alive client in the same process, as kube-apiserver sends them; reviews/s, latency, and
   the process's CPU per review (server and client together: an upper bound).
Prints median, p99, throughput and peak RSS. Never fails on timing.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import datetime
import json
import ssl
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
from figures import peak_rss_mib, percentile

from hostaffinity.admission_webhook.core.admission_v1 import (
    decode_review,
    encode_answer,
    mutation_for,
)
from hostaffinity.admission_webhook.core.mutation import MutationSettings, Outcome
from hostaffinity.admission_webhook.http import AdmissionWebhook
from hostaffinity.admission_webhook.metrics import AdmissionMetrics
from hostaffinity.runtime.http.certificates import issue, server_context
from hostaffinity.schema import POD_PHYSICAL_ANTI_AFFINITY, EventFactory

FIXTURE = (
    Path(__file__).resolve().parents[1]
    / "tests" / "fixtures" / "kube-apiserver-admission" / "pod-create-review.json"
)  # fmt: skip
SETTINGS = MutationSettings()


def bodies() -> dict[str, bytes]:
    """The recorded review, and the same pod without the opt-in."""
    recorded: dict[str, Any] = json.loads(FIXTURE.read_text())["reviews"][0]["request_body"]
    plain = copy.deepcopy(recorded)
    del plain["request"]["object"]["metadata"]["annotations"][POD_PHYSICAL_ANTI_AFFINITY]
    return {"opted-in": json.dumps(recorded).encode(), "plain": json.dumps(plain).encode()}


def review_once(body: bytes) -> Outcome:
    review = decode_review(body)
    mutation = mutation_for(review, SETTINGS)
    encode_answer(review, mutation)
    return mutation.outcome


def in_process(kind: str, body: bytes, reviews: int) -> None:
    outcome = review_once(body)
    for _ in range(1000):  # warm-up
        review_once(body)
    cpu_ms: list[float] = []
    started = time.perf_counter()
    for _ in range(reviews):
        before = time.thread_time_ns()
        review_once(body)
        cpu_ms.append((time.thread_time_ns() - before) / 1e6)
    wall = time.perf_counter() - started
    print(
        f"in process  {kind:9} ({outcome.value}, {len(body)} B): CPU per review median "
        f"{statistics.median(cpu_ms):.3f} ms, p99 {percentile(cpu_ms, 0.99):.3f} ms; "
        f"{reviews / wall:,.0f} reviews/s on one core"
    )


async def over_https(kind: str, body: bytes, reviews: int, trust: ssl.SSLContext, url: str) -> None:
    headers = {"Content-Type": "application/json", "User-Agent": "kube-apiserver-admission"}
    latency_ms: list[float] = []
    async with aiohttp.ClientSession() as http:
        for _ in range(100):  # warm-up, and the TLS handshake
            async with http.post(url, data=body, headers=headers, ssl=trust) as response:
                await response.read()
        cpu_before, started = time.process_time(), time.perf_counter()
        for _ in range(reviews):
            sent = time.perf_counter()
            async with http.post(url, data=body, headers=headers, ssl=trust) as response:
                await response.read()
                assert response.status == 200
            latency_ms.append((time.perf_counter() - sent) * 1000)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_before
    print(
        f"over HTTPS  {kind:9}: {reviews / wall:,.0f} reviews/s, latency median "
        f"{statistics.median(latency_ms):.2f} ms, p99 {percentile(latency_ms, 0.99):.2f} ms; "
        f"process CPU per review {cpu / reviews * 1000:.3f} ms (server + client)"
    )


async def run(reviews: int, https: int) -> None:
    samples = bodies()
    print(f"scale: {reviews} reviews per kind in process, {https} per kind over HTTPS")
    for kind, body in samples.items():
        in_process(kind, body, reviews)
    identity = issue(["127.0.0.1"], datetime.datetime.now(datetime.UTC))
    webhook = AdmissionWebhook(
        SETTINGS,
        AdmissionMetrics(),
        lambda _key, _build: None,
        EventFactory("admission-webhook"),
        max_body_bytes=4 << 20,
    )
    await webhook.start("127.0.0.1", 0, server_context(identity))
    try:
        trust = ssl.create_default_context(cadata=identity.ca_pem.decode())
        url = f"https://127.0.0.1:{webhook.port}/mutate?timeout=2s"
        for kind, body in samples.items():
            await over_https(kind, body, https, trust, url)
    finally:
        await webhook.stop()
    print(f"peak RSS {peak_rss_mib():.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reviews", type=int, default=20_000)
    parser.add_argument("--https", type=int, default=3_000)
    args = parser.parse_args()
    asyncio.run(run(args.reviews, args.https))


if __name__ == "__main__":
    main()
