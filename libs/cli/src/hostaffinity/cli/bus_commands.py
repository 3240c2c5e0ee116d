"""`hostaffinity bus …`: set up the bus the services run on.

- `provision`: create or update the streams, buckets and durable consumers (identity
  `provision`); the services' identities may not, they wait until this ran.
- `credentials --dir D`: local nkeys, one seed file per identity, and the server's env file.
- `secrets --namespace N`: the same in Kubernetes, as Secrets, plus the servers' TLS and the
  outside subscribers' Secret (a Job runs it before NATS starts); existing Secrets are kept,
  the subscribers' file is rendered again by this release.
- `auth-config`: print the nats-server authorization block (k8s/base/nats/auth.conf).
- `subscriber add|remove|list`: outside subscribers' identities (subscriber_commands.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.cli.bus_access import OUR_STREAMS, render_auth_config
from hostaffinity.cli.bus_credentials import (
    IDENTITIES_SECRET,
    SEED_SUFFIX,
    SERVER_ENV_FILE,
    encoded,
    identities_secret,
    new_identities,
    tls_secret,
    write_local_credentials,
)
from hostaffinity.cli.connections import (
    BUS_WITHIN_SECONDS,
    CommandFailed,
    kubernetes_settings,
    open_api,
    open_bus,
)
from hostaffinity.cli.kubernetes_subscribers import (
    SUBSCRIBERS_SECRET,
    KubernetesSubscribers,
    subscribers_secret,
)
from hostaffinity.cli.subscriber_commands import add_subscriber_commands
from hostaffinity.runtime.bus.fleet_layout import FLEET_STREAM
from hostaffinity.runtime.bus.layout import BusLayout
from hostaffinity.runtime.kube.client import KubeClient, ResourceRef
from hostaffinity.runtime.process.config import (
    ConfigError,
    NatsSettings,
    Settings,
    SharedSettings,
    load_config,
)

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409


class ProvisionConfig(Settings, frozen=True):
    """The sections `bus provision` reads (the services' shared.yaml has both)."""

    shared: SharedSettings = SharedSettings()
    nats: NatsSettings = NatsSettings()


async def provision(args: argparse.Namespace) -> int:
    try:
        config = load_config(ProvisionConfig, args.config)
    except ConfigError as error:
        raise CommandFailed(
            str(error), "check --config FILE (YAML with a `nats` section)"
        ) from None
    settings = config.nats
    async with open_bus(
        settings,
        args.connect_timeout,
        "hostaffinity-bus-provision",
        provisioned=False,
        fix="start NATS or set nats.servers in --config FILE (or HOSTAFFINITY_NATS__SERVERS), "
        "with nats.nkey_seed_file for the provision identity",
    ) as bus:
        layout = BusLayout.of(settings)
        await bus.provision(layout)
        for stream in OUR_STREAMS:  # listing all streams is not provisioning's to do
            if stream == FLEET_STREAM and not layout.fleet_install:
                continue  # not in a fleet: no mirror of its view
            info = await bus.js.stream_info(stream)
            rollups = ", roll-ups refused" if not info.config.allow_rollup_hdrs else ""
            print(
                f"stream {stream}: replicas {info.config.num_replicas}, "
                f"{info.state.messages} messages, at most {info.config.max_consumers} "
                f"consumers{rollups}"
            )
        print(f"provisioned: streams R{layout.stream_replicas}, buckets R{layout.kv_replicas}")
        if layout.fleet_install:
            print(f"fleet: mirroring the hub's view as install {layout.fleet_install}")
    return 0


async def local_credentials(args: argparse.Namespace) -> int:
    try:
        files = write_local_credentials(Path(args.dir), owner=args.owner)
    except OSError as error:
        raise CommandFailed(
            f"cannot write the bus credentials into {args.dir} ({error.strerror or error})",
            "pass --dir a folder this user may write (it is made when missing)",
        ) from None
    for name, path in files.items():
        print(f"{name}: {path}")
    print(f"server environment: {Path(args.dir) / SERVER_ENV_FILE}")
    return 0


async def kubernetes_secrets(args: argparse.Namespace) -> int:
    secrets_in = ResourceRef("", "v1", "secrets", args.namespace)
    settings = kubernetes_settings(args.kubeconfig, args.context, args.server)
    rights = f"read, create and patch Secrets in namespace {args.namespace}"
    async with open_api(settings, rights=rights) as kube:
        for secret in (
            identities_secret(args.namespace),
            tls_secret(args.namespace),
            subscribers_secret(args.namespace, []),
        ):
            outcome = await _create_unless_present(kube, secrets_in, secret)
            print(f"secret {args.namespace}/{secret['metadata']['name']}: {outcome}")
        added = await _add_new_identities(kube, secrets_in)
        if added:
            print(f"secret {args.namespace}/{IDENTITIES_SECRET}: added {', '.join(added)}")
        # subscribers.conf repeats the table: this release's, from the kept registry.
        subscribers = KubernetesSubscribers(kube, args.namespace)
        if await subscribers.save(await subscribers.load()):
            print(f"secret {args.namespace}/{SUBSCRIBERS_SECRET}: rendered again")
    return 0


async def _create_unless_present(
    kube: KubeClient, secrets_in: ResourceRef, secret: dict[str, Any]
) -> str:
    try:
        await kube.request("GET", secrets_in.path(secret["metadata"]["name"]))
        return "kept"
    except ApiException as error:
        if error.status != HTTP_NOT_FOUND:
            raise
    try:
        await kube.request("POST", secrets_in.path(), body=secret)
    except ApiException as error:
        if error.status == HTTP_CONFLICT:  # another run made it first
            return "kept"
        raise
    return "created"


async def _add_new_identities(kube: KubeClient, secrets_in: ResourceRef) -> list[str]:
    """Seeds for identities the existing Secret lacks (a release added one, as the admission
    webhook's): a merge patch adds only those keys and never touches a seed in use."""
    stored = json.loads(await kube.request("GET", secrets_in.path(IDENTITIES_SECRET)))
    values = new_identities(set(stored.get("data") or {}))
    if values:
        await kube.request(
            "PATCH",
            secrets_in.path(IDENTITIES_SECRET),
            body={"data": encoded(values)},
            content_type="application/merge-patch+json",
        )
    return sorted(key.removesuffix(SEED_SUFFIX) for key in values if key.endswith(SEED_SUFFIX))


async def auth_config(args: argparse.Namespace) -> int:
    sys.stdout.write(render_auth_config())
    return 0


def add_bus_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bus = commands.add_parser("bus", help="set up the NATS bus: provision, credentials, secrets")
    verbs = bus.add_subparsers(dest="bus_command", required=True)
    provisioning = verbs.add_parser(
        "provision", help="create or update the streams, buckets and consumers"
    )
    provisioning.add_argument(
        "--config", action="append", default=[], help="YAML with a `nats` section; repeatable"
    )
    provisioning.add_argument(
        "--connect-timeout",
        type=float,
        default=BUS_WITHIN_SECONDS,
        help=f"seconds to wait for NATS (default {BUS_WITHIN_SECONDS:g}; the install's Job "
        "waits 300)",
    )
    provisioning.set_defaults(run=provision)
    credentials = verbs.add_parser(
        "credentials", help="write local nkeys (one seed file per identity) and the server's env"
    )
    credentials.add_argument("--dir", required=True, help="e.g. .cache/dev/nats")
    credentials.add_argument(
        "--owner", type=int, help="uid to hand the files to (run as root, e.g. in compose)"
    )
    credentials.set_defaults(run=local_credentials)
    secrets = verbs.add_parser(
        "secrets", help="create the NATS identity and TLS Secrets in Kubernetes, if absent"
    )
    secrets.add_argument("--namespace", default="hostaffinity")
    secrets.add_argument("--kubeconfig", help="default: in-cluster or ~/.kube/config")
    secrets.add_argument("--context", help="kubeconfig context")
    secrets.add_argument("--server", help="API server address replacing the kubeconfig's")
    secrets.set_defaults(run=kubernetes_secrets)
    rendering = verbs.add_parser("auth-config", help="print nats-server's authorization block")
    rendering.set_defaults(run=auth_config)
    add_subscriber_commands(verbs)
