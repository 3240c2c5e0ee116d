"""The operator's commands: `topology`, `exposure`, `what-if maintenance|host-failure`,
`explain`, `status`.

Each reads one snapshot (progress on stderr), answers from the affinity engine, and prints a
table or, with `-o json`, a document whose JSON Schema is in proto/schemas/ (TopologyReport,
ExposureReport, MaintenanceReport, HostFailureReport, PodExplanation, NodeExplanation,
StatusReport). `explain` and
`status` read the event stream too, `status` the services' Leases. Exit status: 0, or 1 when
`exposure --fail-on-exposed` finds a workload, `what-if maintenance` leaves a pod nowhere to go,
`what-if host-failure` leaves a pod nowhere to go or a node VM that vSphere HA could not restart,
`status` finds something that needs attention, or what was asked about does not exist; 2 for bad
arguments.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import TypeVar, get_args

import msgspec

from hostaffinity.affinity.headroom import tight_workloads
from hostaffinity.affinity.index import freeze_gc_after_initial_load
from hostaffinity.affinity.interpod import PhysicalAntiAffinity
from hostaffinity.cli.connections import CommandFailed, kubernetes_settings, open_bus
from hostaffinity.cli.event_log import events_of, last_of_each_type
from hostaffinity.cli.explain import explain_node, explain_pod, render_node, render_pod
from hostaffinity.cli.exposure import exposure_report, render_exposure
from hostaffinity.cli.ha_audit import HaAudit
from hostaffinity.cli.history import NODE_EVENT_TYPES, POD_EVENT_TYPES
from hostaffinity.cli.host_failure import host_failure_report, render_host_failure
from hostaffinity.cli.leases import read_leases
from hostaffinity.cli.maintenance import maintenance_report, render_maintenance
from hostaffinity.cli.nats_options import add_nats_options, nats_settings
from hostaffinity.cli.pod_lookup import read_pod, require_node, split_pod_key
from hostaffinity.cli.reading import Progress, read_snapshot
from hostaffinity.cli.snapshot import ClusterSnapshot, EngineOptions, build_engine
from hostaffinity.cli.status import render_status, status_report
from hostaffinity.cli.streams import stream_views
from hostaffinity.cli.topology import render_topology, topology_report
from hostaffinity.cli.vm_lookup import read_vm_restart
from hostaffinity.runtime.process.config import KubernetesSettings
from hostaffinity.schema import TopologyEvent

Answer = tuple[msgspec.Struct, str, int]  # report, its table, exit status
T = TypeVar("T")
READ_TIMEOUT_SECONDS = 120.0


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.add_argument("--kubeconfig", help="default: in-cluster or ~/.kube/config")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("--server", help="API server address replacing the kubeconfig's")
    add_nats_options(parser)
    parser.add_argument(
        "--physical-anti-affinity",
        choices=get_args(PhysicalAntiAffinity),
        default="opt-in",
        help="as the services' shared.physical_anti_affinity",
    )
    parser.add_argument(
        "--unknown-placement",
        choices=("fail", "pass"),
        default="fail",
        help="as the services' shared.unknown_placement",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=READ_TIMEOUT_SECONDS,
        help="give up a read that takes longer than this many seconds (default 120; each "
        "request has its own few seconds)",
    )


def replica_count(text: str) -> int:
    """--min-replicas: refused before anything is read when it cannot name a shared host."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if count < 2:
        raise argparse.ArgumentTypeError(
            f"{text}: give 2 or more (a single replica shares a host with none of its own)"
        )
    return count


