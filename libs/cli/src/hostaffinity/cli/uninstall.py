"""`hostaffinity uninstall`: take back what hostaffinity wrote outside its namespace, and
nothing of anyone else's.

In this order, each step only once the one before it succeeded:
1. the DRS rules and groups the drs-translator created: in vCenter, a rule or group is removed
   only when its name has our prefix AND the `hostaffinity-drs` bucket holds its ownership
   record (the drs-translator's own rule); rules first, then the groups they name. One with our
   prefix and no record is reported and left, like everything else in the cluster. A fleet
   group's rule (`hostaffinity-fleet-...`) is left too, record or not, and said so: another
   install with members of the group takes it over (docs/fleet-groups.md);
2. node labels and annotations under `hostaffinity.io/`, and `alpha.cna.vmware.com/host` only
   with `--legacy-host-label` (the archived VMware plugin wrote that key too: it is ours only
   where the shared setting `legacy_host_label` made the node-labeller write it), and the zone
   and region labels the node lists in `hostaffinity.io/failure-domain-labels` (those the
   node-labeller set; the cloud provider's stay);
3. the bus state: our streams and buckets, deleted as the `provision` identity (the ownership
   records go with them, so step 1 comes first and a failed step 1 stops here).

The services must be stopped first, or the node-labeller and the drs-translator write again: a
live Lease of a leader-elected service makes the command refuse (and a dry run say so).
With `--dry-run` it reads the same and prints what it would do (docs/uninstall.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import urlsplit

from nats.js.errors import NotFoundError
from pyVmomi import vim, vmodl

from hostaffinity.cli.bus_access import OUR_STREAMS
from hostaffinity.cli.connections import (
    BUS_WITHIN_SECONDS,
    fix_nats,
    kubernetes_settings,
    open_api,
    open_bus,
)
from hostaffinity.cli.leases import leadership, read_leases
from hostaffinity.cli.reading import drs_records
from hostaffinity.cli.seeding import wait_for_task
from hostaffinity.cli.vcenter_access import open_vcenter
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.kube.client import NODES
from hostaffinity.runtime.process.config import KubernetesSettings, NatsSettings
from hostaffinity.runtime.vcenter.settings import VCenterSettings
from hostaffinity.schema import (
    ANNOTATION_FAILURE_DOMAIN_LABELS,
    LABEL_LEGACY_HOST,
    LABEL_REGION,
    LABEL_ZONE,
    DrsOwnership,
    parse_drs_name,
)

OUR_KEY_PREFIX: Final = "hostaffinity.io/"
PASSWORD_VARIABLE: Final = "HOSTAFFINITY_VCENTER__PASSWORD"
GROUP_KINDS: Final = frozenset({"vm-group", "host-group"})
FIX_VCENTER: Final = (
    "check --vcenter and that vCenter can be reached from here; nothing was changed"
)
FIX_VCENTER_LOGIN: Final = (
    f"check the user in --vcenter and the password (in ${PASSWORD_VARIABLE} or the URL); "
    "nothing was changed"
)
_vim: Any = vim


@dataclass
class ClusterCleanup:
    """One vSphere cluster: the rule keys and group names of ours, what was left and why."""

    rules: dict[str, int] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)


def ours_in_cluster(
    records: Mapping[str, DrsOwnership], rules: Iterable[Any], groups: Iterable[Any]
) -> ClusterCleanup:
    """What of one cluster's `configurationEx` is ours: recorded in our bucket (whose records
    name only what this install created). Another install's objects (their names carry its
    cluster identity) are left without a word; one named as we name ours but not recorded is
    reported and left."""
    cleanup = ClusterCleanup()
    for kind, found in (("rule", rules), ("group", groups)):
        for obj in found:
            parsed = parse_drs_name(obj.name)
            if parsed is None:
                continue
            record = records.get(obj.name)
            if parsed.fleet:
                if record is not None:
                    cleanup.left.append(
                        f"{kind} {obj.name}: a fleet group's rule, left for the install that "
                        "takes its lease next (remove it by hand once no cluster has members)"
                    )
                continue
            if record is not None and (record.kind in GROUP_KINDS) == (kind == "group"):
                if kind == "rule":
                    cleanup.rules[obj.name] = obj.key
                else:
                    cleanup.groups.append(obj.name)
            elif not _another_install_s(obj.name, records):
                cleanup.left.append(f"{kind} {obj.name}: our prefix, but no ownership record")
    return cleanup


def _another_install_s(name: str, records: Mapping[str, DrsOwnership]) -> bool:
    """Named for an install other than the one whose records these are."""
    parsed = parse_drs_name(name)
    ours = {
        parsed_record.install for r in records.values() if (parsed_record := parse_drs_name(r.name))
    }
    return parsed is not None and parsed.install is not None and parsed.install not in ours


def node_keys(node: Mapping[str, Any], legacy_host_label: bool) -> tuple[list[str], list[str]]:
    """The label and annotation keys of ours on one Node."""
    metadata = node["metadata"]
    listed = (metadata.get("annotations") or {}).get(ANNOTATION_FAILURE_DOMAIN_LABELS, "")
    set_by_us = {key for key in listed.split(",") if key in (LABEL_ZONE, LABEL_REGION)}

    def ours(key: str, label: bool) -> bool:
        return key.startswith(OUR_KEY_PREFIX) or (
            label and ((legacy_host_label and key == LABEL_LEGACY_HOST) or key in set_by_us)
        )

    labels = sorted(k for k in metadata.get("labels") or {} if ours(k, True))
    annotations = sorted(k for k in metadata.get("annotations") or {} if ours(k, False))
    return labels, annotations


class Uninstall:
    """The three steps; `say` prints each action as it is done (or would be, on a dry run)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self._dry_run: bool = args.dry_run

    def say(self, action: str, what: str) -> None:
        print(f"{'would ' + action if self._dry_run else action + 'd'} {what}", flush=True)

    async def run(self) -> int:
        args = self._args
        vcenter = None if args.vcenter is None else _vcenter(args)  # a malformed one said first
        await self._check_stopped()
        async with open_bus(
            _nats(args),
            args.connect_timeout,
            "hostaffinity-uninstall",
            provisioned=False,  # a bus partly removed by an earlier run is what it is
            fix=fix_nats("provision"),
        ) as bus:
            records = [r for r in await drs_records(bus) if r.vcenter == args.vcenter_name]
            by_cluster: dict[str, dict[str, DrsOwnership]] = {}
            for record in records:
                by_cluster.setdefault(record.cluster_moid, {})[record.name] = record
            if by_cluster:
                await self._remove_drs(vcenter, by_cluster)
            else:
                print(f"no DRS ownership records for vCenter {args.vcenter_name!r}", flush=True)
            await self._remove_node_keys()
            await self._remove_bus_state(bus)
        return 0

    async def _check_stopped(self) -> None:
        """A leader still working would write again what this removes: refuse, or on a dry
        run, say so."""
        args = self._args
        leases = await read_leases(_kubernetes(args), args.namespace)
        now = datetime.now(UTC)
        live = [s for s, lease in leases.items() if leadership(s, lease, now).holder]
        if not live:
            return
        running = f"{', '.join(live)} still running (a live Lease in {args.namespace})"
        stop = f"kubectl -n {args.namespace} scale deployment --all --replicas=0"
        if not self._dry_run:
            raise RuntimeError(f"{running}: stop them first ({stop}); nothing was changed")
        print(f"note: {running}; stop them before the real run ({stop})", flush=True)

    async def _remove_drs(
        self,
        vcenter: VCenterSettings | None,
        by_cluster: Mapping[str, Mapping[str, DrsOwnership]],
    ) -> None:
        if vcenter is None:
            raise ValueError(
                f"{sum(map(len, by_cluster.values()))} DRS rules and groups are recorded as "
                "ours: give --vcenter to remove them (nothing was changed)"
            )
        async with open_vcenter(vcenter, FIX_VCENTER, FIX_VCENTER_LOGIN) as si:
            await asyncio.to_thread(self._remove_in_vcenter, si, by_cluster)

    def _remove_in_vcenter(
        self, si: vim.ServiceInstance, by_cluster: Mapping[str, Mapping[str, DrsOwnership]]
    ) -> None:
        for moid, records in sorted(by_cluster.items()):
            cluster = _vim.ClusterComputeResource(moid, si._stub)
            try:
                config = cluster.configurationEx
            except vmodl.fault.ManagedObjectNotFound:
                print(f"cluster {moid} is gone: nothing of ours to remove there", flush=True)
                continue
            cleanup = ours_in_cluster(records, config.rule or (), config.group or ())
            for why in cleanup.left:
                print(f"left {why} (cluster {moid})", flush=True)
            for name in cleanup.rules:
                self.say("remove", f"DRS rule {name} (cluster {moid})")
            for name in cleanup.groups:
                self.say("remove", f"DRS group {name} (cluster {moid})")
            if self._dry_run:
                continue
            # Rules first: vCenter refuses to remove a group a rule still names.
            if cleanup.rules:
                _reconfigure(cluster, rules=list(cleanup.rules.values()))
            if cleanup.groups:
                _reconfigure(cluster, groups=cleanup.groups)

    async def _remove_node_keys(self) -> None:
        args = self._args
        async with open_api(_kubernetes(args), rights="list and patch nodes") as client:
            listed = json.loads(await client.request("GET", NODES.path()))
            for node in listed["items"]:
                name = node["metadata"]["name"]
                labels, annotations = node_keys(node, args.legacy_host_label)
                if not labels and not annotations:
                    continue
                self.say("remove", f"from node {name}: {', '.join([*labels, *annotations])}")
                if self._dry_run:
                    continue
                # A merge patch that names only our keys: every other label stays as it is.
                patch = {
                    "metadata": {
                        "labels": dict.fromkeys(labels),
                        "annotations": dict.fromkeys(annotations),
                    }
                }
                await client.request(
                    "PATCH",
                    NODES.path(name),
                    body=patch,
                    content_type="application/merge-patch+json",
                )

    async def _remove_bus_state(self, bus: Bus) -> None:
        for stream in OUR_STREAMS:
            try:
                await bus.js.stream_info(stream)
            except NotFoundError:
                continue
            self.say("delete", f"bus stream {stream}")
            if not self._dry_run:
                await bus.js.delete_stream(stream)


