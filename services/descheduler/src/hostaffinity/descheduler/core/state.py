"""What the descheduler knows: the engine's index plus the facts the eviction planner
needs.

Fed event by event by the informers (Pods, Nodes, Namespaces, PodDisruptionBudgets, KubeVirt
VMIs and migrations) and the topology KV watch, all on one event loop; a decision cycle reads it
without listing anything. Beyond the index it keeps each pod's requests and each node's sum of
them (for node fit), the replicas of each owner, and the PDBs, VMIs and migrations.

A cycle's planner shows its planned moves through a `Scratch` it opens for the cycle: the moved
pods sit on their targets (pods, index, usage) until it closes and puts every one back. They are
not pod changes: the journal of pod_changes never records them (see `pod_changes` for what its
readers are told instead), and no pod event is taken while a scratch is open.
"""

from __future__ import annotations

import logging
import sys
from bisect import bisect_left
from collections.abc import Iterator
from typing import Final

import msgspec

from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.affinity.fleet_groups import FleetMembers
from hostaffinity.affinity.index import ClusterIndex, PlannedMoves
from hostaffinity.affinity.interpod import PhysicalAntiAffinity
from hostaffinity.affinity.model import Namespace
from hostaffinity.affinity.sharing import Interner
from hostaffinity.descheduler.core.kubevirt import (
    KubeVirt,
    VirtualMachine,
    VirtualMachineInstance,
    VirtualMachineInstanceMigration,
    launcher_vmi,
    vm_owner,
    with_vmi_rules,
)
from hostaffinity.descheduler.core.model import (
    DeschedulerNode,
    DeschedulerPod,
    PodDisruptionBudget,
    Resources,
    node_allocatable,
    pod_requests,
)
from hostaffinity.runtime.process.config import SharedSettings
from hostaffinity.schema.names import LABEL_ESXI_HOST

# The shared section's defaults, for a caller that names none (tests).
_SHARED = SharedSettings()

_log = logging.getLogger(__name__)
_TERMINAL = frozenset({"Succeeded", "Failed"})
# Pod changes kept for readers of pod_changes(); half are dropped beyond this.
JOURNAL_LIMIT: Final = 1_000_000
# Replicas request the same: one read-only Resources per distinct request, not one per pod.
_SHARED_REQUESTS: Final[Interner[tuple[tuple[str, int], ...], Resources]] = Interner()


def controller_of(pod: DeschedulerPod) -> str | None:
    """`Kind/name` of the pod's controller ownerReference (falling back to the first owner)."""
    refs = pod.metadata.owner_references
    for ref in refs:
        if ref.controller:
            return f"{ref.kind}/{ref.name}"
    return f"{refs[0].kind}/{refs[0].name}" if refs else None


def _own_workload(pod: DeschedulerPod) -> str:
    """The workload read from the pod alone: its controller, or the pod itself."""
    owner = controller_of(pod)
    return sys.intern(f"{pod.metadata.namespace}/{owner}") if owner else pod.key


def _add(into: Resources, amount: Resources, sign: int) -> None:
    for name, value in amount.items():
        into[name] = into.get(name, 0) + sign * value


