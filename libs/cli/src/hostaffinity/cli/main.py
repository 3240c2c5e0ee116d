"""`hostaffinity`: `seed-vcsim` for demo clusters, `events` to read the event stream, the
operator's `topology`, `exposure` and `what-if maintenance`, and `bus` to set up NATS
(`provision`, `credentials`, `secrets`, `auth-config`)."""

import argparse
import asyncio
import datetime
import json
import logging
import sys
from collections.abc import Sequence
from typing import NoReturn, cast

import msgspec
from kubernetes_asyncio.client.exceptions import ApiException
from nats.errors import Error as NatsError

from hostaffinity.cli.bus_commands import add_bus_commands
from hostaffinity.cli.cluster_check import add_check_command
from hostaffinity.cli.connections import (
    BUS_WITHIN_SECONDS,
    kubernetes_settings,
    one_line,
    open_api,
    open_bus,
)
from hostaffinity.cli.demo import add_demo_command
from hostaffinity.cli.event_log import read_events
from hostaffinity.cli.event_query import EventQuery, parse_since, table_header, table_row
from hostaffinity.cli.fleet_commands import add_fleet_commands
from hostaffinity.cli.nats_options import add_nats_options, nats_settings
from hostaffinity.cli.operator import add_operator_commands
from hostaffinity.cli.seeding import seed_node_vms, vcenter_settings
from hostaffinity.cli.uninstall import add_uninstall_command
from hostaffinity.cli.vcenter_access import open_vcenter
from hostaffinity.runtime.kube.client import NODES
from hostaffinity.schema.version import release_version

FIX_SEED_VCENTER = (
    "check --vcenter and that the simulator runs (make dev's: http://user:pass@127.0.0.1:8989/sdk)"
)


async def node_names(kubeconfig: str | None, server: str | None = None) -> list[str]:
    async with open_api(kubernetes_settings(kubeconfig, server=server)) as client:
        listed = json.loads(await client.request("GET", NODES.path()))
    return [item["metadata"]["name"] for item in listed["items"]]


async def seed(args: argparse.Namespace) -> int:
    settings = vcenter_settings(args.vcenter)
    names = args.nodes.split(",") if args.nodes else await node_names(args.kubeconfig, args.server)
    async with open_vcenter(settings, FIX_SEED_VCENTER) as service_instance:
        result = await asyncio.to_thread(seed_node_vms, service_instance, names)
    for node, host in sorted(result.created.items()):
        print(f"created VM {node} on {host}")
    print(f"{len(result.created)} created, {len(result.existing)} already there")
    return 0


async def show_events(args: argparse.Namespace) -> int:
    """Events as a table or JSON lines: filtered by the server to the asked types and start
    time; up to now with --since (on with --follow), else followed as they come."""
    query = EventQuery(
        types=tuple(t for listed in args.type for t in listed.split(",") if t),
        since=None
        if args.since is None
        else parse_since(args.since, datetime.datetime.now(datetime.UTC)),
        pod=args.pod,
        node=args.node,
        host=args.host,
    )
    output = args.output or ("table" if sys.stdout.isatty() else "json")
    follow = follows_the_stream(args)
    async with open_bus(nats_settings(args), within=args.connect_timeout) as bus:
        if output == "table":
            print(table_header(), flush=True)
        async for event in read_events(bus, query, follow=follow, from_start=args.all):
            line = table_row(event) if output == "table" else msgspec.json.encode(event).decode()
            print(line, flush=True)
    return 0


def follows_the_stream(args: argparse.Namespace) -> bool:
    """Whether the command goes on until interrupted (Ctrl-C, exit 130): `events`, unless it is
    given --since without --follow. Every other command ends by itself."""
    return args.command == "events" and (args.follow or args.since is None)


class CommandLineParser(argparse.ArgumentParser):
    """A usage error in one line, naming the command and where its options are listed (the
    usage block argparse prints before it would be most of the screen for `hostaffinity`)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, usage_error(self.prog, message))


def usage_error(command: str, message: str) -> str:
    return f"{command}: {message}; see `{command} --help`\n"


def command_line() -> argparse.ArgumentParser:
    """Every command and its options; each command's parser knows its own words."""
    parser = CommandLineParser(prog="hostaffinity", description=__doc__)
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {release_version('hostaffinity-cli')}"
    )
    # Each command's parser is a CommandLineParser too (argparse makes them of the parent's
    # class); the modules that add them need only an ArgumentParser's methods.
    commands = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", required=True),
    )
    seeding = commands.add_parser("seed-vcsim", help="one VM per Kubernetes node in a simulator")
    seeding.add_argument("--vcenter", required=True, help="http://user:pass@host:port/sdk")
    seeding.add_argument("--kubeconfig", help="default: in-cluster or ~/.kube/config")
    seeding.add_argument("--server", help="API server address replacing the kubeconfig's")
    seeding.add_argument("--nodes", help="comma-separated node names instead of asking Kubernetes")
    seeding.set_defaults(run=seed)
    events = commands.add_parser(
        "events", help="hostaffinity events, filtered: by type, time and object"
    )
    add_nats_options(events)
    events.add_argument(
        "--type", action="append", default=[], help="TYPE[,TYPE...] (e.g. pod.evicted); repeatable"
    )
    events.add_argument(
        "--since", help="from a duration ago (90s, 15m, 2h, 7d, 1w) or a time (ISO 8601), to now"
    )
    events.add_argument("--follow", action="store_true", help="with --since: go on with new ones")
    events.add_argument("--all", action="store_true", help="from the start of the stream, and on")
    events.add_argument("--pod", help="NAMESPACE/NAME: events that name this pod")
    events.add_argument("--node", help="events that name this Kubernetes node")
    events.add_argument("--host", help="events that name this ESXi host")
    events.add_argument(
        "-o", "--output", choices=("json", "table"), help="default: table on a terminal, else json"
    )
    events.add_argument(
        "--connect-timeout",
        type=float,
        default=BUS_WITHIN_SECONDS,
        help=f"seconds to wait for NATS (default {BUS_WITHIN_SECONDS:g})",
    )
    events.set_defaults(run=show_events)
    add_operator_commands(commands)
    add_bus_commands(commands)
    add_fleet_commands(commands)
    add_check_command(commands)
    add_demo_command(commands)
    add_uninstall_command(commands)
    for words, command in command_parsers(parser).items():
        command.set_defaults(words=words)
    return parser


def command_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every command the parser runs, by its words (`bus subscriber add`), with its parser."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, sub in action.choices.items():
                nested = command_parsers(sub)
                found.update({f"{word} {rest}": p for rest, p in nested.items()} or {word: sub})
    return found


def main(argv: Sequence[str] | None = None) -> None:
    parser = command_line()
    args, unknown = parser.parse_known_args(argv)
    command = f"hostaffinity {args.words}"
    if unknown:
        parser.exit(2, usage_error(command, f"unrecognized arguments: {' '.join(unknown)}"))
    # force: each run logs to the stderr of now (an earlier in-process run may have left a
    # handler on a stream that is closed since).
    logging.basicConfig(level=logging.WARNING, force=True)
    try:
        sys.exit(asyncio.run(args.run(args)))
    except (ValueError, RuntimeError, OSError, NatsError, ApiException) as error:
        # CommandFailed (connections.py) for what a command could not reach; the rest are
        # the commands' own answers (a pod that does not exist) and what escaped them.
        parser.exit(1, f"{command}: {one_line(error)}\n")
    except KeyboardInterrupt:
        sys.exit(130)