def _reconfigure(cluster: Any, *, rules: Iterable[int] = (), groups: Iterable[str] = ()) -> None:
    """One ReconfigureComputeResource_Task that removes these rules (by key) and groups."""
    spec = _vim.cluster.ConfigSpecEx(
        rulesSpec=[_vim.cluster.RuleSpec(operation="remove", removeKey=key) for key in rules],
        groupSpec=[_vim.cluster.GroupSpec(operation="remove", removeKey=name) for name in groups],
    )
    try:
        wait_for_task(cluster.ReconfigureComputeResource_Task(spec=spec, modify=True))
    except vmodl.MethodFault as fault:
        reason = getattr(fault, "msg", "") or type(fault).__name__
        raise RuntimeError(f"vCenter refused the removal: {reason}") from fault


def _kubernetes(args: argparse.Namespace) -> KubernetesSettings:
    return kubernetes_settings(args.kubeconfig, args.context, args.server)


def _nats(args: argparse.Namespace) -> NatsSettings:
    """The bus as the `provision` identity: the one that may read the ownership records and
    delete our streams."""
    return NatsSettings(
        servers=[args.nats],
        identity=None if args.nats_seed is None else "provision",
        nkey_seed_file=args.nats_seed,
        tls_ca_file=args.nats_ca_file,
    )


