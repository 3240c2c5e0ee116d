"""What every command reads through: the Kubernetes API and the bus, opened with time limits
sized for a person at a terminal, and every way that fails said in one line.

A service retries for ever and logs each try (it may start before its dependencies); a command
must instead say, within seconds, what is missing and how to fix it. So the kubeconfig is
checked before it is loaded (the loader's own errors name neither file nor remedy), the API
server gets `CONNECT_TIMEOUT_SECONDS` to accept a connection and `ANSWER_TIMEOUT_SECONDS` to
answer each request, NATS is tried quietly for `BUS_WITHIN_SECONDS`, and a failure inside
either context becomes `CommandFailed`, which `hostaffinity` prints as its one line on stderr
(exit 1). `one_line` words whatever escapes the contexts.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import aiohttp
import yaml
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import NotFoundError

from hostaffinity.runtime.bus.client import Bus, BusUnreachable, ConfigFileError
from hostaffinity.runtime.bus.layout import (
    DRS_STREAM,
    TOPOLOGY_STREAM,
    LayoutMissing,
    missing_parts,
)
from hostaffinity.runtime.kube.client import SERVICE_HOST_ENV, KubeClient, ResourceRef, api_client
from hostaffinity.runtime.process.config import KubernetesSettings, NatsSettings
from hostaffinity.schema import DLQ_STREAM, EVENTS_STREAM

CONNECT_TIMEOUT_SECONDS: Final = 3.0
ANSWER_TIMEOUT_SECONDS: Final = 5.0
BUS_WITHIN_SECONDS: Final = 3.0
BUS_RETRY_WAIT_SECONDS: Final = 1  # nats-py's wait between its attempts at one server
# Every stream and bucket a command may read; what is missing of them is named.
BUS_LAYOUT: Final = (EVENTS_STREAM, DLQ_STREAM, TOPOLOGY_STREAM, DRS_STREAM)

FIX_KUBECONFIG: Final = (
    "pass --kubeconfig FILE (or set KUBECONFIG) naming a cluster and a current-context"
)
FIX_API: Final = "check that the cluster runs and the kubeconfig's server (or --server) is right"
# What an API user that is refused must be allowed, for the commands that read the cluster.
READ_RIGHTS: Final = "read nodes, pods and leases"


def fix_nats(identity: str) -> str:
    """The remedy for a NATS out of reach, for a command that connects as `identity`."""
    return (
        f"start NATS or pass --nats URL (with --nats-seed for the {identity} identity, "
        "--nats-ca-file for TLS)"
    )


FIX_NATS: Final = fix_nats("cli")


class CommandFailed(RuntimeError):
    """One line for the person at the terminal: what is missing, and how to fix it."""

    def __init__(self, problem: str, fix: str = "") -> None:
        super().__init__(f"{problem}; {fix}" if fix else problem)
        self.problem = problem
        self.fix = fix


def kubeconfig_path(given: str | None) -> Path:
    """The file the loader would read: the option, else the first of KUBECONFIG, else
    ~/.kube/config (as kubectl chooses)."""
    if given:
        return Path(given)
    from_env = os.environ.get("KUBECONFIG", "")
    first = next((part for part in from_env.split(os.pathsep) if part), None)
    return Path(first) if first else Path.home() / ".kube" / "config"


def kubeconfig_problem(given: str | None, context: str | None) -> str | None:
    """Why the kubeconfig a command would load names no cluster to talk to, or None."""
    path = kubeconfig_path(given)
    if given:
        source = "from --kubeconfig"
    else:
        source = "from KUBECONFIG" if os.environ.get("KUBECONFIG") else "the default"
    where = f"{path} ({source})"
    if not path.is_file():
        return f"no kubeconfig: {where} does not exist"
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return f"the kubeconfig {path} cannot be read: {first_line}"
    if not isinstance(loaded, dict) or not loaded.get("contexts"):
        return f"the kubeconfig {path} names no cluster (no contexts)"
    chosen = context or loaded.get("current-context")
    if not chosen:
        return f"the kubeconfig {path} has no current-context"
    names = {entry.get("name") for entry in loaded["contexts"] if isinstance(entry, dict)}
    if chosen not in names:
        return f"the kubeconfig {path} has no context named {chosen!r}"
    return None


def kubernetes_settings(
    kubeconfig: str | None,
    context: str | None = None,
    server: str | None = None,
    answer_within: float = ANSWER_TIMEOUT_SECONDS,
) -> KubernetesSettings:
    """API access with a command's time limits: connecting apart from answering."""
    return KubernetesSettings(
        kubeconfig=kubeconfig,
        context=context,
        server=server,
        connect_timeout_seconds=min(CONNECT_TIMEOUT_SECONDS, answer_within),
        request_timeout_seconds=answer_within,
    )


def _in_cluster(settings: KubernetesSettings) -> bool:
    return settings.kubeconfig is None and bool(os.environ.get(SERVICE_HOST_ENV))


