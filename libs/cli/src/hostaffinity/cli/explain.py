"""`hostaffinity explain pod|node`: where it runs, the rules that concern it and whether they
hold, why a Pending pod is refused, and what hostaffinity did to it.

Every judgement is the affinity engine's: the filter (engine.py) for a pod on no node, the term
standings (standing.py) for a placed one, both worded by explain.py, as the extender and the
descheduler word them, and the topology spreads' skew per domain (spread_standing.py). The
history is the event stream's (history.py); the HA audit (ha_audit.py) says when a DRS rule of
the pod's leaves a node VM unrestartable after one host failure; a virt-launcher pod's
VirtualMachine placement that waits for a restart is vm_lookup.py's.
"""

from __future__ import annotations

from collections.abc import Sequence

from hostaffinity.affinity.engine import AffinityEngine, FilterResult
from hostaffinity.affinity.headroom import host_headroom
from hostaffinity.affinity.model import Pod
from hostaffinity.affinity.spread_standing import SpreadStanding, spread_standings
from hostaffinity.affinity.standing import KIND_WORDS, Standing, own_terms, standings
from hostaffinity.cli.drs_attention import not_held, shared_hosts
from hostaffinity.cli.ha_audit import HaAudit, failover_sentence
from hostaffinity.cli.history import PodIdentity, node_history, pod_history
from hostaffinity.cli.host_names import HostNames
from hostaffinity.cli.pod_lookup import NodeNotFoundError, PodFacts, PodNotFoundError
from hostaffinity.cli.snapshot import ClusterSnapshot
from hostaffinity.cli.tables import table
from hostaffinity.schema import LABEL_ESXI_HOST, TopologyEvent
from hostaffinity.schema.reports import (
    DrsRuleView,
    HistoryEntry,
    Location,
    NodeExplanation,
    PodExplanation,
    Refusal,
    SpreadDomain,
    SpreadView,
    TermView,
    VmRestartView,
)


def location(snapshot: ClusterSnapshot, node: str) -> Location:
    """Where the node's VM runs, as the topology KV says."""
    placement = snapshot.placements.get(node)
    if placement is None:
        return Location(node=node)
    return Location(
        node=node,
        vm_moid=placement.vm_moid,
        esxi_host=placement.host_name,
        host_label=placement.host_label,
        cluster=placement.cluster_name,
        datacenter=placement.datacenter,
        vcenter=placement.vcenter if HostNames(snapshot).several_vcenters else "",
    )


def _view(standing: Standing) -> TermView:
    return TermView(
        owner=standing.owner,
        kind=KIND_WORDS[standing.kind],
        rule=standing.term.describe(),
        host_level=standing.term.physical,
        state=standing.state,
        why=standing.why,
    )


def _unplaced_terms(engine: AffinityEngine, pod: Pod) -> list[TermView]:
    """A pod on no node: its own terms, then existing pods' anti-affinity selecting it."""
    views = [
        TermView(
            owner=pod.key,
            kind=KIND_WORDS[kind],
            rule=term.describe(),
            host_level=term.physical,
            state="not-placed",
        )
        for kind, term in own_terms(engine.terms(pod))
    ]
    meta = pod.metadata
    for owner, term in engine.index.terms_matching("required_anti", meta.namespace, meta.labels):
        views.append(
            TermView(
                owner=owner.key,
                kind=KIND_WORDS["required_anti"],
                rule=term.describe(),
                host_level=term.physical,
                state="not-placed",
                why=f"pod {owner.key} runs on node {owner.node}",
            )
        )
    return views


def _spread_view(standing: SpreadStanding) -> SpreadView:
    constraint = standing.constraint
    return SpreadView(
        rule=constraint.describe(),
        host_level=constraint.physical,
        when_unsatisfiable=constraint.when_unsatisfiable,
        max_skew=constraint.max_skew,
        state=standing.state,
        global_min=standing.global_min,
        domains=standing.domains,
        per_domain=[
            SpreadDomain(domain=d.domain, matching=d.matching, skew=d.skew, refused=d.refused)
            for d in standing.per_domain
        ],
        why=standing.why,
    )


def refusals(engine: AffinityEngine, result: FilterResult) -> list[Refusal]:
    """The filter's rejections grouped by ESXi host and reason, hosts in name order."""
    groups: dict[tuple[str, str, str, str], list[str]] = {}
    for node, why in result.rejected.items():
        host = engine.index.domain(node, LABEL_ESXI_HOST) or ""
        groups.setdefault((host, why.plugin, why.reason, why.message), []).append(node)
    return [
        Refusal(host=host, nodes=sorted(nodes), plugin=plugin, reason=reason, message=message)
        for (host, plugin, reason, message), nodes in sorted(groups.items())
    ]


