"""Which workloads may hold two or more replicas in one domain, kept between RemoveDuplicates'
passes so that a cycle need not group every workload's replicas again.

A workload is *crowded* when some domain holds two or more of its replicas. One that is not is
within any ceiling (the ceiling is at least 1), so only crowded workloads can be in violation.
Crowding is read from placements alone, whatever the owner kinds excluded or the pods' labels
and namespace: the strategy applies those to each crowded workload on every pass.
A workload becomes crowded only when one of its replicas lands in a domain: a pod placed or
moved (its node changed, a planned move of the cycle, or its owner changed so that it joins
another workload) or a node whose domain changed (relabelled, its VM moved to another host,
added with pods already on it). A replica leaving (deleted, moved away, owner changed) never
crowds the workload it leaves.

Those changes are read from the state's journals (`ClusterState.pod_changes`,
`node_changes`), not from the cycle's Scope: the journals also name what starts no cycle (an
ownerReferences edit, a VMI adopted by a replica set) and the moves earlier strategies of the
same cycle planned, which a Scope never holds. The strategy lives as long as the state it
judges (a policy is loaded with a new state for each Lease term); a full cycle (the first, the
interval's, after a watch restart) groups every workload again.
"""

from __future__ import annotations

from hostaffinity.descheduler.core.state import ClusterState


class CrowdedWorkloads:
    """The workloads found crowded on the last pass, and the journal positions it read."""

    def __init__(self) -> None:
        self._crowded: set[str] = set()
        self._state: ClusterState | None = None  # the state the positions belong to
        self._pods_read = -1
        self._nodes_read = -1

    def to_judge(self, state: ClusterState, *, full: bool) -> set[str] | None:
        """The workloads that may be crowded now: those crowded on the last pass and those a
        replica joined or whose replicas' domains changed since. None: judge every workload
        (`full`, a first pass, another state, or journals that no longer reach back)."""
        pods, self._pods_read = state.pod_changes(self._pods_read)
        nodes, self._nodes_read = state.node_changes(self._nodes_read)
        if full or state is not self._state or pods is None or nodes is None:
            self._state = state
            return None
        keys = set(pods)
        for node in nodes:
            keys.update(record.key for record in state.index.pods_on(node))
        # A pod gone has no workload now: leaving never crowds the one it left.
        touched = {w for key in keys if (w := state.workload_key(key)) is not None}
        return self._crowded | touched

    def found(self, crowded: set[str]) -> None:
        """The workloads this pass found crowded (every one it was told to judge)."""
        self._crowded = crowded
