"""A filter's rejected nodes and why, read from the filter's stages on demand.

A filter over every node of a large cluster can reject thousands of nodes for one cause (a
zone-wide anti-affinity term rejects a zone): a per-node map of them costs more than the whole
decision. Most callers need the feasible nodes, one node's reason, or a count, so the map is
built only when something iterates over it (once, then kept). Until then a node's reason is the
first stage whose failing set holds it: kube-scheduler's "first rejecting plugin wins".

The failing sets are the index's own (a domain's nodes, a taint group): read a filter's
rejections before the index changes, as every caller does (synchronously, in the same call).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence, Set

from hostaffinity.affinity.explain import Rejection

Stage = tuple[Set[str], Rejection]


class Rejections(Mapping[str, Rejection]):
    """Rejected node -> its first failing stage's Rejection, over the stages in filter order.

    `asked`: the nodes the filter was asked about (None: every node); a node outside it is not
    rejected whatever the stages say.
    """

    __slots__ = ("_asked", "_by_node", "_stages")

    def __init__(self, stages: Sequence[Stage], asked: Set[str] | None) -> None:
        # A set the index keeps (a zone's nodes) often fails the pod in several stages (its own
        # term and an existing pod's): only its first stage can name a node's reason.
        seen: set[int] = set()
        self._stages: list[Stage] = []
        for failing, why in stages:
            if failing and id(failing) not in seen:
                seen.add(id(failing))
                self._stages.append((failing, why))
        self._asked = asked
        self._by_node: dict[str, Rejection] | None = None

    def nodes(self) -> set[str]:
        """Every rejected node, without the reasons: what the feasible list is cut from."""
        if self._by_node is not None:
            return set(self._by_node)
        asked = self._asked
        rejected: set[str] = set()
        for failing, _ in self._stages:
            rejected.update(failing if asked is None else asked & failing)
        return rejected

    def _map(self) -> dict[str, Rejection]:
        if self._by_node is None:
            by_node: dict[str, Rejection] = {}
            asked = self._asked
            for failing, why in reversed(self._stages):  # earlier stages overwrite later ones
                members = failing if asked is None else asked & failing
                by_node.update(dict.fromkeys(members, why))
            self._by_node = by_node
        return self._by_node

    def __getitem__(self, node: str) -> Rejection:
        if self._by_node is not None:
            return self._by_node[node]
        if self._asked is None or node in self._asked:
            for failing, why in self._stages:
                if node in failing:
                    return why
        raise KeyError(node)

    def __contains__(self, node: object) -> bool:
        if not isinstance(node, str):
            return False
        try:
            self[node]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._map())

    def __len__(self) -> int:
        return len(self._map())

    def __bool__(self) -> bool:
        asked = self._asked
        return any(asked is None or not asked.isdisjoint(failing) for failing, _ in self._stages)

    def __repr__(self) -> str:
        return f"Rejections({self._map()!r})"