def explain_pod(
    snapshot: ClusterSnapshot,
    engine: AffinityEngine,
    facts: PodFacts,
    events: Sequence[TopologyEvent],
    vm_restart: VmRestartView | None = None,
) -> PodExplanation:
    """The pod's explanation from one snapshot and the events read after it (and, for a
    virt-launcher pod, its VirtualMachine's placement waiting for a restart)."""
    pod = snapshot.pods.get(facts.key)
    if pod is None:  # deleted between the lookup and the snapshot
        raise PodNotFoundError(f"pod {facts.key} does not exist (any more)")
    record = engine.index.pod(pod.key)
    feasible: list[str] = []
    refused: list[Refusal] = []
    summary = ""
    if record is not None:
        terms = [_view(s) for s in standings(engine.index, record)]
    else:
        terms = _unplaced_terms(engine, pod)
        if not pod.spec.node_name:
            result = engine.filter(pod)
            feasible, refused = sorted(result.feasible), refusals(engine, result)
            summary = result.summary() if not feasible else f"{len(feasible)} node(s) fit"
    drs = [
        DrsRuleView(
            name=r.name,
            kind=r.kind,
            cluster_moid=r.cluster_moid,
            state=r.state,
            vms=r.vms,
            reason=r.reason,
            applied_at=r.applied_at,
            held_because=r.held_because,
        )
        for r in snapshot.drs_records
        if pod.key in r.pods
    ]
    identity = PodIdentity(
        key=pod.key,
        uid=facts.metadata.uid,
        generate_name=facts.metadata.generate_name,
        created_at=facts.metadata.creation_timestamp,
    )
    history = pod_history(events, identity, {r.name for r in drs})
    spreads = [_spread_view(s) for s in spread_standings(engine, pod)]
    host_level = any(t.host_level for t in terms) or any(s.host_level for s in spreads)
    headroom = [tight.sentence() for tight in host_headroom(engine, pod)]
    stranded = HaAudit(snapshot).rules_without_failover_room()
    failover = [failover_sentence(r.name, stranded[r.name]) for r in drs if r.name in stranded]
    drs_not_held = not_held(snapshot.drs_reports, pod.key)
    clusters = {(r.vcenter, r.cluster_moid) for r in snapshot.drs_records if pod.key in r.pods}
    placed = snapshot.placements.get(pod.spec.node_name)
    if placed is not None:
        clusters.add((placed.vcenter, placed.cluster_moid))
    shared = shared_hosts(snapshot.drs_reports, clusters)
    return PodExplanation(
        pod=pod.key,
        phase=_phase(facts),
        concerned=host_level
        or bool(drs)
        or bool(history)
        or vm_restart is not None
        or bool(drs_not_held),
        location=location(snapshot, pod.spec.node_name) if pod.spec.node_name else Location(""),
        terms=terms,
        feasible_nodes=feasible,
        refusals=refused,
        summary=summary,
        drs_rules=drs,
        history=history,
        spreads=spreads,
        host_headroom=headroom,
        ha_failover=failover,
        vm_restart=vm_restart,
        drs_not_held=drs_not_held,
        shared_hosts=shared,
    )


def _phase(facts: PodFacts) -> str:
    phase = facts.status.phase or "Unknown"
    return f"{phase}, terminating" if facts.metadata.deletion_timestamp else phase


def explain_node(
    snapshot: ClusterSnapshot, engine: AffinityEngine, name: str, events: Sequence[TopologyEvent]
) -> NodeExplanation:
    """The node's explanation: its host, its pods' host-level terms, what was done about it."""
    node = snapshot.nodes.get(name)
    if node is None:
        raise NodeNotFoundError(f"node {name} does not exist")
    where = location(snapshot, name)
    # The host by vCenter and moid: labels and moids may repeat across vCenters.
    placed = snapshot.placements.get(name)
    at = (placed.vcenter, placed.host_moid) if placed else None
    host = snapshot.hosts_by_vcenter.get(at) if at else None
    peers = sorted(
        other
        for other, placement in snapshot.placements.items()
        if (placement.vcenter, placement.host_moid) == at and other != name
    )
    terms = [
        _view(standing)
        for record in sorted(engine.index.pods_on(name), key=lambda r: r.key)
        for standing in standings(engine.index, record)
        if standing.term.physical
    ]
    return NodeExplanation(
        node=name,
        location=where,
        host_state=host.connection_state if host else "unknown",
        in_maintenance_mode=host.in_maintenance_mode if host else False,
        cordoned=node.spec.unschedulable,
        host_peers=peers,
        terms=terms,
        history=node_history(events, name),
    )


# -- rendering ---------------------------------------------------------------------------------


def _vm(where: Location) -> str:
    if not where.esxi_host:
        return "no known ESXi host"
    host = f"{where.vcenter}/{where.esxi_host}" if where.vcenter else where.esxi_host
    return (
        f"VM {where.vm_moid} on ESXi host {host} "
        f"(cluster {where.cluster}, datacenter {where.datacenter})"
    )


