"""Nodes by the keys their VM is matched by (matching.py `node_match_keys`).

A vCenter update re-examines the nodes of the VMs it touches; a node not placed yet (or placed
on a VM that now has a twin) can be matched by another VM, and this index names exactly the
nodes such a VM could be the VM of, so an update costs the nodes it can concern and not a
look at every node of the cluster.
"""

from collections import defaultdict
from collections.abc import Iterable

from hostaffinity.node_labeller.core.matching import Fallback, MatchKey, node_match_keys
from hostaffinity.node_labeller.core.nodes import Node


class NodeIndex:
    """Kept equal to the Node cache by `update`, called for each Node added, changed or gone."""

    def __init__(self, fallback: Fallback) -> None:
        self._fallback = fallback
        self._keys_of: dict[str, frozenset[MatchKey]] = {}
        self._nodes_by_key: dict[MatchKey, set[str]] = defaultdict(set)

    def update(self, name: str, node: Node | None) -> None:
        """Index the node as it is now (None: deleted)."""
        for key in self._keys_of.pop(name, frozenset()):
            self._nodes_by_key[key].discard(name)
            if not self._nodes_by_key[key]:
                del self._nodes_by_key[key]
        if node is None:
            return
        keys = node_match_keys(node, self._fallback)
        self._keys_of[name] = keys
        for key in keys:
            self._nodes_by_key[key].add(name)

    def nodes_with(self, keys: Iterable[MatchKey]) -> set[str]:
        """The nodes a VM holding any of `keys` could be the VM of."""
        return {name for key in keys for name in self._nodes_by_key.get(key, ())}
