"""`hostaffinity status`: one screen saying whether hostaffinity is working, and what needs
attention when it is not.

Each leader-elected service's Lease (leases.py) and the readiness its leader writes there at
each renewal (a vCenter of several away is a degraded part, not a dead service), the last event
each service published, the exposure count (the exposure report's), the dead letters waiting,
each stream's replicas, and the HA audit's rules that leave a node VM unrestartable after one
host failure (ha_audit.py). DRS rules held so that a host can enter maintenance mode (listed,
not a problem). The cluster identity the services stamp on their events; the DRS rules and
groups this install wants that vCenter does not hold, and other installs' rules on the same
hosts that block maintenance or leave no failover room (the drs-translator's cluster reports,
drs_attention.py). Anything that needs a person becomes one sentence in `problems`, and the
command exits 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Final

import msgspec

from hostaffinity.affinity.headroom import HostHeadroom
from hostaffinity.cli.drs_attention import cluster_identity, not_held, shared_hosts
from hostaffinity.cli.ha_audit import failover_sentence
from hostaffinity.cli.leases import LEADER_ELECTED, Lease, leadership, parse_time
from hostaffinity.cli.tables import table
from hostaffinity.schema import (
    DLQ_STREAM,
    DrsClusterReport,
    DrsOwnership,
    TopologyEvent,
    utc_timestamp,
)
from hostaffinity.schema.names import ANNOTATION_READINESS
from hostaffinity.schema.readiness import ReadinessPart, decode_readiness
from hostaffinity.schema.reports import ServiceView, StatusReport, StreamView, UnrestartableVm

# Every service, in the order the pipeline runs; the extender holds no Lease.
SERVICES: Final = (
    "node-labeller",
    "drs-translator",
    "admission-webhook",
    "scheduler-extender",
    "descheduler",
)


def _last_events(events: Sequence[TopologyEvent]) -> dict[str, TopologyEvent]:
    """The newest of the given events per `source`."""
    newest: dict[str, TopologyEvent] = {}
    for event in events:
        known = newest.get(event.source)
        if known is None or parse_time(event.occurred_at) > parse_time(known.occurred_at):
            newest[event.source] = event
    return newest


def _service(
    service: str, leases: Mapping[str, Lease | None], last: TopologyEvent | None, now: datetime
) -> ServiceView:
    view = ServiceView(
        service=service,
        lease="",
        holder="",
        live=True,
        last_event_type=str(last.__struct_config__.tag) if last else "",
        last_event_at=last.occurred_at if last else "",
    )
    if service not in LEADER_ELECTED:
        return view
    lease = leases.get(service)
    held = leadership(service, lease, now)
    verdict, parts = _leader_readiness(lease) if held.holder and lease else ("", [])
    return msgspec.structs.replace(
        view,
        lease=held.lease,
        holder=held.holder,
        live=bool(held.holder),
        acquired_at=held.acquired_at,
        renewed_at=held.renewed_at,
        held_seconds=held.held_seconds,
        readiness=verdict,
        readiness_parts=parts,
    )


def _leader_readiness(lease: Lease) -> tuple[str, list[ReadinessPart]]:
    """What the leader wrote on its Lease: the verdict and the parts that do not pass."""
    text = lease.metadata.annotations.get(ANNOTATION_READINESS)
    if text is None:
        return "", []  # a leader of a release that did not write it
    try:
        written = decode_readiness(text)
    except msgspec.DecodeError as error:
        unreadable = f"annotation {ANNOTATION_READINESS} unreadable: {error}"
        return "", [ReadinessPart(name="readiness", state="fails", detail=unreadable)]
    if not written.ready:
        return "not ready", written.parts
    degraded = any(part.state == "degraded" for part in written.parts)
    return ("degraded" if degraded else "ready"), written.parts


def _readiness_problems(service: ServiceView) -> list[str]:
    """One sentence per part of a live leader's readiness that does not pass."""
    sentences = []
    for part in service.readiness_parts:
        why = f" ({part.detail})" if part.detail else ""
        if part.state == "degraded":
            sentences.append(
                f"{service.service}: {part.name} is degraded{why}; it serves the other vCenters"
            )
        else:
            sentences.append(f"{service.service}'s leader is not ready: {part.name}{why}")
    return sentences


