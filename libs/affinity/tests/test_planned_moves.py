"""The index's planned moves: shown while open, every record put back exactly on close."""

from __future__ import annotations

import pytest

from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.affinity.index import ClusterIndex
from tests.platform.builders.affinity import engine, node, pod, required, term

WEB = {"app": "web"}
ANTI = required("podAntiAffinity", term("kubernetes.io/hostname", {"matchLabels": WEB}))


def cluster() -> ClusterIndex:
    nodes = [node(f"n{i}", {"kubernetes.io/hostname": f"n{i}"}) for i in (1, 2, 3)]
    pods = [
        pod("web-a", labels=WEB, node_name="n1", affinity=ANTI),
        pod("web-b", labels=WEB, node_name="n1"),
        pod("db", labels={"app": "db"}, node_name="n2"),
    ]
    return engine(nodes, pods).index


def test_a_moved_pod_shows_on_its_target_until_close_puts_the_index_back_exactly() -> None:
    index, untouched = cluster(), cluster()
    order = [record.key for record in index.pods()]
    moves = index.planned_moves()
    moves.move("default/web-a", "n3")
    moves.move("default/db", "n3")
    moves.move("default/db", "n1")  # moved twice: close still restores the first original

    assert {r.key for r in index.pods_on("n3")} == {"default/web-a"}
    assert {r.key for r in index.pods_on("n1")} == {"default/web-b", "default/db"}
    assert not list(index.pods_on("n2"))
    moved = index.pod("default/web-a")
    assert moved is not None
    assert moved.node == "n3"
    assert moved.terms.required_anti
    assert index != untouched
    # The engine reads the moved pod's anti-affinity on its target: n3 refuses another web pod.
    incoming = pod(labels=WEB)
    assert AffinityEngine(index).filter(incoming).feasible == ["n1", "n2"]

    moves.close()
    assert index == untouched
    assert [record.key for record in index.pods()] == order
    assert {r.key for r in index.pods_on("n1")} == {"default/web-a", "default/web-b"}
    assert AffinityEngine(index).filter(incoming).feasible == ["n2", "n3"]


def test_pod_events_are_refused_while_moves_are_open_and_a_closed_one_refuses_moves() -> None:
    index = cluster()
    moves = index.planned_moves()
    with pytest.raises(RuntimeError, match="planned moves are open"):
        index.upsert_pod(pod("late", node_name="n2"))
    with pytest.raises(RuntimeError, match="planned moves are open"):
        index.remove_pod("default/db")
    with pytest.raises(RuntimeError, match="already open"):
        index.planned_moves()
    moves.close()
    moves.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        moves.move("default/db", "n3")
    index.upsert_pod(pod("late", node_name="n2"))  # taken again once closed
    assert index.pod("default/late") is not None
    index.planned_moves().close()  # and a new one opens


def crowded(batch: int) -> ClusterIndex:
    """Eight pods on n1, one on n2, none on n3, two on n4; the pod names differ per batch, so
    do the slots they take in their node's set."""
    nodes = [node(f"n{i}") for i in (1, 2, 3, 4)]
    pods = [pod(f"b{batch}-{i}", node_name="n1") for i in range(8)]
    pods += [pod(f"b{batch}-lone", node_name="n2")]
    pods += [pod(f"b{batch}-last-{i}", node_name="n4") for i in range(2)]
    return engine(nodes, pods).index


def test_closing_the_moves_restores_each_nodes_pods_in_their_iteration_order() -> None:
    """A full pass follows `pods_on` order: two passes over the same state must plan alike,
    so a closed plan leaves every node's set (and the order of the nodes) as it found it, even
    when a move emptied a node or landed on one that had no pods. Taken out of a set and put
    back, a pod can land in another slot: many name batches make sure one would."""
    nodes = ["n1", "n2", "n3", "n4"]
    for batch in range(40):
        index = crowded(batch)
        before = {n: [r.key for r in index.pods_on(n)] for n in nodes}
        sets = dict(index._pods_by_node)  # the nodes that hold pods, in order, and their sets
        moves = index.planned_moves()
        for i in (1, 3, 6):
            moves.move(f"default/b{batch}-{i}", "n3")  # onto a node that had no pods
        moves.move(f"default/b{batch}-lone", "n1")  # n2 is emptied
        moves.move(f"default/b{batch}-3", "n2")  # and a pod is moved twice
        assert [r.key for r in index.pods_on("n2")] == [f"default/b{batch}-3"]
        moves.close()
        assert {n: [r.key for r in index.pods_on(n)] for n in nodes} == before, batch
        assert list(index._pods_by_node) == list(sets), batch
        assert all(index._pods_by_node[n] is own for n, own in sets.items()), batch