def add_operator_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the three commands on the `hostaffinity` parser."""
    topology = commands.add_parser(
        "topology", help="datacenter > cluster > ESXi host > nodes > pods"
    )
    topology.add_argument("--cluster", help="only this vSphere cluster (name or moid)")
    _common(topology)
    topology.set_defaults(run=run(_topology))

    exposure = commands.add_parser("exposure", help="workloads whose replicas share an ESXi host")
    exposure.add_argument("-n", "--namespace", help="only this namespace")
    exposure.add_argument(
        "--min-replicas", type=replica_count, default=2, help="ignore smaller workloads"
    )
    exposure.add_argument(
        "--label-set",
        help="comma-separated label keys: group pods by their values instead of by owner",
    )
    exposure.add_argument("--fail-on-exposed", action="store_true", help="exit 1 when any is found")
    _common(exposure)
    exposure.set_defaults(run=run(_exposure))

    what_if = commands.add_parser("what-if", help="what a change would do")
    changes = what_if.add_subparsers(dest="change", required=True)
    maintenance = changes.add_parser("maintenance", help="ESXi hosts entering maintenance")
    maintenance.add_argument("hosts", nargs="+", metavar="HOST", help="label value, name or moid")
    _common(maintenance)
    maintenance.set_defaults(run=run(_maintenance))
    failure = changes.add_parser(
        "host-failure", help="an ESXi host failing: what is exposed, which VMs HA cannot restart"
    )
    failure.add_argument("host", metavar="HOST", help="label value, name or moid")
    _common(failure)
    failure.set_defaults(run=run(_host_failure))

    explain = commands.add_parser("explain", help="why a pod or node is where it is")
    subjects = explain.add_subparsers(dest="subject", required=True)
    pod = subjects.add_parser("pod", help="a pod: its host-level rules, refusals, history")
    pod.add_argument("pod", metavar="NAMESPACE/NAME")
    _common(pod)
    pod.set_defaults(run=_explain_pod)
    node = subjects.add_parser("node", help="a node: its ESXi host, its pods' rules, history")
    node.add_argument("node", metavar="NAME")
    _common(node)
    node.set_defaults(run=_explain_node)

    status = commands.add_parser("status", help="leaders, last events, exposure, DLQ, streams")
    status.add_argument(
        "--namespace", default="hostaffinity", help="where the services' Leases are"
    )
    _common(status)
    status.set_defaults(run=_status)


def _options(args: argparse.Namespace) -> EngineOptions:
    return EngineOptions(args.physical_anti_affinity, args.unknown_placement)


def _topology(args: argparse.Namespace, snapshot: ClusterSnapshot) -> Answer:
    report = topology_report(snapshot, args.cluster)
    return report, render_topology(report), 0


def _exposure(args: argparse.Namespace, snapshot: ClusterSnapshot) -> Answer:
    keys = [k.strip() for k in (args.label_set or "").split(",") if k.strip()]
    report = exposure_report(
        snapshot,
        build_engine(snapshot, _options(args)).index,
        namespace=args.namespace,
        min_replicas=args.min_replicas,
        label_keys=keys,
    )
    return report, render_exposure(report), int(args.fail_on_exposed and bool(report.workloads))


def _maintenance(args: argparse.Namespace, snapshot: ClusterSnapshot) -> Answer:
    report = maintenance_report(snapshot, build_engine(snapshot, _options(args)), args.hosts)
    return report, render_maintenance(report), 0 if report.ok else 1


def _host_failure(args: argparse.Namespace, snapshot: ClusterSnapshot) -> Answer:
    report = host_failure_report(snapshot, build_engine(snapshot, _options(args)), args.host)
    return report, render_host_failure(report), 0 if report.ok else 1


def _kubernetes(args: argparse.Namespace) -> KubernetesSettings:
    return kubernetes_settings(args.kubeconfig, args.context, args.server)


async def _within(args: argparse.Namespace, what: str, reading: Awaitable[T]) -> T:
    """Await a read under --timeout: each request has its own limit (connections.py), this
    one bounds the whole read, however many requests it takes."""
    try:
        async with asyncio.timeout(args.timeout):
            return await reading
    except TimeoutError:
        raise CommandFailed(
            f"could not read {what} within {args.timeout:g} s; raise --timeout for a large cluster"
        ) from None


async def _snapshot(args: argparse.Namespace) -> ClusterSnapshot:
    snapshot = await _within(
        args,
        "the cluster and the topology KV",
        read_snapshot(_kubernetes(args), nats_settings(args), Progress()),
    )
    # The snapshot lives until exit: keep the GC from walking its ~1M objects while the
    # index is built.
    freeze_gc_after_initial_load()
    return snapshot


def _print(args: argparse.Namespace, report: msgspec.Struct, text: str) -> None:
    if args.output == "json":
        print(msgspec.json.format(msgspec.json.encode(report), indent=2).decode())
    else:
        print(text)


def run(
    answer: Callable[[argparse.Namespace, ClusterSnapshot], Answer],
) -> Callable[[argparse.Namespace], object]:
    """The async entry point main() runs for a command: read, answer, print, exit status."""

    async def command(args: argparse.Namespace) -> int:
        report, text, status = answer(args, await _snapshot(args))
        _print(args, report, text)
        return status

    return command


async def _events(args: argparse.Namespace, types: Sequence[str]) -> list[TopologyEvent]:
    async with open_bus(nats_settings(args)) as bus:
        return await _within(args, "the events stream", events_of(bus, types))


async def _explain_pod(args: argparse.Namespace) -> int:
    """Looks the pod up first: a pod that does not exist is said at once."""
    namespace, name = split_pod_key(args.pod)
    facts = await _within(args, "the pod", read_pod(_kubernetes(args), namespace, name))
    owners = facts.metadata.owner_references
    restart = await _within(
        args, "the pod's VirtualMachine", read_vm_restart(_kubernetes(args), namespace, owners)
    )
    snapshot = await _snapshot(args)
    events = await _events(args, POD_EVENT_TYPES)
    engine = build_engine(snapshot, _options(args))
    report = explain_pod(snapshot, engine, facts, events, restart)
    _print(args, report, render_pod(report))
    return 0


async def _explain_node(args: argparse.Namespace) -> int:
    """Looks the node up first, as _explain_pod the pod."""
    await _within(args, "the node", require_node(_kubernetes(args), args.node))
    snapshot = await _snapshot(args)
    events = await _events(args, NODE_EVENT_TYPES)
    report = explain_node(snapshot, build_engine(snapshot, _options(args)), args.node, events)
    _print(args, report, render_node(report))
    return 0


async def _status(args: argparse.Namespace) -> int:
    leases = await _within(args, "the Leases", read_leases(_kubernetes(args), args.namespace))
    snapshot = await _snapshot(args)
    engine = build_engine(snapshot, _options(args))
    exposure = exposure_report(snapshot, engine.index)
    tight = tight_workloads(engine, snapshot.pods)
    async with open_bus(nats_settings(args)) as bus:
        last = await _within(args, "the events stream", last_of_each_type(bus))
        streams = await _within(args, "the streams' state", stream_views(bus))
    report = status_report(
        datetime.now(UTC),
        leases,
        last,
        len(exposure.workloads),
        streams,
        tight,
        HaAudit(snapshot).rules_without_failover_room(),
        snapshot.drs_records,
        snapshot.drs_reports,
    )
    _print(args, report, render_status(report))
    return 1 if report.problems else 0
