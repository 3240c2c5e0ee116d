"""How the operator commands name an ESXi host, and find the one an operator names.

Moids repeat across vCenters (`host-21` in each), and so may host names (two sites' `esx01`).
So when the topology spans several vCenters every host is named `<vcenter>/<host name>` (and a
cluster `<vcenter>/<cluster moid>`); with one vCenter, the bare name, as vSphere shows it. An
operator may name a host by its label value, full name or moid, bare or as `<vcenter>/<...>`;
a bare one that fits hosts of several vCenters is refused with the candidates, never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from hostaffinity.cli.snapshot import ClusterSnapshot
from hostaffinity.schema import LABEL_ESXI_HOST

SEPARATOR = "/"


class UnknownHostError(ValueError):
    """A host name matched no ESXi host."""


class AmbiguousHostError(UnknownHostError):
    """A host name matched several ESXi hosts (of different vCenters, most often)."""


@dataclass(frozen=True, slots=True)
class KnownHost:
    """An ESXi host from the topology KV; `vcenter` and `moid` are empty for a host known only
    from a node's label (a placement the KV has lost)."""

    vcenter: str
    moid: str
    name: str
    label: str

    def spellings(self) -> set[str]:
        return {spelling for spelling in (self.name, self.label, self.moid) if spelling}


class HostNames:
    """The hosts of one snapshot, named as the commands print them."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self._snapshot = snapshot

    @cached_property
    def hosts(self) -> dict[tuple[str, str], KnownHost]:
        """By (vCenter, moid): the host records, then the hosts placements name (a host the KV
        has no record of yet), then a label no placement explains, by its value."""
        found = {
            (p.vcenter, p.host_moid): KnownHost(p.vcenter, p.host_moid, p.host_name, p.host_label)
            for p in self._snapshot.placements.values()
        }
        found |= {
            key: KnownHost(key[0], host.moid, host.name, host.label)
            for key, host in self._snapshot.hosts_by_vcenter.items()
        }
        labels = {host.label for host in found.values()}
        for node in self._snapshot.nodes.values():
            label = node.metadata.labels.get(LABEL_ESXI_HOST, "")
            if label and label not in labels:
                found[("", label)] = KnownHost("", "", label, label)
                labels.add(label)
        return found

    @cached_property
    def several_vcenters(self) -> bool:
        return len({vcenter for vcenter, _ in self.hosts if vcenter}) > 1

    def qualified(self, vcenter: str, text: str) -> str:
        """`text` (a host or cluster name, a moid) as printed: with its vCenter when several."""
        return f"{vcenter}{SEPARATOR}{text}" if self.several_vcenters and vcenter else text

    def name(self, vcenter: str, moid: str, fallback: str = "") -> str:
        """The host's printed name; `fallback` (or the moid) for a host the snapshot lacks."""
        host = self.hosts.get((vcenter, moid))
        return self.qualified(vcenter, host.name if host else fallback or moid)

    def find(self, spelling: str) -> KnownHost:
        """The one host `spelling` names; UnknownHostError when none or several do."""
        vcenter, _, bare = spelling.rpartition(SEPARATOR)
        matches = self._matching(bare, vcenter) if vcenter else []
        matches = matches or self._matching(spelling, "")
        if not matches:
            raise UnknownHostError(f"no ESXi host named {spelling} (try `hostaffinity topology`)")
        if len(matches) > 1:
            candidates = ", ".join(
                f"{self.name(h.vcenter, h.moid, h.name)} ({h.moid})" for h in matches
            )
            raise AmbiguousHostError(
                f"{spelling} names {len(matches)} ESXi hosts: {candidates}; name one as "
                f"<vcenter>{SEPARATOR}<host> or by its moid"
            )
        return matches[0]

    def _matching(self, bare: str, vcenter: str) -> list[KnownHost]:
        return sorted(
            (
                host
                for host in self.hosts.values()
                if bare in host.spellings() and (not vcenter or host.vcenter == vcenter)
            ),
            key=lambda host: (host.vcenter, host.moid, host.label),
        )

    def nodes_on(self, hosts: Iterable[KnownHost]) -> list[str]:
        """The nodes the snapshot places on `hosts` (a label-only host: the nodes labelled so)."""
        keys = {(host.vcenter, host.moid) for host in hosts if host.moid}
        labels = {host.label for host in hosts if not host.moid}
        placed = {
            name
            for name, p in self._snapshot.placements.items()
            if (p.vcenter, p.host_moid) in keys and name in self._snapshot.nodes
        }
        labelled = {
            name
            for name, node in self._snapshot.nodes.items()
            if name not in self._snapshot.placements
            and node.metadata.labels.get(LABEL_ESXI_HOST) in labels
        }
        return sorted(placed | labelled)