def _vcenter(args: argparse.Namespace) -> VCenterSettings:
    """`--vcenter https://user@host[:port]`; the password from the URL or the environment."""
    parts = urlsplit(args.vcenter)
    password = parts.password or os.environ.get(PASSWORD_VARIABLE)
    if not parts.hostname or parts.username is None or password is None:
        raise ValueError(
            f"--vcenter wants https://user@host (the password in ${PASSWORD_VARIABLE}), "
            f"not {args.vcenter!r}"
        )
    https = parts.scheme != "http"
    return VCenterSettings(
        host=parts.hostname,
        port=parts.port or (443 if https else 80),
        username=parts.username,
        password=password,
        protocol="https" if https else "http",
        ca_file=args.vcenter_ca_file,
    )


async def uninstall(args: argparse.Namespace) -> int:
    return await Uninstall(args).run()


def add_uninstall_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "uninstall",
        help="remove our DRS rules and groups, node labels and bus state (--dry-run: show)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dry-run", action="store_true", help="print what it would do, only")
    parser.add_argument(
        "--namespace", default="hostaffinity", help="where the services ran (default hostaffinity)"
    )
    parser.add_argument("--kubeconfig", help="default: in-cluster or ~/.kube/config")
    parser.add_argument("--context", help="the kubeconfig context (default: its current one)")
    parser.add_argument("--server", help="API server address replacing the kubeconfig's")
    parser.add_argument("--nats", default="nats://127.0.0.1:4222", help="a NATS server URL")
    parser.add_argument("--nats-seed", help="the nkey seed file of the `provision` identity")
    parser.add_argument("--nats-ca-file", help="the CA that signed the NATS servers' certificate")
    parser.add_argument(
        "--vcenter", help=f"https://user@host (password in ${PASSWORD_VARIABLE} or the URL)"
    )
    parser.add_argument("--vcenter-ca-file", help="the CA bundle vCenter's certificate chains to")
    parser.add_argument(
        "--vcenter-name",
        default="vcenter",
        help="the vCenter's name in the services' `vcenters:`, which the records name "
        "(default vcenter)",
    )
    parser.add_argument(
        "--legacy-host-label",
        action="store_true",
        help=f"also remove {LABEL_LEGACY_HOST} (when the shared legacy_host_label was on)",
    )
    parser.add_argument(
        "--connect-timeout",
        "--timeout",
        type=float,
        default=BUS_WITHIN_SECONDS,
        help=f"seconds to wait for NATS (default {BUS_WITHIN_SECONDS:g})",
    )
    parser.set_defaults(run=uninstall)
