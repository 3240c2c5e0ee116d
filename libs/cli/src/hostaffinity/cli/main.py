"""`hostaffinity`: `seed-vcsim` for demo clusters, `events` to follow the event stream, the
operator's `topology`, `exposure` and `what-if maintenance`, and `bus` to set up NATS
(`provision`, `credentials`, `secrets`, `auth-config`)."""

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Sequence

import msgspec
from nats.js.api import DeliverPolicy

from hostaffinity.cli.bus_commands import add_bus_commands
from hostaffinity.cli.cluster_check import add_check_command
from hostaffinity.cli.demo import add_demo_command
from hostaffinity.cli.nats_options import add_nats_options, nats_settings
from hostaffinity.cli.operator import add_operator_commands
from hostaffinity.cli.seeding import seed_node_vms, vcenter_settings
from hostaffinity.cli.uninstall import add_uninstall_command
from hostaffinity.runtime.bus import Bus
from hostaffinity.runtime.config import KubernetesSettings
from hostaffinity.runtime.kube import NODES, KubeClient, api_client
from hostaffinity.runtime.vcenter import connect
from hostaffinity.schema import EVENTS_STREAM, EVENTS_SUBJECT_PREFIX, UNDECODABLE, decode_event


async def node_names(kubeconfig: str | None, server: str | None = None) -> list[str]:
    api = await api_client(KubernetesSettings(kubeconfig=kubeconfig, server=server))
    try:
        listed = json.loads(await KubeClient(api).request("GET", NODES.path()))
    finally:
        await api.close()
    return [item["metadata"]["name"] for item in listed["items"]]


async def seed(args: argparse.Namespace) -> int:
    names = args.nodes.split(",") if args.nodes else await node_names(args.kubeconfig, args.server)
    result = await asyncio.to_thread(
        lambda: seed_node_vms(connect(vcenter_settings(args.vcenter)), names)
    )
    for node, host in sorted(result.created.items()):
        print(f"created VM {node} on {host}")
    print(f"{len(result.created)} created, {len(result.existing)} already there")
    return 0


async def follow_events(args: argparse.Namespace) -> int:
    """Print events as JSON lines; from the start of the stream with --all."""
    try:
        # The runtime's connect retries for ever, as a service should; a person at a terminal
        # wants to hear that NATS is not there.
        async with asyncio.timeout(args.connect_timeout):
            bus = await Bus.connect(nats_settings(args), name="hostaffinity-cli")
    except TimeoutError:
        raise RuntimeError(
            f"cannot reach NATS at {args.nats} within {args.connect_timeout:g} s"
        ) from None
    policy = DeliverPolicy.ALL if args.all else DeliverPolicy.NEW
    # Naming the stream spares a STREAM.NAMES lookup the read-only identity may not make.
    subscription = await bus.js.subscribe(
        f"{EVENTS_SUBJECT_PREFIX}.>",
        stream=EVENTS_STREAM,
        ordered_consumer=True,
        deliver_policy=policy,
    )
    try:
        async for message in subscription.messages:
            try:
                event = decode_event(message.data)
            except UNDECODABLE as error:
                print(
                    f"undecodable message on {message.subject} ({len(message.data)} bytes): "
                    f"{str(error)[:200]}",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            print(msgspec.json.encode(event).decode(), flush=True)
    finally:
        await bus.close()
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="hostaffinity", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    seeding = commands.add_parser("seed-vcsim", help="one VM per Kubernetes node in a simulator")
    seeding.add_argument("--vcenter", required=True, help="http://user:pass@host:port/sdk")
    seeding.add_argument("--kubeconfig", help="default: in-cluster or ~/.kube/config")
    seeding.add_argument("--server", help="API server address replacing the kubeconfig's")
    seeding.add_argument("--nodes", help="comma-separated node names instead of asking Kubernetes")
    seeding.set_defaults(run=seed)
    events = commands.add_parser("events", help="print hostaffinity events as JSON lines")
    add_nats_options(events)
    events.add_argument("--all", action="store_true", help="from the start of the stream")
    events.add_argument(
        "--connect-timeout", type=float, default=30.0, help="seconds to wait for NATS (default 30)"
    )
    events.set_defaults(run=follow_events)
    add_operator_commands(commands)
    add_bus_commands(commands)
    add_check_command(commands)
    add_demo_command(commands)
    add_uninstall_command(commands)
    args = parser.parse_args(argv)
    # force: each run logs to the stderr of now (an earlier in-process run may have left a
    # handler on a stream that is closed since).
    logging.basicConfig(level=logging.WARNING, force=True)
    try:
        sys.exit(asyncio.run(args.run(args)))
    except (ValueError, RuntimeError, OSError) as error:
        parser.exit(1, f"hostaffinity {args.command}: {error}\n")
    except KeyboardInterrupt:
        sys.exit(130)
