"""Replays every recorded kube-apiserver v1.36.2 exchange against the Kubernetes API double.

Each fixture file is replayed once, in order, against a fresh double seeded with the objects the
recording shows existed before it began (taken from the recorded responses). Watches run in the
background while later exchanges start at their recorded offsets; server-side durations are
shrunk by `TIME_SCALE` so the suite stays fast. Each exchange is one test id and compares status,
the key-shape of the body, `kind`/`reason`/`code`, and Status messages (digits normalised,
because revisions differ between clusters).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from tests.platform.kube_double import KubeDouble
from tests.recorded_fixtures import fixture_dir

FIXTURES = fixture_dir("kube-apiserver")
TIME_SCALE = 0.2
MAX_GAP_S = 0.5
USER_AGENTS = {
    "kubernetes_asyncio": "OpenAPI-Generator/36.1.0/python",
    "raw aiohttp": "Python/3.11 aiohttp/3.14.5",
}
BAD_TOKEN = "not-a-valid-token"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def _items(name: str, step: int) -> list[dict[str, Any]]:
    """List items of a recorded response, with the kind/apiVersion a list leaves out."""
    body = _load(name)["exchanges"][step]["response"]["body"]
    kind = body["kind"].removesuffix("List")
    return [{"apiVersion": body["apiVersion"], "kind": kind, **item} for item in body["items"]]


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _patch_node_before_04() -> list[dict[str, Any]]:
    """04 starts from patch-node as its first answer shows it, minus the labels P1 added."""
    node = copy.deepcopy(_load("04-patch-node-labels.json")["exchanges"][0]["response"]["body"])
    added = ("example.com/rack", "example.com/tier")
    for label in added:
        del node["metadata"]["labels"][label]
    owned = node["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"]["f:labels"]
    for label in added:
        del owned[f"f:{label}"]
    return [node]


def _seed(name: str) -> list[dict[str, Any]]:
    nodes = _items("01-list-nodes-and-pods.json", 0)
    seeds: dict[str, Any] = {
        "01-list-nodes-and-pods.json": lambda: [
            _namespace("ha-apps"),
            _namespace("ha-batch"),
            *nodes,
            *_items(name, 4),
            *_items(name, 6),
        ],
        "02-watch-nodes-bookmarks.json": lambda: _items(name, 0),
        "02-watch-nodes-bookmarks-etcd3.6.json": lambda: _items(name, 0),
        "03-watch-too-old-resourceversion-410.json": lambda: _items(name, 0),
        "04-patch-node-labels.json": _patch_node_before_04,
        "05-update-node-stale-resourceversion-409.json": lambda: [
            _load(name)["exchanges"][0]["response"]["body"]
        ],
        "06-create-events.json": lambda: [_namespace("ha-apps")],
        "07-leases-leader-election.json": list,
        "08-pod-eviction.json": lambda: [_namespace("evict"), *nodes],
        "09-pod-binding.json": lambda: [_namespace("ha-apps"), *nodes],
        "10-kubevirt-vmi-and-migration.json": lambda: [_namespace("kv")],
        "11-namespaces-with-labels.json": lambda: _items(name, 0),
        "12-unauthorized-and-forbidden.json": lambda: [_namespace("authz"), *nodes],
    }
    result: list[dict[str, Any]] = seeds[name]()
    return result


def _churn(double: KubeDouble, count: int) -> None:
    """Annotation updates on worker-3 made around the API, as 03's side actions were."""
    for i in range(count):
        node = double.read("v1", "nodes", "worker-3")
        assert node is not None
        node["metadata"].setdefault("annotations", {})["example.com/churn"] = f"c-{i}"
        double.write(node, manager=USER_AGENTS["kubernetes_asyncio"].split("/")[0])


def _side_actions(name: str, double: KubeDouble) -> dict[int, list[Any]]:
    """Side actions, keyed by the exchange they precede. Sleeps need no replay, and the
    `etcdctl compact` did not reach the watch cache, so only the churn and the ageing-out
    (which `compact()` stands for) act on the double."""
    if name != "03-watch-too-old-resourceversion-410.json":
        return {}
    return {
        2: [lambda: _churn(double, 120)],
        9: [lambda: _churn(double, 260), double.compact],
    }


def _auth(name: str, step: int, double: KubeDouble, sa_token: str | None) -> str | None:
    """Which credentials each exchange used (only 12 varies them)."""
    if name != "12-unauthorized-and-forbidden.json":
        return double.token
    return {0: None, 1: BAD_TOKEN, 2: None, 3: BAD_TOKEN, 4: double.token, 5: double.token}.get(
        step, sa_token
    )


