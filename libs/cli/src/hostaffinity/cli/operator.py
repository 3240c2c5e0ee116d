"""The operator's commands: `topology`, `exposure`, `what-if maintenance`.

Each reads one snapshot (progress on stderr), answers from the affinity engine, and prints a
table or, with `-o json`, a document whose JSON Schema is in proto/schemas/ (TopologyReport,
ExposureReport, MaintenanceReport). Exit status: 0, or 1 when `exposure --fail-on-exposed` finds
a workload or `what-if maintenance` leaves a pod nowhere to go; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable

import msgspec

from hostaffinity.affinity.index import freeze_gc_after_initial_load
from hostaffinity.cli.exposure import exposure_report, render_exposure
from hostaffinity.cli.maintenance import maintenance_report, render_maintenance
from hostaffinity.cli.nats_options import add_nats_options, nats_settings
from hostaffinity.cli.reading import Progress, read_snapshot
from hostaffinity.cli.snapshot import ClusterSnapshot, EngineOptions, build_engine
from hostaffinity.cli.topology import render_topology, topology_report
from hostaffinity.runtime.config import KubernetesSettings

Answer = tuple[msgspec.Struct, str, int]  # report, its table, exit status
READ_TIMEOUT_SECONDS = 120.0


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.add_argument("--kubeconfig", help="default: in-cluster or ~/.kube/config")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("--server", help="API server address replacing the kubeconfig's")
    add_nats_options(parser)
    parser.add_argument(
        "--physical-anti-affinity",
        choices=("opt-in", "cluster-wide"),
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
        help="give up reading after this many seconds (NATS or the API unreachable)",
    )


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
    exposure.add_argument("--min-replicas", type=int, default=2, help="ignore smaller workloads")
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


def _options(args: argparse.Namespace) -> EngineOptions:
    return EngineOptions(args.physical_anti_affinity, args.unknown_placement)


def _topology(args: argparse.Namespace, snapshot: ClusterSnapshot) -> Answer:
    report = topology_report(snapshot, args.cluster)
    return report, render_topology(report), 0


def _exposure(args: argparse.Namespace, snapshot: ClusterSnapshot) -> Answer:
    if args.min_replicas < 2:
        raise ValueError("--min-replicas must be at least 2")
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


def run(
    answer: Callable[[argparse.Namespace, ClusterSnapshot], Answer],
) -> Callable[[argparse.Namespace], object]:
    """The async entry point main() runs for a command: read, answer, print, exit status."""

    async def command(args: argparse.Namespace) -> int:
        kubernetes = KubernetesSettings(
            kubeconfig=args.kubeconfig, context=args.context, server=args.server
        )
        try:
            async with asyncio.timeout(args.timeout):
                snapshot = await read_snapshot(kubernetes, nats_settings(args), Progress())
        except TimeoutError as error:
            # The bus and the informer retry for ever, as services should; a command gives up.
            raise RuntimeError(
                f"could not read the cluster and the topology KV within {args.timeout:g} s "
                "(see the warnings above)"
            ) from error
        # The snapshot lives until exit: keep the GC from walking its ~1M objects while the
        # index is built.
        freeze_gc_after_initial_load()
        report, text, status = answer(args, snapshot)
        if args.output == "json":
            print(msgspec.json.format(msgspec.json.encode(report), indent=2).decode())
        else:
            print(text)
        return status

    return command
