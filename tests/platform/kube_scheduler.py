"""A kube-scheduler emulation with v1.36's concurrency, calling an extender over HTTP.

The order is kube-scheduler's (pkg/scheduler/schedule_one.go and pkg/scheduler/extender.go at
v1.36), not the convenient one:

- One scheduling loop (`ScheduleOne`): a pod is popped, `schedulingCycle` → `SchedulePod`:
  `findNodesThatFitPod` runs the filter plugins over the nodes from a rotating start and stops
  at `numFeasibleNodesToFind` (every node below 100; else `percentageOfNodesToScore`, by
  default 50 - nodes/125 percent, at least 5% and 100 nodes: ~500 of 5,000), then
  `findNodesThatPassExtenders` calls each extender's `Filter` (extender.go: `NodeNames` when
  `nodeCacheCapable`, the full `NodeList` otherwise; an ignorable extender's error skips it);
  `prioritizeNodes` adds each extender's `Prioritize` score * weight * (MaxNodeScore /
  MaxExtenderPriority) to the plugins' scores (an extender's prioritize error is only logged);
  `selectHost` takes the highest total, ties by reservoir sampling; `assume` puts the pod in the
  scheduler's own cache on that node.
- Then `go func() { bindingCycle(...) }()`: the next pod's cycle starts at once. The binding
  cycle (here after a random 0-50 ms, and sometimes never) runs `extendersBinding` (an extender
  with `bindVerb`; an ignorable extender's failed bind is skipped, "Skipping extender in bind")
  and otherwise the DefaultBinder's `pods/binding` POST. A failed binding cycle forgets the
  assumed pod and requeues it after a backoff (`handleBindingCycleError`).
- A pod no node fits is reported Unschedulable (PodScheduled=False, as the scheduler patches its
  status) and parked; parked pods are tried again when the active queue is empty and the binding
  cycles are done, as an assigned pod added to the cluster moves them back.

The filter plugins are `hostaffinity.affinity`'s engine in kube-scheduler mode over this
scheduler's own cache (bound and assumed pods, node labels only: kube-scheduler knows nothing of
the topology KV). Score plugins are not emulated: every node gets 0 from them, so the extender's
score and the random tie-break decide.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
import msgspec

from hostaffinity.affinity.engine import AffinityEngine, FilterMode
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.model import Pod, decode_node, decode_pod

MAX_NODE_SCORE: Final = 100
MIN_FEASIBLE_NODES_TO_FIND: Final = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: Final = 5
BASE_PERCENTAGE_OF_NODES_TO_SCORE: Final = 50
MAX_EXTENDER_PRIORITY: Final = 10
Json = dict[str, Any]


@dataclass
class Call:
    """One extender call as the recording proxy of the burst fixture logs it."""

    verb: str
    pod: str
    t0: float
    t1: float = 0.0
    status: int = 0
    error: str = ""
    passed: int = 0
    node: str = ""


@dataclass
class Outcome:
    """What a run did: where pods went, which were refused and why, and every call."""

    placed: dict[str, str] = field(default_factory=dict)
    unschedulable: dict[str, dict[str, str]] = field(default_factory=dict)
    assumed_forever: set[str] = field(default_factory=set)
    calls: list[Call] = field(default_factory=list)

    def errors(self) -> list[Call]:
        """Filter or bind answers carrying an Error, and HTTP failures of any verb."""
        return [call for call in self.calls if call.error or call.status != 200]


@dataclass(frozen=True)
class ExtenderConfig:
    """The `extenders:` entry of a KubeSchedulerConfiguration."""

    url: str
    bind_verb: bool = False
    node_cache_capable: bool = True
    weight: int = 5
    ignorable: bool = True


def feasible_nodes_to_find(all_nodes: int, percentage: int = 0) -> int:
    """numFeasibleNodesToFind (schedule_one.go): how many feasible nodes end the search."""
    if all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return all_nodes
    if percentage <= 0:
        percentage = BASE_PERCENTAGE_OF_NODES_TO_SCORE - all_nodes // 125
        percentage = max(percentage, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


@dataclass(frozen=True)
class Binding:
    """How binding cycles behave: the delay before the bind, and how often one never ends or
    fails (then the pod is forgotten and requeued after `backoff_seconds`)."""

    max_delay_seconds: float = 0.05
    never: float = 0.0
    fail: float = 0.0
    backoff_seconds: float = 0.05


class KubeScheduler:
    """Schedules pods (API objects as stored) onto `nodes` (Node objects) through one extender."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        *,
        api_url: str,
        token: str,
        extender: ExtenderConfig,
        nodes: list[Json],
        bound: Sequence[Json] = (),
        binding: Binding | None = None,
        rng: random.Random | None = None,
        percentage_of_nodes_to_score: int = 0,
    ) -> None:
        self._http = http
        self._api = api_url
        self._auth = {"Authorization": f"Bearer {token}"}
        self._extender = extender
        self._nodes = nodes
        self._names = [node["metadata"]["name"] for node in nodes]
        self._to_find = feasible_nodes_to_find(len(nodes), percentage_of_nodes_to_score)
        self._next_start = 0
        self._binding = binding or Binding()
        self._rng = rng or random.Random()
        self._index = ClusterIndex()
        self._engine = AffinityEngine(self._index)
        for node in nodes:
            self._index.upsert_node(decode_node(_dumps(node)))
        for pod in bound:
            self._index.upsert_pod(decode_pod(_dumps(pod)))
        self._queue: deque[Json] = deque()
        self._parked: list[Json] = []
        self._cycles: set[asyncio.Task[None]] = set()
        self._start = time.monotonic()
        self.outcome = Outcome()
        self.current = ""  # the pod in its scheduling cycle

    async def run(
        self, pods: Sequence[Json] = (), arriving: asyncio.Queue[Json | None] | None = None
    ) -> Outcome:
        """Schedule `pods`, and those put in `arriving` (as the scheduler's informer reports pod
        creations) until it yields None; returns once each is bound, unschedulable, or assumed
        forever."""
        self._queue.extend(pods)
        retried = False
        while True:
            while arriving is not None and not arriving.empty():
                arriving = self._arrived(arriving.get_nowait(), arriving)
            if self._queue:
                await self._schedule_one(self._queue.popleft())
                continue
            waits: set[asyncio.Future[Any]] = set(self._cycles)
            getter = None if arriving is None else asyncio.ensure_future(arriving.get())
            if getter is not None:
                waits.add(getter)
            if waits:
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if getter is not None and arriving is not None:
                    if getter in done:
                        arriving = self._arrived(getter.result(), arriving)
                    else:
                        getter.cancel()
                continue
            if self._parked and not retried:
                retried = True
                self._queue.extend(self._parked)
                self._parked.clear()
                self.outcome.unschedulable.clear()
                continue
            return self.outcome

    def _arrived(
        self, pod: Json | None, arriving: asyncio.Queue[Json | None]
    ) -> asyncio.Queue[Json | None] | None:
        if pod is None:
            return None
        self._queue.append(pod)
        return arriving

    # -- the scheduling cycle ------------------------------------------------------------------

    async def _schedule_one(self, pod: Json) -> None:
        key = self.current = _key(pod)
        model = decode_pod(_dumps(pod))
        own = self._engine.filter(model, self._names, mode=FilterMode.KUBE_SCHEDULER)
        reasons = {node: why.reason for node, why in own.rejected.items()}
        feasible = self._first_feasible(set(own.feasible))
        if feasible:
            feasible, refused = await self._filter(pod, feasible)
            reasons.update(refused)
        if not feasible:
            self.outcome.unschedulable[key] = reasons
            self._parked.append(pod)
            await self._report_unschedulable(pod, reasons)
            return
        scores = await self._prioritize(pod, feasible)
        node = self._select_host(feasible, scores)
        self._index.upsert_pod(_bound_model(model, node))  # assume
        cycle = asyncio.create_task(self._binding_cycle(pod, node))
        self._cycles.add(cycle)
        cycle.add_done_callback(self._cycles.discard)

    def _first_feasible(self, feasible: set[str]) -> list[str]:
        """The first `numFeasibleNodesToFind` feasible nodes from the rotating start index."""
        names, start = self._names, self._next_start
        found: list[str] = []
        processed = 0
        for name in itertools.chain(names[start:], names[:start]):
            processed += 1
            if name in feasible:
                found.append(name)
                if len(found) == self._to_find:
                    break
        self._next_start = (start + processed) % len(names)
        return found

    def _args(self, pod: Json, names: list[str]) -> Json:
        if self._extender.node_cache_capable:
            return {"Pod": pod, "Nodes": None, "NodeNames": names}
        wanted = set(names)
        items = [node for node in self._nodes if node["metadata"]["name"] in wanted]
        return {"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}

    async def _filter(self, pod: Json, names: list[str]) -> tuple[list[str], dict[str, str]]:
        status, answer, call = await self._call("filter", pod, self._args(pod, names))
        if status != 200 or answer.get("Error"):
            call.error = str(answer.get("Error") or f"HTTP {status}")
            return names, {}  # ignorable: skipped
        if answer.get("NodeNames") is not None:
            passed = list(answer["NodeNames"])
        else:
            items = (answer.get("Nodes") or {}).get("items", [])
            passed = [item["metadata"]["name"] for item in items]
        call.passed = len(passed)
        failed = {**answer.get("FailedNodes", {}), **answer.get("FailedAndUnresolvableNodes", {})}
        return passed, failed

    async def _prioritize(self, pod: Json, names: list[str]) -> dict[str, int]:
        scale = self._extender.weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
        status, answer, _ = await self._call("prioritize", pod, self._args(pod, names))
        if status != 200 or not isinstance(answer, list):
            return dict.fromkeys(names, 0)  # the error is only logged
        return {entry["Host"]: entry["Score"] * scale for entry in answer}

    def _select_host(self, names: list[str], scores: dict[str, int]) -> str:
        """selectHost: the highest score, ties by reservoir sampling."""
        selected, best, ties = names[0], scores.get(names[0], 0), 1
        for name in names[1:]:
            score = scores.get(name, 0)
            if score > best:
                selected, best, ties = name, score, 1
            elif score == best:
                ties += 1
                if self._rng.randrange(ties) == 0:
                    selected = name
        return selected

    async def _report_unschedulable(self, pod: Json, reasons: dict[str, str]) -> None:
        meta = pod["metadata"]
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": f"0/{len(self._names)} nodes are available"}  # fmt: skip
        url = f"{self._api}/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        headers = {**self._auth, "Content-Type": "application/strategic-merge-patch+json"}
        body = {"status": {"conditions": [condition]}}
        async with self._http.patch(url, json=body, headers=headers) as response:
            response.raise_for_status()

    # -- the binding cycle ---------------------------------------------------------------------

    async def _binding_cycle(self, pod: Json, node: str) -> None:
        binding = self._binding
        await asyncio.sleep(self._rng.uniform(0, binding.max_delay_seconds))
        draw = self._rng.random()
        key = _key(pod)
        if draw < binding.never:
            self.outcome.assumed_forever.add(key)  # stays assumed; nothing is ever sent
            return
        bound = draw >= binding.never + binding.fail and await self._bind(pod, node)
        if bound:
            self.outcome.placed[key] = node
            return
        self._index.remove_pod(key)  # ForgetPod, then requeue after the backoff
        await asyncio.sleep(binding.backoff_seconds)
        self._queue.append(pod)

    async def _bind(self, pod: Json, node: str) -> bool:
        meta = pod["metadata"]
        if self._extender.bind_verb:
            args = {"PodName": meta["name"], "PodNamespace": meta["namespace"],
                    "PodUID": meta.get("uid", ""), "Node": node}  # fmt: skip
            status, answer, call = await self._call("bind", pod, args)
            call.node = node
            failed = status != 200 or bool(answer.get("Error"))
            if failed:
                call.error = str(answer.get("Error") or f"HTTP {status}")
            if not failed or not self._extender.ignorable:
                return not failed
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        url = f"{self._api}/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding"
        async with self._http.post(url, json=binding, headers=self._auth) as response:
            return response.status == 201

    # -- HTTP to the extender ------------------------------------------------------------------

    async def _call(self, verb: str, pod: Json, body: Json) -> tuple[int, Any, Call]:
        call = Call(verb, _key(pod), self._now())
        self.outcome.calls.append(call)
        url = f"{self._extender.url}/{verb}"
        try:
            async with self._http.post(url, json=body) as response:
                call.status = response.status
                answer = await response.json(content_type=None)
        except aiohttp.ClientError as error:
            call.status, answer = 0, {"Error": repr(error)}
        call.t1 = self._now()
        return call.status, answer if answer is not None else {}, call

    def _now(self) -> float:
        return (time.monotonic() - self._start) * 1000

    async def close(self) -> None:
        """Cancel binding cycles still waiting (a test ends before their delay)."""
        for cycle in list(self._cycles):
            cycle.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await cycle


def _key(pod: Json) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _dumps(obj: Json) -> bytes:
    return json.dumps(obj).encode()


def _bound_model(model: Pod, node: str) -> Pod:
    return msgspec.structs.replace(model, spec=msgspec.structs.replace(model.spec, node_name=node))