@dataclass
class Outcome:
    status: int
    headers: dict[str, str]
    body: Any = None
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Translation:
    """Maps recorded resourceVersions and uids to the double's, learned from the answers."""

    values: dict[str, str] = field(default_factory=dict)

    def learn(self, recorded: Any, actual: Any) -> None:
        if isinstance(recorded, dict) and isinstance(actual, dict):
            for key in ("resourceVersion", "uid"):
                if isinstance(recorded.get(key), str) and isinstance(actual.get(key), str):
                    self._remember(key, recorded[key], actual[key])
            for key in recorded.keys() & actual.keys():
                self.learn(recorded[key], actual[key])
        elif isinstance(recorded, list) and isinstance(actual, list):
            for rec, act in zip(recorded, actual, strict=False):
                self.learn(rec, act)

    def _remember(self, key: str, recorded: str, actual: str) -> None:
        """A recorded list RV can equal its newest item's RV; the list's (larger) one wins."""
        known = self.values.get(recorded)
        if key == "resourceVersion" and known is not None and int(known) > int(actual):
            return
        self.values[recorded] = actual

    def body(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: self.values.get(v, v)
                if k in ("resourceVersion", "uid") and isinstance(v, str)
                else self.body(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self.body(v) for v in value]
        return value

    def query(self, query: dict[str, str] | None) -> dict[str, str]:
        out = dict(query or {})
        if "resourceVersion" in out:
            out["resourceVersion"] = self.values.get(out["resourceVersion"], out["resourceVersion"])
        if "continue" in out:
            out["continue"] = self._continue(out["continue"])
        return out

    def _continue(self, token: str) -> str:
        try:
            data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        except ValueError:
            return token
        data["rv"] = int(self.values.get(str(data["rv"]), data["rv"]))
        raw = json.dumps(data, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _is_watch(request: dict[str, Any]) -> bool:
    return str((request.get("query") or {}).get("watch", "")).lower() in ("true", "1")


async def _send(
    session: aiohttp.ClientSession,
    double: KubeDouble,
    exchange: dict[str, Any],
    translation: Translation,
    token: str | None,
    headers_seen: asyncio.Event,
) -> Outcome:
    request = exchange["request"]
    headers = {k: v for k, v in request["headers"].items() if v is not None}
    headers["User-Agent"] = USER_AGENTS[exchange["via"]]
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = request["body"]
    data = None
    if isinstance(body, str):
        data = body.encode()
    elif body is not None:
        data = json.dumps(translation.body(body)).encode()
    path = request["path"].split("?")[0]
    async with session.request(
        request["method"],
        double.url + path,
        params=translation.query(request.get("query")),
        data=data,
        headers=headers,
    ) as response:
        headers_seen.set()
        kept = {
            k: response.headers[k]
            for k in ("Content-Type", "Retry-After", "Warning")
            if k in response.headers
        }
        if _is_watch(request) and response.status == 200:
            events = [json.loads(line) async for line in response.content if line.strip()]
            return Outcome(response.status, kept, events=events)
        return Outcome(response.status, kept, body=await response.json(content_type=None))


def _recorded_end(exchange: dict[str, Any]) -> float:
    response = exchange["response"] or {}
    return float(exchange.get("t_start_ms", 0.0)) + float(response.get("stream_closed_at_ms", 0.0))


def _learn(translation: Translation, exchange: dict[str, Any], outcome: Outcome) -> None:
    response = exchange["response"]
    if "stream" in response:
        recorded = [s["event"]["object"] for s in response["stream"] if "event" in s]
        translation.learn(recorded, [e["object"] for e in outcome.events])
    else:
        translation.learn(response.get("body"), outcome.body)


async def _replay_file(name: str) -> list[Outcome | None]:
    case = _load(name)
    double = KubeDouble(
        time_scale=TIME_SCALE, watch_progress="etcd 3.4" not in case["recorded_from"]
    )
    await double.start()
    translation = Translation()
    for obj in _seed(name):
        translation.learn(obj, double.seed(obj))
    actions = _side_actions(name, double)
    outcomes: list[Outcome | None] = [None] * len(case["exchanges"])
    background: dict[int, asyncio.Task[Outcome]] = {}
    sa_token: str | None = None
    previous_ms = 0.0
    try:
        async with aiohttp.ClientSession() as session:
            for step, exchange in enumerate(case["exchanges"]):
                start_ms = float(exchange.get("t_start_ms", previous_ms))
                for index, task in list(background.items()):
                    if _recorded_end(case["exchanges"][index]) <= start_ms:
                        outcomes[index] = await task
                        _learn(translation, case["exchanges"][index], await task)
                        del background[index]
                await asyncio.sleep(min((start_ms - previous_ms) / 1000 * TIME_SCALE, MAX_GAP_S))
                previous_ms = start_ms
                for action in actions.get(step, []):
                    action()
                if exchange["request"] is None:
                    continue
                seen = asyncio.Event()
                token = _auth(name, step, double, sa_token)
                task = asyncio.create_task(
                    _send(session, double, exchange, translation, token, seen)
                )
                if _is_watch(exchange["request"]):
                    background[step] = task
                    await seen.wait()
                    continue
                outcome = await task
                outcomes[step] = outcome
                _learn(translation, exchange, outcome)
                if isinstance(outcome.body, dict) and outcome.body.get("kind") == "TokenRequest":
                    sa_token = outcome.body["status"]["token"]
            for index, task in background.items():
                outcomes[index] = await task
    finally:
        await double.stop()
    return outcomes


@functools.cache
def _replayed(name: str) -> list[Outcome | None]:
    return asyncio.run(_replay_file(name))


_DIGITS = re.compile(r"\d+")
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _message(text: str) -> str:
    return _DIGITS.sub("N", _UID.sub("UID", text))


def _category(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def assert_same_shape(expected: Any, actual: Any, where: str = "") -> None:
    """Same keys recursively, same list lengths, same kind/reason/code, same Status message."""
    if isinstance(expected, str) and expected.startswith(("<omitted>", "<redacted")):
        return
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected an object, got {actual!r}"
        assert set(expected) == set(actual), (
            f"{where}: keys differ: missing {sorted(set(expected) - set(actual))}, "
            f"extra {sorted(set(actual) - set(expected))}"
        )
        for key in ("kind", "reason", "code"):
            if key in expected and not isinstance(expected[key], dict | list):
                assert expected[key] == actual[key], f"{where}.{key}: {actual[key]!r}"
        if expected.get("kind") == "Status":
            assert expected.get("status") == actual.get("status"), f"{where}.status"
            if "message" in expected:
                assert _message(expected["message"]) == _message(actual["message"]), where
        if "name" in expected and where.endswith("metadata"):
            assert expected["name"] == actual["name"], f"{where}.name"
        for key, value in expected.items():
            assert_same_shape(value, actual[key], f"{where}.{key}")
        return
    if isinstance(expected, list) and where.endswith("managedFields"):
        # Entries sort by time: their order depends on timing, their set does not.
        expected, actual = _by_owner(expected), _by_owner(actual)
    if isinstance(expected, list):
        assert isinstance(actual, list), f"{where}: expected a list, got {actual!r}"
        assert len(expected) == len(actual), f"{where}: {len(actual)} items, not {len(expected)}"
        for i, (exp, act) in enumerate(zip(expected, actual, strict=True)):
            assert_same_shape(exp, act, f"{where}[{i}]")
        return
    assert _category(expected) == _category(actual), f"{where}: {actual!r} vs {expected!r}"


def _by_owner(entries: Any) -> Any:
    if not isinstance(entries, list):
        return entries
    return sorted(
        entries,
        key=lambda e: (e.get("operation", ""), e.get("manager", ""), e.get("subresource", "")),
    )


def _is_initial_end(event: dict[str, Any]) -> bool:
    annotations = event["object"].get("metadata", {}).get("annotations") or {}
    return event["type"] == "BOOKMARK" and annotations.get("k8s.io/initial-events-end") == "true"


def assert_same_stream(response: dict[str, Any], events: list[dict[str, Any]]) -> None:
    """Same event types in order (BOOKMARK count may vary with timing), same object shapes."""
    recorded = response["stream"]
    got = [e for e in events if e["type"] != "BOOKMARK" or _is_initial_end(e)]
    omitted = next((i for i, s in enumerate(recorded) if "omitted_events" in s), None)
    wanted = [s["event"] for s in recorded if "event" in s]
    wanted = [e for e in wanted if e["type"] != "BOOKMARK" or _is_initial_end(e)]
    if omitted is None:
        assert [e["type"] for e in got] == [e["type"] for e in wanted]
        pairs = list(zip(wanted, got, strict=True))
    else:
        assert len(events) == response["stream_event_count"]
        head, tail = wanted[:omitted], wanted[omitted:]
        assert [e["type"] for e in got[:omitted]] == [e["type"] for e in head]
        assert [e["type"] for e in got[len(got) - len(tail) :]] == [e["type"] for e in tail]
        pairs = [*zip(head, got[:omitted], strict=True)]
        pairs += zip(tail, got[len(got) - len(tail) :], strict=True)
    for exp, act in pairs:
        assert_same_shape(exp["object"], act["object"], f"{exp['type']} event")
    if any(e["type"] == "BOOKMARK" for s in recorded if "event" in s for e in [s["event"]]):
        assert (
            any(e["type"] == "BOOKMARK" for e in events)
            or response.get("stream_closed_by") != "server"
        ), "bookmarks were recorded but none were sent"


CASES = [
    pytest.param(path.name, step, id=f"{path.stem}:{step}")
    for path in sorted(FIXTURES.glob("*.json"))
    for step in range(len(json.loads(path.read_text())["exchanges"]))
]


@pytest.mark.parametrize(("name", "step"), CASES)
def test_exchange(name: str, step: int) -> None:
    exchange = _load(name)["exchanges"][step]
    outcome = _replayed(name)[step]
    if exchange["request"] is None:
        assert exchange["response"] is None, "a request that was never sent has no response"
        assert outcome is None, "the client failed before sending: nothing may be replayed"
        return
    response = exchange["response"]
    assert outcome is not None
    assert outcome.status == response["status"], outcome.body
    for header in ("Content-Type", "Retry-After"):
        assert outcome.headers.get(header) == response["headers"].get(header), header
    assert ("Warning" in outcome.headers) == ("Warning" in response["headers"])
    if "stream" in response:
        assert_same_stream(response, outcome.events)
    else:
        assert_same_shape(response["body"], outcome.body, "body")