@asynccontextmanager
async def open_api(
    settings: KubernetesSettings, probe: ResourceRef | None = None, rights: str = READ_RIGHTS
) -> AsyncIterator[KubeClient]:
    """A client of the API server the kubeconfig names; any failure of its calls (refused,
    silent, forbidden) leaves as CommandFailed naming the server (a refusal: and the `rights`
    the command's user needs).

    With `probe`, one object of that resource is listed first, so a command that reads several
    sources hears of an unusable API before it prints the progress of another.
    """
    path = kubeconfig_path(settings.kubeconfig)
    problem = (
        None if _in_cluster(settings) else kubeconfig_problem(settings.kubeconfig, settings.context)
    )
    if problem:
        raise CommandFailed(problem, FIX_KUBECONFIG)
    try:
        api = await api_client(settings)
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as error:
        # The loader's failure types for a kubeconfig that parses but is not usable.
        raise CommandFailed(
            f"the kubeconfig {path} cannot be used ({error})", FIX_KUBECONFIG
        ) from None
    server = str(api.configuration.host)
    try:
        async with api:
            client = _CommandClient(api, settings)
            if probe is not None:
                await client.request("GET", probe.path(), query={"limit": "1"})
            yield client
    except ApiException as error:  # only the API answers with one
        raise CommandFailed(api_refusal(server, error, rights)) from None


class _CommandClient(KubeClient):
    """A KubeClient whose transport failures say so at once, naming the API server: the ones
    that reach the context are told apart from a vCenter's or NATS's, which are OSErrors too."""

    async def request(self, method: str, path: str, **options: Any) -> bytes:
        try:
            return await super().request(method, path, **options)
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise CommandFailed(
                unreachable_api(self.server, self.settings, error), FIX_API
            ) from None


def api_refusal(server: str, error: ApiException, rights: str = READ_RIGHTS) -> str:
    """An API answer other than 2xx, with the server's own message from its Status body."""
    said = _status_message(error.body)
    status = f"{error.status} {error.reason}".strip()
    if error.status in (401, 403):
        return (
            f"the API server at {server} refused this kubeconfig's user ({status}: {said}); "
            f"use a kubeconfig whose user may {rights}"
        )
    return f"the API server at {server} answered {status}" + (f": {said}" if said else "")


def _status_message(body: Any) -> str:
    try:
        decoded = json.loads(body) if body else {}
    except (ValueError, TypeError):
        return ""
    return str(decoded.get("message", "")) if isinstance(decoded, dict) else ""


def unreachable_api(server: str, settings: KubernetesSettings, error: BaseException) -> str:
    """A transport failure in words: refused, no connection in time, or no answer in time."""
    if isinstance(error, aiohttp.ConnectionTimeoutError):
        return (
            f"the API server at {server} did not complete a connection (TCP and TLS handshake) "
            f"within {settings.connect_timeout_seconds:g} s"
        )
    if isinstance(error, TimeoutError):
        return (
            f"the API server at {server} accepted the connection but did not answer within "
            f"{settings.request_timeout_seconds:g} s"
        )
    if isinstance(error, aiohttp.ClientConnectorError):
        cause = error.os_error
        said = os.strerror(cause.errno) if cause.errno else str(cause)  # "Connection refused"
        return f"the API server at {server} cannot be reached ({said})"
    return f"the API server at {server} broke off the connection ({error})"


@asynccontextmanager
async def open_bus(
    settings: NatsSettings,
    within: float = BUS_WITHIN_SECONDS,
    name: str = "hostaffinity-cli",
    *,
    provisioned: bool = True,
    fix: str = FIX_NATS,
) -> AsyncIterator[Bus]:
    """The bus, tried quietly for `within` seconds (out of reach: CommandFailed with `fix`),
    and (unless `provisioned` is False: the provisioning itself, the uninstall) checked for
    every stream and bucket a command reads, so a bus not provisioned yet is said at once and
    by name; one missing later says so too."""
    where = ", ".join(settings.servers)
    try:
        connected = await Bus.connect(
            settings,
            name=name,
            reconnect_wait_seconds=BUS_RETRY_WAIT_SECONDS,
            give_up_after_seconds=within,
            quiet=True,
        )
    except BusUnreachable as error:
        raise CommandFailed(str(error), fix) from None
    except ConfigFileError as error:
        raise CommandFailed(
            f"NATS at {where}: {error}",
            "check --nats-seed and --nats-ca-file (or the nats section)",
        ) from None
    try:
        if provisioned and (missing := await missing_parts(connected.js, BUS_LAYOUT)):
            raise CommandFailed(str(LayoutMissing.naming(missing)))
        yield connected
    except NotFoundError:
        missing = await _missing_layout(connected)
        raise CommandFailed(str(LayoutMissing.naming(missing))) from None
    except NatsTimeoutError:
        raise CommandFailed(
            f"NATS at {where} did not answer a JetStream request: is JetStream on, and may "
            "this identity read it (--nats-seed)?"
        ) from None
    finally:
        await connected.close()


async def _missing_layout(connected: Bus) -> list[str]:
    try:
        return await missing_parts(connected.js, BUS_LAYOUT) or ["a stream or bucket"]
    except NatsError:
        return ["a stream or bucket"]


def one_line(error: BaseException) -> str:
    """Any error a command ends on, in one line: the first of its message, else its type."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
