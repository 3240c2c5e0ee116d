"""Pods between their filter and their binding: a concerned pod's host reservation, what ends it,
and the bounded wait for an unreserved in-flight pod that a later pod's terms select.

Seed-004 hosts (conftest): node1 and node2 on host1, node3 on host2, node4 with no known host.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable

import msgspec

from hostaffinity.affinity.model import (
    Affinity,
    LabelSelector,
    LabelSelectorRequirement,
    ObjectMeta,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodSpec,
)
from hostaffinity.affinity.selectors import NOTHING, compile_label_selector
from hostaffinity.scheduler_extender.core import answers
from hostaffinity.scheduler_extender.core.cache import ExtenderCache
from hostaffinity.scheduler_extender.core.extender_v1 import AskedNodes
from hostaffinity.scheduler_extender.core.inflight import InFlight
from hostaffinity.scheduler_extender.feeds import decode_observed_pod
from hostaffinity.schema import LABEL_ESXI_HOST

HOSTS: dict[str, str | None] = {"node1": "host1", "node2": "host1", "node3": "host2", "node4": None}
PLACED = ["node1", "node2", "node3"]


def pod(name: str, app: str, *, avoid: str | None = None, node: str = "") -> Pod:
    affinity = None
    if avoid is not None:
        term = PodAffinityTerm(
            topology_key=LABEL_ESXI_HOST, label_selector=LabelSelector(match_labels={"app": avoid})
        )
        affinity = Affinity(pod_anti_affinity=PodAffinity([term]))
    meta = ObjectMeta(name=name, namespace="default", uid=f"uid-{name}", labels={"app": app})
    return Pod(metadata=meta, spec=PodSpec(node_name=node, affinity=affinity))


def bound(p: Pod, node: str) -> Pod:
    return msgspec.structs.replace(p, spec=msgspec.structs.replace(p.spec, node_name=node))


def filtered(cache: ExtenderCache, p: Pod, seed: int = 0) -> list[str]:
    """What kube-scheduler's filter call does to the cache, and the nodes that passed."""
    cache.note_incoming(p)
    answer, _ = answers.filter_nodes(cache, p, AskedNodes(PLACED), random.Random(seed))
    return answer.node_names or []


def test_a_passing_replica_is_held_on_one_host_and_the_next_one_avoids_it(
    make_cache: Callable[..., ExtenderCache],
) -> None:
    cache = make_cache(HOSTS)
    first = filtered(cache, pod("web-0", "web", avoid="web"))
    assert first in (["node1", "node2"], ["node3"])
    second = filtered(cache, pod("web-1", "web", avoid="web"))
    assert second == (["node3"] if first != ["node3"] else ["node1", "node2"])
    assert filtered(cache, pod("web-2", "web", avoid="web")) == []


def test_unconcerned_pods_pass_everything_and_hold_nothing(
    make_cache: Callable[..., ExtenderCache],
) -> None:
    cache = make_cache(HOSTS)
    assert filtered(cache, pod("plain", "plain")) == PLACED
    entry = cache.in_flight.get("default/plain")
    assert entry is not None
    assert entry.node is None
    assert cache.index.pod("default/plain") is None


def test_the_informer_ends_a_reservation_bound_deleted_or_unschedulable(
    make_cache: Callable[..., ExtenderCache],
) -> None:
    cache = make_cache(HOSTS)
    web0 = pod("web-0", "web", avoid="web")
    held = filtered(cache, web0, seed=1)
    cache.upsert_pod(bound(web0, held[-1]))  # bound: the informer's placement replaces it
    assert "default/web-0" not in cache.in_flight
    record = cache.index.pod("default/web-0")
    assert record is not None
    assert record.node == held[-1]

    web1 = pod("web-1", "web", avoid="web")
    other = filtered(cache, web1)
    cache.upsert_pod(web1)  # an unassigned update (its ADDED, late): still held
    assert filtered(cache, pod("probe", "web", avoid="web")) == []
    cache.remove_pod("default/probe")
    cache.upsert_pod(web1, unschedulable=True)  # kube-scheduler gave up on it for now
    assert filtered(cache, pod("web-2", "web", avoid="web")) == other
    cache.remove_pod("default/web-2")  # deleted: its host is free again
    assert filtered(cache, pod("web-3", "web", avoid="web")) == other


def test_a_reservation_whose_placement_never_comes_expires(
    make_cache: Callable[..., ExtenderCache],
) -> None:
    now = [0.0]
    cache = make_cache(HOSTS, clock=lambda: now[0], inflight_max_age_seconds=30.0)
    held = filtered(cache, pod("web-0", "web", avoid="web"))
    now[0] = 29.0
    assert filtered(cache, pod("web-1", "web", avoid="web")) not in ([], held)
    now[0] = 31.0  # web-0's binding never came: its host is free again (web-1 still holds its)
    assert filtered(cache, pod("web-2", "web", avoid="web")) == held
    assert "default/web-0" not in cache.in_flight
    assert cache.in_flight.expired == 1


