"""`hostaffinity fleet …`: run the fleet hub and read the fleet view (docs/fleet.md).

On the hub's side (its operator, with the hub's folder, fleet_registry.py):
- `hub-credentials --dir D`: the hub's identities and TLS, made once;
- `join NAME --cluster ID --hub URL --dir D`: register an install, write what it needs;
- `leave NAME --dir D`: forget it;
- `provision --dir D --nats URL`: create the view and set its sources to the registered
  installs; create the fleet rule leases bucket with its max age (`--lease-max-age`).

On any install (read-only, identity `cli`, from the install's own mirror of the view, so it
answers while the hub is away, from what the mirror last had):
- `topology`: hosts by clusters by nodes;
- `exposure`: workloads and fleet groups whose replicas share a host, in any cluster;
- `what-if maintenance HOST`, `what-if host-failure HOST`: what every cluster loses.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nats.js.errors import BucketNotFoundError

from hostaffinity.affinity.fleet import (
    ClusterLoss,
    FleetView,
    collector_paused,
    exposure,
    find_host,
    losses,
    read_view,
    topology,
)
from hostaffinity.cli.connections import BUS_WITHIN_SECONDS, CommandFailed, open_bus
from hostaffinity.cli.fleet_registry import HUB_AUTHORIZATION, HubFolder
from hostaffinity.cli.nats_options import add_nats_options, nats_settings
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.fleet_layout import (
    DEFAULT_LEASE_MAX_AGE_SECONDS,
    FLEET_STREAM,
    LEASES_STREAM,
    forget_departed,
    provision_hub,
)
from hostaffinity.runtime.bus.kv_entries import live_entries
from hostaffinity.runtime.process.config import NatsSettings
from hostaffinity.schema import FLEET_BUCKET
from hostaffinity.schema.names import WORKLOAD_KEY_PREFIX

HUB_REPLICAS = 3


def hub_folder(directory: str) -> HubFolder:
    """The hub's folder `hub-credentials` made; refused, naming what is missing, before
    anything is written into it."""
    folder = HubFolder(Path(directory))
    if missing := folder.missing_credentials():
        raise CommandFailed(
            f"{directory} is not the hub's folder: {', '.join(map(str, missing))} missing",
            f"make it with `hostaffinity fleet hub-credentials --dir {directory}`, "
            "or pass the hub's folder as --dir",
        )
    return folder


async def hub_credentials(args: argparse.Namespace) -> int:
    folder = HubFolder(Path(args.dir))
    try:
        made = folder.ensure_credentials(args.hostname or [])
    except OSError as error:
        raise CommandFailed(
            f"cannot write the hub's credentials into {args.dir} ({error.strerror or error})",
            "pass --dir a folder this user may write (it is made when missing)",
        ) from None
    for path in made:
        print(f"made {path}")
    print(f"hub authorization: {folder.directory / HUB_AUTHORIZATION}")
    return 0


async def join(args: argparse.Namespace) -> int:
    folder = hub_folder(args.dir)
    member = folder.join(args.name, args.cluster, args.hub)
    where = folder.install_dir(args.name)
    print(f"joined: {member.name} (install token {member.token})")
    print(f"  hub authorization rendered: {folder.directory / HUB_AUTHORIZATION} (reload the hub)")
    print(f"  for the install: {where}/ (fleet.conf holds its hub seed: keep it secret)")
    print(f"  on the install: nats.fleet_install: {member.token} in hostaffinity-config")
    print("  then: `hostaffinity fleet provision` on the hub (docs/fleet.md, Joining)")
    return 0


async def leave(args: argparse.Namespace) -> int:
    folder = hub_folder(args.dir)
    member = folder.leave(args.name)
    print(f"left: {member.name} (install token {member.token}); reload the hub, then provision")
    return 0


async def provision(args: argparse.Namespace) -> int:
    folder = hub_folder(args.dir)
    tokens = [member.token for member in folder.members()]
    settings = NatsSettings(
        servers=args.nats,
        identity="fleet-provision",
        nkey_seed_file=str(folder.seed_file("fleet-provision")),
        tls_ca_file=str(folder.tls_dir / "ca.crt"),
    )
    async with open_bus(
        settings, args.connect_timeout, "hostaffinity-fleet", provisioned=False
    ) as bus:
        await provision_hub(
            bus.js,
            tokens,
            replicas=args.replicas,
            history=args.history,
            lease_max_age_seconds=args.lease_max_age,
        )
        departed = await forget_departed(bus.js, tokens)
        info = await bus.js.stream_info(FLEET_STREAM)
        print(
            f"fleet view {FLEET_STREAM}: {len(tokens)} installs, "
            f"{len(info.config.sources or [])} sources, {info.state.messages} messages, "
            f"R{info.config.num_replicas}; {departed} keys of installs that left deleted"
        )
        leases = await bus.js.stream_info(LEASES_STREAM)
        print(
            f"fleet rule leases {LEASES_STREAM}: max age {leases.config.max_age or 0:g} s, "
            f"{leases.state.messages} held, R{leases.config.num_replicas}"
        )
    return 0


def _positive_seconds(text: str) -> float:
    """A duration in seconds above 0 (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(
            f"{text} s: must be above 0 (a crashed holder would keep its fleet rules for ever)"
        )
    return value


# The keys `fleet exposure` needs: workloads only (the topology is a quarter of an estate's keys).
WORKLOAD_KEYS = f"*.{WORKLOAD_KEY_PREFIX}>"


async def read_fleet(bus: Bus, keys: str = ">") -> FleetView:
    """The view's live entries (those `keys` matches), read through one watch of the bucket."""
    try:
        kv = await bus.js.key_value(FLEET_BUCKET)
    except BucketNotFoundError:
        raise CommandFailed(
            "this bus has no fleet view",
            "join the install to a fleet (`hostaffinity fleet join` on the hub, then "
            "nats.fleet_install and `hostaffinity bus provision` here; docs/fleet.md)",
        ) from None
    with collector_paused():  # tens of thousands of messages: see read_view
        entries = await live_entries(kv, keys)
    return read_view(entries)


async def _view(args: argparse.Namespace, keys: str = ">") -> FleetView:
    async with open_bus(nats_settings(args), args.connect_timeout) as bus:
        view = await read_fleet(bus, keys)
    for key in view.undecodable:
        print(f"skipped {key}: its value does not decode", file=sys.stderr)
    return view


def _emit(rows: list[Any], args: argparse.Namespace, table: list[str]) -> None:
    if args.output == "json":
        json.dump(rows, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write("".join(f"{line}\n" for line in table))


async def show_topology(args: argparse.Namespace) -> int:
    view = await _view(args)
    rows = topology(view)
    table = [f"{'HOST':32} {'CLUSTER':24} NODES"]
    for row in rows:
        for cluster, nodes in row.nodes.items():
            table.append(f"{row.host_name:32} {cluster:24} {', '.join(nodes)}")
    table.append(f"{len(rows)} hosts, {len(view.clusters())} clusters")
    _emit([asdict(row) for row in rows], args, table)
    return 0


async def show_exposure(args: argparse.Namespace) -> int:
    view = await _view(args, WORKLOAD_KEYS)
    found = exposure(view)
    table = [f"{'EXPOSED':48} {'HOST':28} REPLICAS"]
    for item in found:
        pods = ", ".join(f"{r.cluster}:{r.pod}" for r in item.replicas)
        table.append(f"{item.subject:48} {item.host_name:28} {pods}")
    table.append(f"{len(found)} exposures in {len(view.clusters())} clusters")
    rows = [
        {
            "subject": item.subject,
            "fleet_group": item.group,
            "host_id": item.host_id,
            "host_name": item.host_name,
            "clusters": item.clusters,
            "replicas": [asdict(r) for r in item.replicas],
        }
        for item in found
    ]
    _emit(rows, args, table)
    return 1 if found and args.fail_on_exposure else 0


async def what_if(args: argparse.Namespace) -> int:
    view = await _view(args)
    host = find_host(view, args.host)
    if host is None:
        raise ValueError(f"no host {args.host!r} in the fleet view (`hostaffinity fleet topology`)")
    found = losses(view, host)
    failure = args.what == "host-failure"
    table = [f"{args.what} of {args.host} ({host}): {len(found)} clusters affected"]
    for loss in found:
        table += _loss_lines(loss, failure=failure)
    _emit([asdict(loss) | {"down": loss.down} for loss in found], args, table)
    return 0


def _loss_lines(loss: ClusterLoss, *, failure: bool) -> list[str]:
    verb = "lost" if failure else "to move (DRS evacuates their VMs)"
    lines = [f"{loss.cluster}: {len(loss.nodes)} nodes {verb}: {', '.join(loss.nodes) or '-'}"]
    for name, lost, total in loss.workloads:
        if failure:
            state = f"DOWN ({lost} of {total})" if lost == total else f"{lost} of {total} replicas"
        else:
            state = f"{lost} of {total} replicas there, moving with their nodes"
        lines.append(f"  {name}: {state}")
    if loss.groups:
        lines.append(f"  fleet groups hit: {', '.join(loss.groups)}")
    return lines


def _reader(verbs: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = verbs.add_parser(name, help=help_text)
    add_nats_options(parser)
    parser.add_argument("--connect-timeout", type=float, default=BUS_WITHIN_SECONDS)
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    return parser


def add_fleet_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fleet = commands.add_parser("fleet", help="the fleet hub, and the view of every cluster")
    verbs = fleet.add_subparsers(dest="fleet_command", required=True)
    made = verbs.add_parser("hub-credentials", help="make the hub's identities and TLS, once")
    made.add_argument("--dir", required=True, help="the hub's folder")
    made.add_argument("--hostname", action="append", help="another name installs dial the hub by")
    made.set_defaults(run=hub_credentials)
    joining = verbs.add_parser("join", help="register an install on the hub")
    joining.add_argument("name", help="the install's name in the fleet (a DNS label)")
    joining.add_argument("--cluster", required=True, help="the install's cluster identity")
    joining.add_argument("--hub", action="append", required=True, help="hub leaf URL (tls://)")
    joining.add_argument("--dir", required=True, help="the hub's folder")
    joining.set_defaults(run=join)
    leaving = verbs.add_parser("leave", help="forget an install")
    leaving.add_argument("name")
    leaving.add_argument("--dir", required=True, help="the hub's folder")
    leaving.set_defaults(run=leave)
    provisioning = verbs.add_parser("provision", help="create or update the hub's fleet view")
    provisioning.add_argument("--dir", required=True, help="the hub's folder")
    provisioning.add_argument("--nats", action="append", required=True, help="a hub server URL")
    provisioning.add_argument("--replicas", type=int, default=HUB_REPLICAS)
    provisioning.add_argument("--history", type=int, default=1, help="revisions kept per key")
    provisioning.add_argument(
        "--lease-max-age",
        type=_positive_seconds,
        default=DEFAULT_LEASE_MAX_AGE_SECONDS,
        metavar="SECONDS",
        help="how long a fleet rule's lease outlives its holder's last renewal "
        f"(default {DEFAULT_LEASE_MAX_AGE_SECONDS:g})",
    )
    provisioning.add_argument("--connect-timeout", type=float, default=BUS_WITHIN_SECONDS)
    provisioning.set_defaults(run=provision)
    _reader(verbs, "topology", "hosts by clusters by nodes").set_defaults(run=show_topology)
    exposed = _reader(verbs, "exposure", "workloads and fleet groups sharing a host")
    exposed.add_argument(
        "--fail-on-exposure", action="store_true", help="exit 1 when anything is exposed"
    )
    exposed.set_defaults(run=show_exposure)
    whatif = verbs.add_parser("what-if", help="what every cluster loses with one host")
    kinds = whatif.add_subparsers(dest="what", required=True)
    for what, text in (
        ("maintenance", "the host enters maintenance: what must move, cluster by cluster"),
        ("host-failure", "the host fails: what every cluster loses"),
    ):
        parser = _reader(kinds, what, text)
        parser.add_argument("host", help="host id, name or short name")
        parser.set_defaults(run=what_if)