class ClusterState:
    """The index and engine the strategies read, plus pods, nodes and usage for the planner."""

    # Node changes node_changes() can name: a reader further behind starts over.
    NODE_CHANGES_KEPT: Final = 10_000

    def __init__(
        self,
        *,
        physical_anti_affinity: PhysicalAntiAffinity = _SHARED.physical_anti_affinity,
        fail_unplaced: bool = _SHARED.fails_unplaced,
        fleet: FleetMembers | None = None,
    ) -> None:
        self.index = ClusterIndex(physical_anti_affinity=physical_anti_affinity)
        # Other installs' members of the fleet groups, as the fleet view places them (fed by the
        # fleet view's watch); its `own_cluster` is this install's identity.
        self.fleet = fleet or FleetMembers("")
        self.engine = AffinityEngine(self.index, fail_unplaced=fail_unplaced)
        self.pods: dict[str, DeschedulerPod] = {}
        self.nodes: dict[str, DeschedulerNode] = {}
        self.allocatable: dict[str, Resources] = {}
        self.requests: dict[str, Resources] = {}  # read-only: replicas share one
        self.usage: dict[str, Resources] = {}
        self.workloads: dict[str, set[str]] = {}
        self.pdbs: dict[str, PodDisruptionBudget] = {}
        self.vmis: dict[str, VirtualMachineInstance] = {}
        self.migrations: dict[str, VirtualMachineInstanceMigration] = {}
        self.vms: dict[str, VirtualMachine] = {}
        # The workload each placed pod was counted under (a VM's may change with its owners).
        self._workload: dict[str, str] = {}
        # The cluster's KubeVirt CR (its migration limits and version), by key: there is one.
        self.kubevirts: dict[str, KubeVirt] = {}
        # virt-launcher pods as the API has them, by VMI: re-derived when the VMI's rules change.
        self._launchers: dict[str, DeschedulerPod] = {}
        # The last nodes that raised topology_version, for node_changes().
        self._nodes_changed: list[str] = []
        # Raised whenever a node's domains may have changed (added, removed, relabelled,
        # re-tainted, cordoned, or its VM placed on another host): a strategy that keeps
        # per-domain results between cycles reads which through node_changes().
        self.topology_version = 0
        # The keys of pods placed or forgotten, in order (never a planned move), so a strategy
        # that keeps results between cycles reads what changed, not every pod.
        self._journal: list[str] = []
        self._journal_start = 0  # the position of _journal[0]
        # (journal position, keys) of pods a closed scratch put back after a reader of
        # pod_changes saw them moved; ascending by position.
        self._put_back: list[tuple[int, frozenset[str]]] = []
        self._scratch: Scratch | None = None

    # -- pods ----------------------------------------------------------------------------------

    def upsert_pod(self, pod: DeschedulerPod) -> None:
        """Add or update a pod; unassigned and finished pods are only forgotten.

        A virt-launcher pod is kept with its VMI's current rules (kubevirt.with_vmi_rules)."""
        self.remove_pod(pod.key)
        vmi = launcher_vmi(pod)
        if vmi is not None:
            self._launchers[vmi] = pod
            pod = with_vmi_rules(pod, self.vmis.get(vmi))
        self._place(pod)

    def _place(self, pod: DeschedulerPod) -> None:
        """Index the pod as it is."""
        self._refuse_while_planning()
        key = pod.key
        self._forget(key)
        if not pod.spec.node_name or pod.status.phase in _TERMINAL:
            return
        try:
            requests = pod_requests(pod)
        except ValueError as error:
            _log.warning("pod %s: requests not understood (%s); counted as none", key, error)
            requests = {"pods": 1000}
        requests = _SHARED_REQUESTS.share(tuple(requests.items()), requests)
        self.index.upsert_pod(pod)
        self.pods[key] = pod
        self._note(key)
        self.requests[key] = requests
        _add(self.usage.setdefault(pod.spec.node_name, {}), requests, 1)
        workload = self._workload[key] = self.workload_of(pod)
        self.workloads.setdefault(workload, set()).add(key)

    def workload_of(self, pod: DeschedulerPod) -> str:
        """The key a cooldown and the duplicates strategy group replicas by.

        A virt-launcher pod belongs to its VM's workload along the owner chain: VMI -> VMIRS,
        VMI -> VirtualMachine -> VirtualMachinePool (a pool's or a VMIRS's replicas are one
        workload, as a ReplicaSet's pods are); a VM of its own is its workload."""
        vmi_key = launcher_vmi(pod)
        vmi = None if vmi_key is None else self.vmis.get(vmi_key)
        owner = None if vmi is None else vm_owner(vmi)
        if vmi is None or owner is None:
            return _own_workload(pod)
        namespace = vmi.metadata.namespace
        if owner[0] == "VirtualMachine":
            vm = self.vms.get(f"{namespace}/{owner[1]}")
            owner = (vm_owner(vm) if vm is not None else None) or owner
        return f"{namespace}/{owner[0]}/{owner[1]}"

    def workload_key(self, key: str) -> str | None:
        """The workload the pod `key` is counted under in `workloads` (None: not placed)."""
        return self._workload.get(key)

    def remove_pod(self, key: str) -> None:
        self._refuse_while_planning()
        pod = self._forget(key)
        vmi = None if pod is None else launcher_vmi(pod)
        launcher = None if vmi is None else self._launchers.get(vmi)
        if vmi is not None and launcher is not None and launcher.key == key:
            del self._launchers[vmi]

    def _forget(self, key: str) -> DeschedulerPod | None:
        pod = self.pods.pop(key, None)
        if pod is None:
            return None
        self._note(key)
        self.index.remove_pod(key)
        _add(self.usage.setdefault(pod.spec.node_name, {}), self.requests.pop(key), -1)
        workload = self._workload.pop(key)
        replicas = self.workloads.get(workload)
        if replicas is not None:
            replicas.discard(key)
            if not replicas:
                del self.workloads[workload]
        return pod

    def _note(self, key: str) -> None:
        self._journal.append(key)
        if len(self._journal) > JOURNAL_LIMIT:
            dropped = len(self._journal) // 2
            del self._journal[:dropped]
            self._journal_start += dropped
            kept = bisect_left(self._put_back, self._journal_start, key=_position)
            del self._put_back[:kept]

    def pod_changes(self, since: int) -> tuple[list[str] | None, int]:
        """The keys of pods placed or forgotten since position `since`, and the position now;
        None when the journal no longer reaches back that far (read every pod instead).

        Read while a scratch is open, the keys also name the pods it moved so far (the reader
        sees them on their targets); once that scratch closes, a read from that position or
        earlier names them again, since they are back where they were. A key may come twice.
        """
        end = self._journal_start + len(self._journal)
        scratch = self._scratch
        if scratch is not None:
            scratch.seen = True
        if since < self._journal_start:
            return None, end
        changed = self._journal[since - self._journal_start :]
        for _, keys in self._put_back[bisect_left(self._put_back, since, key=_position) :]:
            changed.extend(keys)
        if scratch is not None:
            changed.extend(scratch.moved())
        return changed, end

    # -- planned moves -------------------------------------------------------------------------

    def scratch(self) -> Scratch:
        """Open the planned moves of one cycle (one at a time); close the scratch to undo them."""
        if self._scratch is not None:
            raise RuntimeError("a scratch is already open on this state")
        self._scratch = Scratch(self, self.index.planned_moves())
        return self._scratch

    def _refuse_while_planning(self) -> None:
        if self._scratch is not None:
            raise RuntimeError("pod event while a scratch is open: close it first")

    def _scratch_closed(self, scratch: Scratch, moved: frozenset[str]) -> None:
        if self._scratch is not scratch:
            return
        self._scratch = None
        if not scratch.seen or not moved:
            return
        end = self._journal_start + len(self._journal)
        if self._put_back and self._put_back[-1][0] == end:
            moved |= self._put_back.pop()[1]
        self._put_back.append((end, moved))

    # -- nodes, namespaces, placements ---------------------------------------------------------

    def upsert_node(self, node: DeschedulerNode) -> None:
        name = node.metadata.name
        old = self.nodes.get(name)
        if (
            old is None
            or old.metadata.labels != node.metadata.labels
            or old.spec.taints != node.spec.taints
            or old.spec.unschedulable != node.spec.unschedulable
        ):
            self._node_changed(name)
        self.index.upsert_node(node)
        self.nodes[name] = node
        self.allocatable[name] = node_allocatable(node)

    def remove_node(self, name: str) -> None:
        self._node_changed(name)
        self.index.remove_node(name)
        self.nodes.pop(name, None)
        self.allocatable.pop(name, None)

    def _node_changed(self, name: str) -> None:
        self.topology_version += 1
        self._nodes_changed.append(name)
        if len(self._nodes_changed) > 2 * self.NODE_CHANGES_KEPT:
            del self._nodes_changed[: -self.NODE_CHANGES_KEPT]

    def node_changes(self, since: int) -> tuple[list[str] | None, int]:
        """The nodes whose domains may have changed since `topology_version` was `since`, and
        the version now; None when more changed than are kept (every node may have)."""
        end = self.topology_version
        missed = end - since
        if missed > len(self._nodes_changed):
            return None, end
        return self._nodes_changed[len(self._nodes_changed) - missed :], end

    def upsert_namespace(self, namespace: Namespace) -> None:
        self.index.upsert_namespace(namespace)

    def remove_namespace(self, name: str) -> None:
        self.index.remove_namespace(name)

    def set_placement(self, node: str, host: str | None) -> None:
        before = self.index.domain(node, LABEL_ESXI_HOST)
        self.index.set_placement(node, host)
        if self.index.domain(node, LABEL_ESXI_HOST) != before:
            self._node_changed(node)

    # -- PDBs and KubeVirt ---------------------------------------------------------------------

    def upsert_pdb(self, pdb: PodDisruptionBudget) -> None:
        self.pdbs[f"{pdb.metadata.namespace}/{pdb.metadata.name}"] = pdb

    def remove_pdb(self, key: str) -> None:
        self.pdbs.pop(key, None)

    def upsert_vmi(self, vmi: VirtualMachineInstance) -> None:
        self.vmis[vmi.key] = vmi
        self._rederive(vmi.key)

    def remove_vmi(self, key: str) -> None:
        self.vmis.pop(key, None)
        self._rederive(key)

    def upsert_vm(self, vm: VirtualMachine) -> None:
        self.vms[vm.key] = vm
        self._rederive(vm.key)  # a VM's VMI has the VM's name

    def remove_vm(self, key: str) -> None:
        self.vms.pop(key, None)
        self._rederive(key)

    def _rederive(self, vmi: str) -> None:
        launcher = self._launchers.get(vmi)
        if launcher is not None and launcher.key in self.pods:
            self._place(with_vmi_rules(launcher, self.vmis.get(vmi)))

    @property
    def kubevirt(self) -> KubeVirt | None:
        """The KubeVirt CR, when KubeVirt is installed (the first by key, should there be more)."""
        return self.kubevirts[min(self.kubevirts)] if self.kubevirts else None

    def upsert_kubevirt(self, kubevirt: KubeVirt) -> None:
        self.kubevirts[kubevirt.key] = kubevirt

    def remove_kubevirt(self, key: str) -> None:
        self.kubevirts.pop(key, None)

    def upsert_migration(self, migration: VirtualMachineInstanceMigration) -> None:
        self.migrations[migration.key] = migration

    def remove_migration(self, key: str) -> None:
        self.migrations.pop(key, None)

    def migrations_in_flight(self) -> Iterator[VirtualMachineInstanceMigration]:
        return (m for m in self.migrations.values() if m.in_flight)

    # -- queries -------------------------------------------------------------------------------

    def free(self, node: str) -> Resources:
        """Allocatable minus the requests of the pods on the node."""
        free = dict(self.allocatable.get(node, {}))
        _add(free, self.usage.get(node, {}), -1)
        return free

    def fits_resources(self, pod_key: str, node: str) -> str | None:
        """None when the node has room for the pod's requests, else the first short resource.

        A resource the node does not report is not checked (NodeResourcesFit skips what the
        pod does not ask for, and a node without allocatable yet is not judged).
        """
        allocatable = self.allocatable.get(node)
        if not allocatable:
            return None
        used = self.usage.get(node, {})
        for name, amount in self.requests.get(pod_key, {}).items():
            if amount and name in allocatable and used.get(name, 0) + amount > allocatable[name]:
                return name
        return None


