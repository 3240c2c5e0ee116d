"""Typed configuration: YAML files overlaid by `HOSTAFFINITY_*` environment variables.

A key nobody declared is an error, in a file or in the environment, because a typo in a setting
that silently does nothing is worse than a service that refuses to start.
"""

import itertools
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args, get_origin

import msgspec
import yaml

from hostaffinity.affinity.interpod import PhysicalAntiAffinity

ENV_PREFIX = "HOSTAFFINITY_"
ENV_NESTING = "__"


class ConfigError(ValueError):
    """The configuration cannot be loaded; the message says which key and why."""


# Ranges the config records enforce: a value outside is an error naming the key and where it came
# from (`load_config`); docs/configuration.md shows them beside the type.
Seconds = Annotated[float, msgspec.Meta(gt=0)]  # a duration or period: more than 0
Delay = Annotated[float, msgspec.Meta(ge=0)]  # a wait that may be none
Count = Annotated[int, msgspec.Meta(ge=1)]  # workers, queue sizes, attempts
Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]  # 0 takes any free port (tests do)
Ratio = Annotated[float, msgspec.Meta(ge=0, le=1)]
ByteLimit = Annotated[int, msgspec.Meta(ge=-1)]  # -1: unlimited, JetStream's convention
Replicas = Annotated[int, msgspec.Meta(ge=1, le=5)]  # JetStream keeps at most 5 copies
# client-go's leaderelection.JitterFactor: a renewal attempt may come this much late.
LEASE_JITTER = 1.2


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every config record: immutable, and strict about unknown keys."""

    # Top-level keys of an older layout → where their settings live now. A config that still
    # has one is refused with one error saying how to rewrite it (`load_config`), rather than
    # one "unknown field" per key.
    MOVED_KEYS: ClassVar[Mapping[str, str]] = {}


class ClusterSettings(Settings, frozen=True):
    """Which Kubernetes cluster this install serves, among the many that may share a vCenter."""

    # The install's identity: it names every DRS rule and group this install creates, and is
    # carried by its events and ownership records. Empty: the multi-cluster API's `id.k8s.io`
    # ClusterProperty where the cluster has one, else the `kube-system` Namespace's UID.
    # Set it before the first start and never change it: a new name orphans the old rules.
    name: str = ""


class SharedSettings(Settings, frozen=True):
    """Settings every service must agree on; all services read them from one ConfigMap."""

    cluster: ClusterSettings = ClusterSettings()
    # Also write the archived VMware plugin's label, so manifests written for it keep working.
    legacy_host_label: bool = True
    # "opt-in": a pod annotation turns kubernetes.io/hostname anti-affinity into ESXi-host
    # anti-affinity; "cluster-wide": every pod is read that way; "disabled": never. (Not "off":
    # YAML reads a bare off as a boolean.) Every service reads a pod by the same rule: with
    # "disabled" the annotation is ignored by the scheduler extender, the descheduler and the
    # drs-translator too, not only the webhook.
    physical_anti_affinity: PhysicalAntiAffinity = "opt-in"
    # A node whose placement is unknown fails host-level required terms ("fail") or passes them.
    unknown_placement: Literal["fail", "pass"] = "fail"

    # A named answer, so that no service compares the setting strings itself.
    @property
    def fails_unplaced(self) -> bool:
        """A node with no known ESXi host fails host-level required terms."""
        return self.unknown_placement == "fail"


def fleet_inbox(identity: str, install: str) -> str:
    """The inbox prefix of `identity` on the bus of the fleet install whose token is `install`
    (inside `_INBOX_<identity>.>`, which auth.conf lets it read)."""
    return f"_INBOX_{identity}.{install}"


class NatsSettings(Settings, frozen=True):
    """How to reach NATS, and as whom. Production uses a cluster with one identity per service
    (an nkey seed file, from a Secret) and TLS; see k8s/base/nats/auth.conf."""

    servers: list[str] = msgspec.field(default_factory=lambda: ["nats://127.0.0.1:4222"])
    # The identity's name (node-labeller, descheduler, cli, ...): it names the inbox prefix
    # `_INBOX_<identity>`, the only subjects auth.conf lets it receive replies on. The server
    # knows the identity by the public key of `nkey_seed_file`.
    identity: str | None = None
    # The identity's credentials: a .creds file (JWT and seed), or its nkey seed file.
    creds_file: str | None = None
    nkey_seed_file: str | None = None
    # TLS is on when either a CA or a client certificate is set; the certificate and key are
    # for servers that verify clients.
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    # The first connection is retried with exponential backoff between these bounds (a service
    # may start before NATS does); readiness stays false until it succeeds.
    connect_retry_initial_seconds: Seconds = 0.5
    connect_retry_max_seconds: Seconds = 10.0
    # JetStream layout (created or updated by `hostaffinity bus provision`; services only check
    # it). Replicas: 3 on a production cluster of three or more servers, 1 on a single server.
    stream_replicas: Replicas = 1
    kv_replicas: Replicas = 1
    # Publishes of the same event id within this window are stored once.
    duplicate_window_seconds: Seconds = 120.0
    # Stream limits: a max age of 0 or max bytes of -1 is unlimited (JetStream's conventions).
    # The oldest messages go first.
    events_max_age_seconds: Delay = 7 * 24 * 3600
    events_max_bytes: ByteLimit = -1
    dlq_max_age_seconds: Delay = 30 * 24 * 3600
    dlq_max_bytes: ByteLimit = -1
    # This install's token in a fleet, as `hostaffinity fleet join` printed it (empty: not in a
    # fleet). Set, `hostaffinity bus provision` mirrors the fleet hub's view into this bus.
    fleet_install: str = ""

    @property
    def inbox_prefix(self) -> str:
        """Where replies to this identity arrive; auth.conf lets only it subscribe there. In a
        fleet, under the install's token too: the hub sends an install's leaf link the
        answers to its own requests only (cli fleet_access.py)."""
        if self.identity is None:
            return "_INBOX"
        if self.fleet_install:
            return fleet_inbox(self.identity, self.fleet_install)
        return f"_INBOX_{self.identity}"

    def missing_files(self) -> list[str]:
        """The configured files (identity, CA) that do not exist, as `setting (path)`: a
        Secret not mounted shows up here, not as a refused connection."""
        named = {
            "nats.creds_file": self.creds_file,
            "nats.nkey_seed_file": self.nkey_seed_file,
            "nats.tls_ca_file": self.tls_ca_file,
            "nats.tls_cert_file": self.tls_cert_file,
            "nats.tls_key_file": self.tls_key_file,
        }
        return [
            f"{name} ({path})"
            for name, path in named.items()
            if path is not None and not Path(path).is_file()
        ]


class HealthSettings(Settings, frozen=True):
    """Where /healthz, /readyz and /metrics are served."""

    host: str = "0.0.0.0"
    port: Port = 8080


class KubernetesSettings(Settings, frozen=True):
    """Kubernetes API access: in-cluster when no kubeconfig is given and one is available."""

    kubeconfig: str | None = None
    context: str | None = None
    # Replaces the kubeconfig's server address, e.g. https://k3s:6443 in compose, where the
    # kubeconfig k3s writes names 127.0.0.1.
    server: str | None = None
    # Where the service keeps the objects of its own (e.g. the webhook's certificate Secret).
    namespace: str = "hostaffinity"
    # Every call but a watch ends after this long. client-go sets no overall limit of its own and
    # relies on the API server's (--request-timeout, 60 s); we apply the same bound client-side so
    # a hung connection cannot hold a caller for ever.
    request_timeout_seconds: Seconds = 60.0
    # TCP connect (and TLS handshake) limit, as client-go's dialer (30 s).
    connect_timeout_seconds: Seconds = 30.0
    # A watch asks the server to end it after this long (`timeoutSeconds`; client-go's reflector
    # uses 5 to 10 minutes) and gives up reading when no byte arrived for that long plus the
    # margin, so a half-open connection is noticed.
    watch_timeout_seconds: Count = 300
    watch_read_margin_seconds: Delay = 30.0


class LoggingSettings(Settings, frozen=True):
    """Log lines as text for people or as JSON lines for a log pipeline."""

    format: Literal["text", "json"] = "text"
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class LeaseSettings(Settings, frozen=True):
    """The Lease that keeps exactly one replica of a service active (client-go's defaults).

    The leader steps down when no renewal succeeded for `renew_deadline_seconds`; a rival takes
    the Lease over only after `duration_seconds` without a renewal, so the gap between the two is
    the time the old leader's work has to stop.
    """

    # The Lease's name (empty: `hostaffinity-<service>`) and namespace.
    name: str = ""
    namespace: str = "hostaffinity"
    # A leader steps down after renew_deadline_seconds without a renewal, a rival takes over
    # after duration_seconds without one; each tries every retry_period_seconds.
    duration_seconds: Seconds = 15.0
    renew_deadline_seconds: Seconds = 10.0
    retry_period_seconds: Seconds = 2.0

    def __post_init__(self) -> None:
        """client-go's own rule (leaderelection.go NewLeaderElector): a Lease that lapses
        before its holder gives up, or a deadline shorter than one late retry, lets two
        replicas work at once."""
        if self.duration_seconds <= self.renew_deadline_seconds:
            raise ValueError("lease.duration_seconds must be greater than renew_deadline_seconds")
        if self.renew_deadline_seconds <= LEASE_JITTER * self.retry_period_seconds:
            raise ValueError(
                f"lease.renew_deadline_seconds must be greater than {LEASE_JITTER} x "
                "retry_period_seconds"
            )


class ServiceSettings(Settings, frozen=True):
    """The sections every service's config record has; a service subclasses it with its own."""

    shared: SharedSettings = SharedSettings()
    nats: NatsSettings = NatsSettings()
    health: HealthSettings = HealthSettings()
    kubernetes: KubernetesSettings = KubernetesSettings()
    logging: LoggingSettings = LoggingSettings()
    # On SIGTERM the work is cancelled and given this long to finish what it is doing (requests
    # in flight, a label patch, an eviction reported) and publish the events it holds (the
    # descheduler's and drs-translator's outboxes get half of it); keep it below the pod's
    # terminationGracePeriodSeconds.
    drain_seconds: Delay = 20.0


class LeaderElectedSettings(ServiceSettings, frozen=True):
    """A service of which only the Lease holder works."""

    lease: LeaseSettings = LeaseSettings()


def moved_into(section: str, record: type[Settings]) -> dict[str, str]:
    """MOVED_KEYS entries for top-level fields that now live in `section:`."""
    return {
        field.name: f"now `{section}.{field.name}` (HOSTAFFINITY_{section.upper()}__"
        f"{field.name.upper()})"
        for field in msgspec.structs.fields(record)
    }


S = TypeVar("S", bound=Settings)


def load_config(
    record: type[S],
    paths: Sequence[str | Path] = (),
    environ: Mapping[str, str] | None = None,
) -> S:
    """Build `record` from YAML files (later files override earlier ones), then the environment.

    `HOSTAFFINITY_NATS__SERVERS='["nats://a:4222"]'` sets `nats.servers`, and a number between
    `__`s is a list index (`HOSTAFFINITY_VCENTERS__0__PASSWORD`). A value for a text
    field is taken as it is; any other value is read as JSON (numbers, booleans, lists), so `off`
    or `no` never turn into booleans by surprise. An error names where the bad value came from:
    the environment variable, or the file and key.
    """
    data: dict[str, Any] = {}
    origins: dict[tuple[str, ...], str] = {}
    for path in paths:
        loaded = _read_yaml(Path(path))
        _deep_merge(data, loaded)
        for leaf in _leaves(loaded):
            origins[leaf] = f"config file {path}, key {_dotted(leaf)}"
    env = os.environ if environ is None else environ
    for name, raw in sorted(env.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        keys = [part.lower() for part in name[len(ENV_PREFIX) :].split(ENV_NESTING)]
        _set_path(data, keys, _parse_env_value(record, keys, raw), origin=name)
        origins[tuple(keys)] = f"environment variable {name}"
    _refuse_moved_keys(record, data, origins)
    try:
        return msgspec.convert(data, record, strict=False)
    except msgspec.ValidationError as error:
        raise ConfigError(
            f"invalid configuration for {record.__name__}: {error}{_source(str(error), origins)}"
        ) from error


def _refuse_moved_keys(
    record: type[Settings], data: Mapping[str, Any], origins: Mapping[tuple[str, ...], str]
) -> None:
    """One error naming every key of an older layout that is set, where, and its new place."""
    moved = [key for key in record.MOVED_KEYS if key in data]
    if not moved:
        return
    lines = [
        f"`{key}` (from {'; '.join(_origins_under(origins, (key,)))}): {record.MOVED_KEYS[key]}"
        for key in moved
    ]
    raise ConfigError(
        f"invalid configuration for {record.__name__}: it has keys of the older layout; "
        f"rewrite them (docs/upgrade.md): {'. '.join(lines)}"
    )


def _origins_under(origins: Mapping[tuple[str, ...], str], keys: tuple[str, ...]) -> list[str]:
    """Where every value set at or under `keys` came from."""
    return sorted({where for path, where in origins.items() if path[: len(keys)] == keys})


# msgspec's `... - at `$.a.b[0]`` suffix, and the field an unknown or missing field error names.
_AT = re.compile(r" - at `\$((?:\.\w+|\[\d+\])*)`$")
_FIELD = re.compile(r"^Object (?:contains unknown|missing required) field `(\w+)`")


def _source(message: str, origins: Mapping[tuple[str, ...], str]) -> str:
    """` (from <where>)` for the value a validation message is about, or ` (set it ...)` for a
    missing required field; empty when the message names no place."""
    at = _AT.search(message)
    steps = re.findall(r"\.(\w+)|\[(\d+)\]", at.group(1)) if at else []
    keys = tuple(name or index for name, index in steps)
    field = _FIELD.match(message)
    if field:
        keys += (field.group(1),)
    if message.startswith("Object missing required field"):
        variable = ENV_PREFIX + ENV_NESTING.join(keys).upper()
        return f" (set {_dotted(keys)} in a config file or {variable})"
    # The value itself, or the section that holds it, was set somewhere; else (an unknown
    # section) every value set under it.
    for length in range(len(keys), 0, -1):
        if keys[:length] in origins:
            return f" (from {origins[keys[:length]]})"
    inside = _origins_under(origins, keys)
    return f" (from {'; '.join(inside)})" if inside and keys else ""


def _leaves(tree: Mapping[str, Any], above: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The key path of every value in a YAML mapping that is not itself a mapping; an item of
    a list of mappings (`vcenters`) counts by its index."""
    found: list[tuple[str, ...]] = []
    for key, value in tree.items():
        path = (*above, str(key))
        if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            for index, item in enumerate(value):
                found += _leaves(item, (*path, str(index))) if item else [(*path, str(index))]
        else:
            found += _leaves(value, path) if isinstance(value, Mapping) and value else [path]
    return found


def _dotted(keys: Sequence[str]) -> str:
    """A key path as a reader writes it: `vcenters[0].thumbprint`."""
    return "".join(f"[{key}]" if key.isdigit() else f".{key}" for key in keys).lstrip(".")


# Where a list item's index goes in `env_names` (`HOSTAFFINITY_VCENTERS__<N>__HOST`).
ANY_INDEX = "<N>"


def env_names(record: type[Settings]) -> set[str]:
    """Every leaf setting's environment variable name for `record` (for docs and tests); an
    item of a list of sections has `ANY_INDEX` for its index (`generic_env_name`)."""
    names: set[str] = set()
    for field in msgspec.structs.fields(record):
        name = ENV_PREFIX + field.name.upper()
        section = section_type(field.type)
        if section is None:
            names.add(name)
            continue
        inner_record, is_list = section
        if is_list:
            name += ENV_NESTING + ANY_INDEX
        names.update(
            name + ENV_NESTING + inner[len(ENV_PREFIX) :] for inner in env_names(inner_record)
        )
    return names


def generic_env_name(name: str) -> str:
    """`name` as `env_names` spells it: list indices replaced by `ANY_INDEX`."""
    parts = name.split(ENV_NESTING)
    return ENV_NESTING.join(ANY_INDEX if part.isdigit() else part for part in parts)


def _parse_env_value(record: type[Settings], keys: list[str], raw: str) -> Any:
    if _is_text_field(record, keys):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _is_text_field(record: type[Settings], keys: list[str]) -> bool:
    """True when the field `keys` names in `record` holds a string (or an optional one)."""
    fields = {field.name: field.type for field in msgspec.structs.fields(record)}
    kind = fields.get(keys[0])
    if kind is None:
        return False
    if len(keys) > 1:
        section = section_type(kind)
        inner = keys[2:] if section is not None and section[1] and keys[1].isdigit() else keys[1:]
        return section is not None and bool(inner) and _is_text_field(section[0], inner)
    return kind is str or kind == (str | None) or get_origin(kind) is Literal


def section_type(kind: Any) -> tuple[type[Settings], bool] | None:
    """The record a field's type holds and whether as a list of them (`vcenters`); None for
    a plain value."""
    if get_origin(kind) is Annotated:
        kind = get_args(kind)[0]
    if get_origin(kind) is list:
        (item,) = get_args(kind)
        return (item, True) if isinstance(item, type) and issubclass(item, Settings) else None
    return (kind, False) if isinstance(kind, type) and issubclass(kind, Settings) else None


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"cannot read config file {path}: {error}") from error
    except yaml.YAMLError as error:
        raise ConfigError(f"config file {path} is not valid YAML: {error}") from error
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {path} must hold a mapping, not {type(loaded).__name__}")
    return loaded


def _deep_merge(into: dict[str, Any], update: Mapping[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        else:
            into[key] = value


def _set_path(data: dict[str, Any], keys: list[str], value: Any, *, origin: str) -> None:
    """Set `value` at `keys`; a number names an item of a list (missing items are added)."""
    node: dict[str, Any] | list[Any] = data
    for key, following in itertools.pairwise(keys):
        section: Callable[[], Any] = list if following.isdigit() else dict
        child = _slot(node, key, origin, get=section)
        if not isinstance(child, dict | list):
            raise ConfigError(f"{origin}: {key} is not a section")
        node = child
    _slot(node, keys[-1], origin, get=lambda: value, replace=True)


def _slot(
    node: dict[str, Any] | list[Any],
    key: str,
    origin: str,
    *,
    get: Callable[[], Any],
    replace: bool = False,
) -> Any:
    """`node[key]`, made by `get` when absent (always, with `replace`)."""
    if isinstance(node, dict):
        if replace or key not in node:
            node[key] = get()
        return node[key]
    if not key.isdigit():
        raise ConfigError(f"{origin}: {key} is not a list index")
    index = int(key)
    node.extend({} for _ in range(index + 1 - len(node)))  # a list item is a section
    if replace:
        node[index] = get()
    return node[index]