def status_report(
    now: datetime,
    leases: Mapping[str, Lease | None],
    last_events: Sequence[TopologyEvent],
    exposed_workloads: int,
    streams: Sequence[StreamView],
    no_host_to_spare: Sequence[HostHeadroom] = (),
    ha_unrestartable: Mapping[str, Sequence[UnrestartableVm]] | None = None,
    drs_records: Sequence[DrsOwnership] = (),
    drs_reports: Sequence[DrsClusterReport] = (),
) -> StatusReport:
    """The report at `now`, with a sentence for everything that needs attention."""
    last = _last_events(last_events)
    several = len({record.vcenter for record in drs_records}) > 1
    services = [_service(s, leases, last.get(s), now) for s in SERVICES]
    dlq = next((s.messages for s in streams if s.name == DLQ_STREAM), 0)
    cluster, disagreement = cluster_identity(list(last.values()))
    drs_not_held, shared = not_held(drs_reports), shared_hosts(drs_reports)
    problems = [*disagreement, *drs_not_held, *shared]
    problems += [
        f"{s.service} has no live leader (Lease {s.lease}: "
        + ("no holder, or not renewed within its duration)" if s.renewed_at else "not found)")
        for s in services
        if not s.live
    ]
    problems.extend(sentence for s in services for sentence in _readiness_problems(s))
    if dlq:
        problems.append(f"{dlq} dead letter(s) in {DLQ_STREAM}")
    problems.extend(
        f"stream {s.name}: replica {peer} is not current (lag {lag})"
        for s in streams
        for peer, lag in s.lagging.items()
    )
    if exposed_workloads:
        problems.append(
            f"{exposed_workloads} workload(s) with replicas sharing an ESXi host "
            "(see `hostaffinity exposure`)"
        )
    if no_host_to_spare:
        problems.append(
            f"{len(no_host_to_spare)} required host-level anti-affinity rule(s) with as many "
            "replicas as usable ESXi hosts: a rollout's extra pod has nowhere to go (see "
            "`hostaffinity explain pod` on the pods below)"
        )
    stranded = ha_unrestartable or {}
    if stranded:
        problems.append(
            f"{len(stranded)} DRS anti-affinity rule(s) of ours leave a node VM that vSphere HA "
            "could not restart after one ESXi host failure (see `hostaffinity what-if "
            "host-failure HOST` on the hosts below)"
        )
    return StatusReport(
        at=utc_timestamp(now),
        services=services,
        exposed_workloads=exposed_workloads,
        dlq_depth=dlq,
        streams=list(streams),
        problems=problems,
        no_host_to_spare=[f"{tight.pod}: {tight.sentence()}" for tight in no_host_to_spare],
        ha_unrestartable=[failover_sentence(rule, vms) for rule, vms in sorted(stranded.items())],
        held_rules=[
            f"{r.name} in cluster {_cluster(r, several)}: {r.held_because}"
            for r in drs_records
            if r.held_because
        ],
        cluster=cluster,
        drs_not_held=drs_not_held,
        shared_hosts=shared,
    )


def _cluster(record: DrsOwnership, several_vcenters: bool) -> str:
    """Cluster moids repeat across vCenters: `<vcenter>/<moid>` when the records span several."""
    return f"{record.vcenter}/{record.cluster_moid}" if several_vcenters else record.cluster_moid


def _held(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def render_status(report: StatusReport) -> str:
    service_rows = [
        [
            s.service,
            (s.holder or "NONE") if s.lease else "(every replica)",
            _held(s.held_seconds) if s.holder else "-",
            s.readiness or "-",
            f"{s.last_event_type} at {s.last_event_at}" if s.last_event_type else "-",
        ]
        for s in report.services
    ]
    stream_rows = [
        [
            s.name,
            str(s.messages),
            str(s.replicas),
            s.leader or "-",
            ", ".join(f"{p} lag {lag}" for p, lag in s.lagging.items()) or "all current",
        ]
        for s in report.streams
    ]
    parts = [
        f"cluster: {report.cluster or '(no event names it yet)'}",
        table(["SERVICE", "LEADER", "HELD FOR", "READINESS", "LAST EVENT"], service_rows),
        table(["STREAM", "MESSAGES", "REPLICAS", "LEADER", "REPLICA STATE"], stream_rows),
        f"exposed workloads: {report.exposed_workloads}; dead letters: {report.dlq_depth}",
    ]
    if report.held_rules:
        held = "\n".join(f"  - {h}" for h in report.held_rules)
        parts.append("DRS rules held for host maintenance:\n" + held)
    if report.problems:
        parts.append("needs attention:\n" + "\n".join(f"  - {p}" for p in report.problems))
    if report.no_host_to_spare:
        parts.append("no host to spare:\n" + "\n".join(f"  - {t}" for t in report.no_host_to_spare))
    if report.ha_unrestartable:
        parts.append(
            "no host to fail over to:\n" + "\n".join(f"  - {t}" for t in report.ha_unrestartable)
        )
    if not report.no_host_to_spare and not report.ha_unrestartable:
        parts.append("all well")
    return "\n\n".join(parts)