async def test_a_filter_waits_for_an_unreserved_in_flight_pod_its_terms_select(
    make_cache: Callable[..., ExtenderCache],
) -> None:
    cache = make_cache(HOSTS)
    db = pod("db-0", "db")
    assert filtered(cache, db) == PLACED  # no term concerns it: in flight, nowhere held
    web = pod("web-0", "web", avoid="db")
    cache.note_incoming(web)
    selected = answers.in_flight_selected(cache, web)
    assert selected == ["default/db-0"]

    async def informer_reports_the_binding() -> None:
        await asyncio.sleep(0.05)
        cache.upsert_pod(bound(db, "node3"))

    reporting = asyncio.create_task(informer_reports_the_binding())
    assert await cache.in_flight.settled(selected, 2.0) == []
    await reporting
    answer, _ = answers.filter_nodes(cache, web, AskedNodes(PLACED), random.Random(0))
    assert answer.node_names == ["node1", "node2"]


async def test_a_placement_that_never_comes_costs_at_most_the_wait(
    make_cache: Callable[..., ExtenderCache],
) -> None:
    cache = make_cache(HOSTS)
    filtered(cache, pod("db-0", "db"))
    web = pod("web-0", "web", avoid="db")
    selected = answers.in_flight_selected(cache, web)
    loop = asyncio.get_running_loop()
    started = loop.time()
    late = await cache.in_flight.settled(selected, 0.1)
    assert late == ["default/db-0"]
    assert loop.time() - started < 1.0
    cache.give_up(late)
    assert answers.in_flight_selected(cache, web) == []
    assert cache.in_flight.expired == 1


def test_the_informer_reads_pod_scheduled_false_only_for_unassigned_pods() -> None:
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    pending = {"metadata": {"name": "p", "namespace": "default"},
               "status": {"conditions": [condition], "phase": "Pending"}}  # fmt: skip
    assert decode_observed_pod(json.dumps(pending).encode()).unschedulable
    waiting = {**pending, "status": {"conditions": [{**condition, "status": "True"}]}}
    assert not decode_observed_pod(json.dumps(waiting).encode()).unschedulable
    assigned = {**pending, "spec": {"nodeName": "node1"}}
    observed = decode_observed_pod(json.dumps(assigned).encode())
    assert (observed.pod.spec.node_name, observed.unschedulable) == ("node1", False)


def test_the_label_lookup_of_unreserved_pods_finds_what_a_scan_would() -> None:
    """`unplaced_selectable` narrows by each selector's anchor; whatever the selectors, it must
    hold every unreserved entry that one of them matches, oldest first, and no reserved one."""
    flight = InFlight(capacity=100, max_age_seconds=30.0, clock=lambda: 0.0)
    labels = [{"app": "web"}, {"app": "db", "tier": "a"}, {"tier": "b"}, {}, {"app": "web"}]
    for i, pod_labels in enumerate(labels):
        flight.note(Pod(metadata=ObjectMeta(name=f"p{i}", namespace="default", labels=pod_labels)))
    flight.note(Pod(metadata=ObjectMeta(name="p1", namespace="default", labels={"app": "db"})))
    flight.note(
        Pod(metadata=ObjectMeta(name="p4", namespace="default", labels={"app": "web"})), "n1"
    )
    flight.pop("default/p2")
    web = compile_label_selector(LabelSelector(match_labels={"app": "web"}))
    has_tier = compile_label_selector(
        LabelSelector(match_expressions=[LabelSelectorRequirement("tier", "Exists")])
    )
    not_db = compile_label_selector(
        LabelSelector(match_expressions=[LabelSelectorRequirement("app", "NotIn", ["db"])])
    )
    for selectors in ([web], [has_tier], [not_db], [NOTHING], [web, has_tier], [NOTHING, web], []):
        found = [e.pod.key for e in flight.unplaced_selectable(selectors)]
        scanned = [
            e.pod.key
            for e in flight.unplaced()
            if any(s.matches(e.pod.metadata.labels) for s in selectors)
        ]
        assert [k for k in found if k in scanned] == scanned, selectors
    assert [e.pod.key for e in flight.unplaced_selectable([web])] == ["default/p0"]
    assert [e.pod.key for e in flight.unplaced_selectable([not_db])] == [
        "default/p0", "default/p3", "default/p1"
    ]  # fmt: skip