def _where(where: Location) -> str:
    return f"on node {where.node}, {_vm(where)}" if where.node else "on no node"


def _terms(terms: Sequence[TermView], own: str) -> str:
    lines = []
    for term in terms:
        whose = "" if term.owner == own else f" of pod {term.owner}"
        level = "host-level" if term.host_level else "not host-level"
        lines.append(f"  [{term.state}] {term.kind}{whose} ({level}): {term.rule}")
        if term.why:
            lines.append(f"      {term.why}")
    return "\n".join(lines)


def _spreads(spreads: Sequence[SpreadView]) -> str:
    lines = []
    for spread in spreads:
        level = "host-level" if spread.host_level else "not host-level"
        lines.append(f"  [{spread.state}] topology spread ({level}): {spread.rule}")
        lines.append(f"      {spread.why}")
        if spread.per_domain:
            shown = ", ".join(
                f"{d.domain}: {d.matching} (skew {d.skew}{', refused' if d.refused else ''})"
                for d in spread.per_domain
            )
            lines.append(f"      matching pods per domain: {shown}")
    return "\n".join(lines)


def _vm_restart(view: VmRestartView) -> str:
    namespace, _, name = view.vm.partition("/")
    lines = [f"VirtualMachine {view.vm}: its new placement waits for a restart (RestartRequired)"]
    for change in view.changes:
        running = "none" if change.running == "null" else change.running
        asked = "none" if change.template == "null" else change.template
        lines.append(f"  {change.field}: the template asks {asked}; the running VMI has {running}")
    lines.append(
        "  KubeVirt applies it only when the VM starts again (the Stage rollout strategy): "
        f"restart it (virtctl restart {name} -n {namespace}), or use the LiveUpdate strategy"
    )
    return "\n".join(lines)


def _history(history: Sequence[HistoryEntry]) -> str:
    rows = [[h.at, h.type, h.summary] for h in history]
    done = table(["AT", "EVENT", "WHAT"], rows)
    return "what hostaffinity did (oldest first):\n" + _indented(done)


def _indented(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


def render_pod(report: PodExplanation) -> str:
    if not report.concerned:
        return (
            f"pod {report.pod} ({report.phase}) {_where(report.location)}: no hostaffinity rule "
            "concerns it (no host-level term or spread, no DRS rule, no event)"
        )
    parts = [f"pod {report.pod} ({report.phase}) {_where(report.location)}"]
    if report.terms:
        parts.append("rules:\n" + _terms(report.terms, report.pod))
    if report.spreads:
        parts.append("topology spreads:\n" + _spreads(report.spreads))
    parts.extend(f"no host to spare: {sentence}" for sentence in report.host_headroom)
    parts.extend(f"no host to fail over to: {sentence}" for sentence in report.ha_failover)
    parts.extend(f"no DRS rule: {sentence}" for sentence in report.drs_not_held)
    parts.extend(f"shared hosts: {sentence}" for sentence in report.shared_hosts)
    if report.vm_restart is not None:
        parts.append(_vm_restart(report.vm_restart))
    if report.summary:
        rows = [[r.host or "(unknown)", ", ".join(r.nodes), r.message] for r in report.refusals]
        refused = _indented(table(["ESXI HOST", "NODES", "WHY NOT"], rows)) if rows else ""
        fits = f"\n  fits: {', '.join(report.feasible_nodes)}" if report.feasible_nodes else ""
        parts.append(f"scheduling now: {report.summary}{fits}\n{refused}".rstrip())
    for rule in report.drs_rules:
        state = f"held: {rule.held_because}" if rule.held_because else rule.state
        parts.append(
            f"DRS {rule.kind} rule {rule.name} in cluster {rule.cluster_moid} ({state}) "
            f"over VMs {', '.join(rule.vms)}" + (f": {rule.reason}" if rule.reason else "")
        )
    parts.append(_history(report.history) if report.history else "no hostaffinity events")
    return "\n\n".join(parts)


def render_node(report: NodeExplanation) -> str:
    state = report.host_state + (", maintenance" if report.in_maintenance_mode else "")
    head = f"node {report.node}{' (cordoned)' if report.cordoned else ''}: {_vm(report.location)}"
    parts = [head]
    if report.location.esxi_host:
        peers = ", ".join(report.host_peers) or "none"
        parts[0] += f"\n  host {state}; other nodes on it: {peers}"
    parts.append(
        "host-level rules of its pods:\n" + _terms(report.terms, "")
        if report.terms
        else "no pod on it has a host-level rule"
    )
    parts.append(_history(report.history) if report.history else "no hostaffinity events")
    return "\n\n".join(parts)