class Scratch:
    """One cycle's planned moves: each moved pod shows on its target in the pods, the index and
    the usage of both nodes, until `close` puts everything back as it was; closed, it refuses
    further moves. Usable as a context manager."""

    def __init__(self, state: ClusterState, index_moves: PlannedMoves) -> None:
        self._state: ClusterState | None = state
        self._index_moves = index_moves
        self._pods: dict[str, DeschedulerPod] = {}  # the originals of the moved pods
        self._usage: dict[str, Resources | None] = {}  # each touched node's usage before
        # A reader of pod_changes looked while it was open (it must hear of the undo).
        self.seen = False

    def move(self, key: str, node: str) -> None:
        """Show the pod `key` on `node` until close."""
        state = self._state
        if state is None:
            raise RuntimeError("the scratch is closed")
        pod = state.pods[key]
        self._pods.setdefault(key, pod)
        source = pod.spec.node_name
        for name in (source, node):
            if name not in self._usage:
                usage = state.usage.get(name)
                self._usage[name] = None if usage is None else dict(usage)
        requests = state.requests[key]
        _add(state.usage.setdefault(source, {}), requests, -1)
        _add(state.usage.setdefault(node, {}), requests, 1)
        self._index_moves.move(key, node)
        state.pods[key] = _on_node(pod, node)

    def moved(self) -> list[str]:
        """The keys of the pods moved so far."""
        return list(self._pods)

    def close(self) -> None:
        """Put every moved pod back, with its nodes' usage (idempotent)."""
        state, self._state = self._state, None
        if state is None:
            return
        state.pods.update(self._pods)
        for name, usage in self._usage.items():
            if usage is None:
                state.usage.pop(name, None)
            else:
                state.usage[name] = usage
        self._index_moves.close()
        state._scratch_closed(self, frozenset(self._pods))
        self._pods.clear()
        self._usage.clear()

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _position(entry: tuple[int, frozenset[str]]) -> int:
    return entry[0]


def _on_node(pod: DeschedulerPod, node: str) -> DeschedulerPod:
    return msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, node_name=node))
