"""`hostaffinity bus subscriber add|remove|list`: give an outside program its own read-only
identity on the events stream, or take it away, without restarting the bus.

Locally (`make dev`, compose; `--dir`): the seed goes to `<dir>/subscribers/<name>.nk`, the
registry and the servers' `subscribers.conf` are rewritten in `<dir>`, and every server whose
pid file is given (default `<dir>/nats.pid`, which `make dev` writes) is told to reload its
config (SIGHUP, what `nats-server --signal reload=<pid file>` sends).
In Kubernetes (`--namespace`): the same in Secrets (kubernetes_subscribers.py); the kubelet
updates each NATS pod's file and the pod's reloader container signals its server.
Then, once every server given admits the subscriber (subscriber_admission.py), the consumer is
made through the `provision` identity, the only one that creates consumers; `remove` deletes it
first, while the servers still allow that, and returns once every server refuses the subscriber.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Final, Protocol

import nats.errors
from nats.js.api import ConsumerConfig
from nats.js.errors import NotFoundError

from hostaffinity.cli.bus_credentials import new_user_seed, public_key
from hostaffinity.cli.bus_subscribers import (
    ACK_WAIT_SECONDS,
    REGISTRY_FILE,
    SUBSCRIBERS_CONF,
    LocalSubscribers,
    Subscriber,
    checked_event_types,
    checked_name,
    consumer_config,
)
from hostaffinity.cli.connections import (
    BUS_WITHIN_SECONDS,
    CommandFailed,
    fix_nats,
    kubernetes_settings,
    open_api,
    open_bus,
)
from hostaffinity.cli.kubernetes_subscribers import KubernetesSubscribers
from hostaffinity.cli.subscriber_admission import wait_until_every_server
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.process.config import NatsSettings
from hostaffinity.schema import EVENTS_STREAM

PID_FILE: Final = "nats.pid"
LOCAL_NATS: Final = "nats://127.0.0.1:4222"
LOCAL_DIR: Final = ".cache/dev/nats"  # where `make dev` has `bus credentials` write
# How long the servers get to load the new config before the consumer's creation gives up:
# a signal locally; in Kubernetes the kubelet's sync of the mounted Secret (about a minute).
LOCAL_RELOAD_SECONDS: Final = 20.0
KUBERNETES_RELOAD_SECONDS: Final = 180.0
_ATTEMPT_SECONDS: Final = 1.0


class SubscriberStore(Protocol):
    async def load(self) -> list[Subscriber]: ...
    async def save(self, subscribers: list[Subscriber]) -> bool: ...
    async def seed(self, name: str) -> bytes: ...
    async def kept_seed(self, name: str) -> bytes | None: ...
    async def forget(self, name: str) -> None: ...
    def where(self, name: str) -> str: ...


class LocalStore:
    """LocalSubscribers, plus the seed files."""

    def __init__(self, directory: Path) -> None:
        self.files = LocalSubscribers(directory)

    async def load(self) -> list[Subscriber]:
        return self.files.load()

    async def save(self, subscribers: list[Subscriber]) -> bool:
        self.files.save(subscribers)
        return True

    async def seed(self, name: str) -> bytes:
        """The subscriber's seed (kept when it has one: `add` again only changes its types)."""
        if (kept := await self.kept_seed(name)) is not None:
            return kept
        path = self.files.seed_file(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_bytes(new_user_seed() + b"\n")
        return path.read_bytes().strip()

    async def kept_seed(self, name: str) -> bytes | None:
        path = self.files.seed_file(name)
        return path.read_bytes().strip() if path.exists() else None

    async def forget(self, name: str) -> None:
        self.files.seed_file(name).unlink(missing_ok=True)

    def where(self, name: str) -> str:
        return str(self.files.seed_file(name))


def local_bus_folder(args: argparse.Namespace) -> Path:
    """--dir, when it is there: a folder `bus credentials` wrote. Else CommandFailed before
    anything is written: run elsewhere than the checkout `make dev` runs in, the default names
    nothing."""
    folder = Path(args.dir)
    if folder.is_dir():
        return folder
    given = "from --dir" if args.dir != LOCAL_DIR else f"the default --dir, under {Path.cwd()}"
    raise CommandFailed(
        f"no local bus credentials in {args.dir} ({given})",
        "run it in the checkout where `make dev` runs, pass --dir DIR (the folder "
        "`hostaffinity bus credentials` wrote), or --namespace NAMESPACE for the bus in "
        "Kubernetes",
    )


@contextlib.asynccontextmanager
async def _store(args: argparse.Namespace) -> AsyncIterator[SubscriberStore]:
    if args.namespace is None:
        yield LocalStore(local_bus_folder(args))
        return
    settings = kubernetes_settings(args.kubeconfig, args.context)
    rights = f"read and write Secrets in namespace {args.namespace}"
    async with open_api(settings, rights=rights) as client:
        yield KubernetesSubscribers(client, args.namespace)


def reload_servers(pid_files: Sequence[Path]) -> None:
    """SIGHUP each server: nats-server reloads its config files, clients stay connected."""
    for pid_file in pid_files:
        try:
            pid = int(pid_file.read_text(encoding="utf-8").strip())
        except (OSError, ValueError) as error:
            raise RuntimeError(
                f"cannot read the nats-server pid from {pid_file}: {error}"
            ) from None
        try:
            os.kill(pid, signal.SIGHUP)
        except ProcessLookupError:
            raise RuntimeError(
                f"no nats-server runs with pid {pid} (from {pid_file}): start it (`make dev`), "
                "or pass --pid-file of the one that runs"
            ) from None


def _pid_files(args: argparse.Namespace) -> list[Path]:
    """Locally, the nats-server pid files to signal: --pid-file, else <dir>/nats.pid if there."""
    default = Path(args.dir) / PID_FILE
    return [Path(p) for p in args.pid_file or ()] or ([default] if default.exists() else [])


def _servers_told(args: argparse.Namespace) -> bool:
    """Have the servers reload (or say who does); False when nobody will without the user."""
    if args.namespace is not None:
        print(
            "the NATS pods' reloader signals each server once the kubelet has updated "
            "subscribers.conf (about a minute)"
        )
        return True
    if pid_files := _pid_files(args):
        reload_servers(pid_files)
        print(f"reloaded: {', '.join(str(path) for path in pid_files)}")
        return True
    conf = Path(args.dir) / SUBSCRIBERS_CONF
    print(f"no nats-server pid file given: reload each server that includes {conf} (SIGHUP)")
    return False


def _servers(args: argparse.Namespace) -> list[str]:
    return list(args.nats or [LOCAL_NATS])


@contextlib.asynccontextmanager
async def _provisioning(args: argparse.Namespace, *, provisioned: bool) -> AsyncIterator[Bus]:
    """A connection as `provision`: its seed from --nats-seed, or locally <dir>/provision.nk;
    with `provisioned`, the bus's streams and buckets checked to be there."""
    settings = NatsSettings(
        servers=_servers(args),
        identity="provision",
        nkey_seed_file=args.nats_seed or str(Path(args.dir) / "provision.nk"),
        tls_ca_file=args.nats_ca_file,
    )
    async with open_bus(
        settings,
        args.connect_timeout,
        "hostaffinity-bus-subscriber",
        provisioned=provisioned,
        fix=fix_nats("provision"),
    ) as bus:
        yield bus


async def create_consumer(bus: Bus, config: ConsumerConfig, wait_seconds: float) -> None:
    """Create or update the subscriber's consumer, retrying while the servers still run the
    config from before (the request is refused, so it goes unanswered)."""
    try:
        async with asyncio.timeout(wait_seconds):
            while True:
                try:
                    await bus.js.add_consumer(EVENTS_STREAM, config, timeout=_ATTEMPT_SECONDS)
                    return
                except nats.errors.TimeoutError:
                    await asyncio.sleep(0.2)
    except TimeoutError:
        raise RuntimeError(
            f"the bus did not let provisioning create consumer {config.durable_name} within "
            f"{wait_seconds:g} s: have the servers reloaded {SUBSCRIBERS_CONF}?"
        ) from None


def _reload_seconds(args: argparse.Namespace) -> float:
    if args.reload_timeout is not None:
        return float(args.reload_timeout)
    return LOCAL_RELOAD_SECONDS if args.namespace is None else KUBERNETES_RELOAD_SECONDS


def _reachable(args: argparse.Namespace) -> bool:
    """Locally the bus has a default address; in Kubernetes it must be given (a port-forward)."""
    return args.namespace is None or bool(args.nats)


def _goes_on_to_the_bus(args: argparse.Namespace) -> bool:
    """Whether `add` makes the consumer in this run: not without a local server to signal
    (compose: `docker compose kill -s HUP nats`), nor in Kubernetes without --nats; those runs
    only write, and the next makes it."""
    return (args.namespace is not None or bool(_pid_files(args))) and _reachable(args)


async def add_subscriber(args: argparse.Namespace) -> int:
    name = checked_name(args.name)
    events = checked_event_types(args.events)
    if args.namespace is None:
        local_bus_folder(args)
    if _goes_on_to_the_bus(args):
        # Out of reach or not provisioned: said before anything is written.
        async with _provisioning(args, provisioned=True):
            pass
    async with _store(args) as store:
        seed_value = await store.seed(name)
        subscriber = Subscriber(name, events, public_key(seed_value))
        registered = [s for s in await store.load() if s.name != name]
        await store.save([*registered, subscriber])
        seed = store.where(name)
    if not _servers_told(args) or not _reachable(args):
        print(f"then run this command again (with --nats): it creates the consumer {name}")
        return 0
    # First every server on the new table: a connection made while a server reloads can keep
    # the permissions from before for its whole life (subscriber_admission.py).
    await wait_until_every_server(
        _servers(args), name, seed_value, args.nats_ca_file,
        admitted=True, wait_seconds=_reload_seconds(args),
    )  # fmt: skip
    async with _provisioning(args, provisioned=True) as bus:
        config = consumer_config(subscriber, args.ack_wait)
        await create_consumer(bus, config, _reload_seconds(args))
    print(f"subscriber {name}: {', '.join(events)}")
    print(f"consumer: {EVENTS_STREAM}/{name} (durable, pull, explicit ack)")
    print(f"inbox prefix: _INBOX_{name}")
    print(f"seed: {seed}")
    return 0


async def remove_subscriber(args: argparse.Namespace) -> int:
    if not _reachable(args):
        raise ValueError("give --nats (and --nats-seed): the subscriber's consumer goes first")
    async with _store(args) as store:
        registered = await store.load()
        if args.name not in {s.name for s in registered}:
            raise ValueError(
                f"no subscriber {args.name!r} is registered ({REGISTRY_FILE}); "
                "`hostaffinity bus subscriber list` lists the ones that are"
            )
        # Still allowed: the servers know it yet. A bus partly set up keeps what it has.
        async with _provisioning(args, provisioned=False) as bus:
            with contextlib.suppress(NotFoundError):  # already gone: nothing to take away
                await bus.js.delete_consumer(EVENTS_STREAM, args.name)
        await store.save([s for s in registered if s.name != args.name])
        told = _servers_told(args)
        seed = await store.kept_seed(args.name)
        if told and args.namespace is None and seed is not None:
            # In Kubernetes the kubelet's sync comes about a minute later: not waited for.
            await wait_until_every_server(
                _servers(args), args.name, seed, args.nats_ca_file,
                admitted=False, wait_seconds=_reload_seconds(args),
            )  # fmt: skip
        await store.forget(args.name)
    print(f"subscriber {args.name} removed: its consumer, its seed and its permissions")
    return 0


async def list_subscribers(args: argparse.Namespace) -> int:
    async with _store(args) as store:
        registered = await store.load()
        for subscriber in registered:
            print(
                f"{subscriber.name}\t{','.join(subscriber.events)}\t{store.where(subscriber.name)}"
            )
    if not registered:
        print("no subscribers registered", file=sys.stderr)
    return 0


def add_subscriber_commands(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    subscriber = verbs.add_parser(
        "subscriber", help="identities of outside subscribers of the events stream"
    )
    actions = subscriber.add_subparsers(dest="subscriber_command", required=True)
    adding = actions.add_parser("add", help="add (or change the types of) a subscriber")
    adding.add_argument("name", help="the subscriber's identity and durable consumer name")
    adding.add_argument("--events", required=True, help="TYPE[,TYPE...], e.g. pod.evicted,vm.moved")
    adding.add_argument(
        "--ack-wait",
        type=float,
        default=ACK_WAIT_SECONDS,
        help="seconds an event may stay unacked before it comes again "
        f"(default {ACK_WAIT_SECONDS:g})",
    )
    adding.set_defaults(run=add_subscriber)
    removing = actions.add_parser("remove", help="remove a subscriber and its consumer")
    removing.add_argument("name")
    removing.set_defaults(run=remove_subscriber)
    listing = actions.add_parser("list", help="the registered subscribers")
    listing.set_defaults(run=list_subscribers)
    for parser in (adding, removing, listing):
        parser.add_argument(
            "--dir",
            default=LOCAL_DIR,
            help=f"the local bus credentials folder (default {LOCAL_DIR})",
        )
        parser.add_argument("--namespace", help="in Kubernetes: the namespace of the bus")
        parser.add_argument("--kubeconfig", help="default: in-cluster or ~/.kube/config")
        parser.add_argument("--context", help="kubeconfig context")
    for parser in (adding, removing):
        parser.add_argument(
            "--pid-file",
            action="append",
            help="locally: a nats-server pid file to signal; repeatable (default <dir>/nats.pid)",
        )
        parser.add_argument(
            "--nats", action="append", help=f"NATS server URL; repeatable (default {LOCAL_NATS})"
        )
        parser.add_argument(
            "--nats-seed", help="provisioning's nkey seed file (default <dir>/provision.nk)"
        )
        parser.add_argument("--nats-ca-file", help="the CA of the servers' certificate")
        parser.add_argument(
            "--connect-timeout",
            type=float,
            default=BUS_WITHIN_SECONDS,
            help=f"seconds to wait for NATS (default {BUS_WITHIN_SECONDS:g})",
        )
        parser.add_argument(
            "--reload-timeout",
            type=float,
            help=f"seconds the servers get to reload (default {LOCAL_RELOAD_SECONDS:g}, "
            f"in Kubernetes {KUBERNETES_RELOAD_SECONDS:g})",
        )
