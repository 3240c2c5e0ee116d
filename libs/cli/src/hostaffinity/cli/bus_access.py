"""Who may do what on the bus: one NATS identity per service, a read-only one for this CLI and
one for provisioning, each allowed exactly the subjects and JetStream API calls it uses.

The table here is the single source; `hostaffinity bus auth-config` renders it as the
`authorization` block of nats-server (k8s/base/nats/auth.conf, which Kubernetes, compose,
`make dev` and the tests all load; a test keeps the file equal to the rendering). An identity
is an nkey: the client holds the seed and signs the server's challenge, the server knows only
the public key, an environment variable (`$NATS_NKEY_<IDENTITY>`) filled from the Secret in
Kubernetes and from generated files locally. No server holds anything a client could log in
with.

Why each allowance, in JetStream terms (nats-server's JetStream API, ADR-15 for ack subjects):
- replies come back on the identity's own inbox prefix `_INBOX_<name>` (the client is told to
  use it), the only subjects it may subscribe to, so no identity reads another's replies;
- reading a bucket watches it through an ordered (ephemeral) consumer; creating a consumer
  bypasses subscribe permissions, so creation is allowed only on the streams an identity may read,
  and only on the unnamed create subject, where the server refuses a durable name (a push
  consumer's deliver subject is not checked by nats-server at all: docs/bus.md, "Consumers");
- a durable consumer is made by provisioning; its reader may only fetch from it and ack;
- acks and flow-control replies are allowed in both subject forms: `$JS.ACK.<stream>.…` and the
  form with domain and account hash (`$JS.ACK.<domain>.<hash>.<stream>.…`), which later servers
  send, so an upgrade of nats-server does not silently stop acks;
- nobody but provisioning may create or update a stream, a bucket or a durable consumer; nobody
  may purge one, and only provisioning may delete our streams and buckets, which
  `hostaffinity uninstall` does after reading the DRS ownership records (so provisioning also
  reads that bucket).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from hostaffinity.runtime.bus.fleet_layout import FLEET_STREAM
from hostaffinity.runtime.bus.layout import DRS_STREAM, PLACEMENTS_STREAM, TOPOLOGY_STREAM
from hostaffinity.schema import (
    DLQ_STREAM,
    DRS_BUCKET,
    EVENTS_STREAM,
    FLEET_BUCKET,
    FLEET_LEASES_BUCKET,
    HUB_DOMAIN,
    PLACEMENTS_BUCKET,
    TOPOLOGY_BUCKET,
    dlq_subject,
    event_subject,
    jetstream_api,
)

API: Final = "$JS.API"
# The one identity that talks to the fleet hub itself (its fleet rules' leases).
HUB_LEASE_HOLDER: Final = "drs-translator"
# The fleet view's mirror is ours too, on an install that joined a fleet.
OUR_STREAMS: Final = (
    EVENTS_STREAM,
    DLQ_STREAM,
    TOPOLOGY_STREAM,
    DRS_STREAM,
    PLACEMENTS_STREAM,
    FLEET_STREAM,
)


@dataclass(frozen=True)
class Identity:
    """A NATS user: what it is for, and the subjects it may publish and subscribe to."""

    name: str
    purpose: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]

    @property
    def public_key_variable(self) -> str:
        """The server's environment variable holding this identity's public nkey."""
        return "NATS_NKEY_" + self.name.upper().replace("-", "_")

    @property
    def inbox(self) -> str:
        return f"_INBOX_{self.name}"


def _acks(stream: str, consumer: str) -> list[str]:
    """Ack (and nak, term, in-progress) subjects of one consumer, in both subject forms."""
    return [f"$JS.ACK.{stream}.{consumer}.>", f"$JS.ACK.*.*.{stream}.{consumer}.>"]


def _flow_control(stream: str) -> list[str]:
    """Replies to an ordered consumer's flow-control requests, in both subject forms."""
    return [f"$JS.FC.{stream}.>", f"$JS.FC.*.*.{stream}.>"]


def read_stream(stream: str) -> list[str]:
    """Watch or read a stream through ordered consumers, and get single messages.

    Only the create subject without a consumer name: the server refuses a durable name on it
    (JetStream error 10020), so a reader's consumers are ephemeral and go away with it. The
    named (`CREATE.<stream>.<name>[.<filter>]`) and `DURABLE.CREATE` subjects stay provisioning's.
    """
    return [
        f"{API}.STREAM.INFO.{stream}",
        f"{API}.CONSUMER.CREATE.{stream}",
        f"{API}.CONSUMER.INFO.{stream}.*",
        f"{API}.DIRECT.GET.{stream}",
        f"{API}.DIRECT.GET.{stream}.>",
        f"{API}.STREAM.MSG.GET.{stream}",
        *_flow_control(stream),
    ]


def read_bucket(bucket: str) -> list[str]:
    return read_stream(f"KV_{bucket}")


def write_bucket(bucket: str) -> list[str]:
    """Put, create and delete keys (a KV write is a publish on `$KV.<bucket>.<key>`)."""
    return [f"$KV.{bucket}.>"]


def hold_hub_leases(bucket: str) -> list[str]:
    """Read, create, renew and delete keys of one bucket on the fleet hub, in the hub's
    JetStream domain and no other, as hub_leases.py does: the bucket's stream info and its
    last message by subject, and a revision-checked publish on the domain's `$KV` subjects."""
    api = jetstream_api(HUB_DOMAIN)
    return [
        f"{api}.STREAM.INFO.KV_{bucket}",
        f"{api}.STREAM.MSG.GET.KV_{bucket}",
        f"{api}.$KV.{bucket}.>",
    ]


def publish_events(*types: str) -> list[str]:
    """Publish these event types on the events stream (and no others)."""
    return [f"{API}.STREAM.INFO.{EVENTS_STREAM}", *(event_subject(t) for t in types)]


def park_dead_letters(service: str) -> list[str]:
    """Park what its topology watch cannot decode in its own dead-letter subject."""
    return [dlq_subject(service)]


def provision_layout() -> list[str]:
    """Create, update and inspect our streams and buckets; no deletes."""
    allowed = [f"{API}.INFO"]
    for stream in OUR_STREAMS:
        allowed += [
            f"{API}.STREAM.CREATE.{stream}",
            f"{API}.STREAM.UPDATE.{stream}",
            f"{API}.STREAM.INFO.{stream}",
        ]
    return allowed


def remove_layout() -> list[str]:
    """Read the DRS ownership records, then delete our streams and buckets (uninstall)."""
    return [*read_bucket(DRS_BUCKET), *(f"{API}.STREAM.DELETE.{s}" for s in OUR_STREAMS)]


def new_identity(name: str, purpose: str, *allowances: Iterable[str]) -> Identity:
    """An identity allowed `allowances` (each subject once), replies on its own inbox only."""
    publish = tuple(dict.fromkeys(subject for allowance in allowances for subject in allowance))
    return Identity(name, purpose, publish, (f"_INBOX_{name}.>",))


IDENTITIES: Final = (
    new_identity(
        "node-labeller",
        "writes the topology bucket and the placement events",
        read_bucket(TOPOLOGY_BUCKET),
        write_bucket(TOPOLOGY_BUCKET),
        publish_events("vm.moved", "node.placed", "node.labelled", "node.unmatched"),
    ),
    new_identity(
        HUB_LEASE_HOLDER,
        "reads the topology and the fleet view, owns the DRS ownership bucket and its fleet "
        "rules' leases on the hub, reports rule events",
        read_bucket(TOPOLOGY_BUCKET),
        read_bucket(FLEET_BUCKET),
        hold_hub_leases(FLEET_LEASES_BUCKET),
        read_bucket(DRS_BUCKET),
        write_bucket(DRS_BUCKET),
        publish_events("drs.rules.applied", "drs.rule.conflict", "drs.rule.drift", "drs.rule.held"),
        park_dead_letters("drs-translator"),
    ),
    new_identity(
        "admission-webhook",
        "reads the fleet view; reports sampled admission mutations",
        read_bucket(FLEET_BUCKET),
        # Not publish_events: it never waits for the layout (a sample published before the
        # provisioning is dropped), so it needs no stream info.
        [event_subject("pod.mutated")],
    ),
    new_identity(
        "scheduler-extender",
        "reads the topology and the fleet view; reports sampled decisions",
        read_bucket(TOPOLOGY_BUCKET),
        read_bucket(FLEET_BUCKET),
        publish_events("extender.decision"),
        park_dead_letters("scheduler-extender"),
    ),
    new_identity(
        "descheduler",
        "reads the topology, the fleet view and, on taking the Lease, its predecessor's "
        "evictions; reports them; writes the placement summary the fleet hub sources",
        read_bucket(TOPOLOGY_BUCKET),
        read_bucket(FLEET_BUCKET),
        read_stream(EVENTS_STREAM),
        read_bucket(PLACEMENTS_BUCKET),
        write_bucket(PLACEMENTS_BUCKET),
        publish_events("pod.evicted", "vmi.migration.requested"),
        park_dead_letters("descheduler"),
    ),
    new_identity(
        "cli",
        "the operator's hostaffinity command: reads everything, writes nothing",
        read_bucket(TOPOLOGY_BUCKET),
        read_bucket(DRS_BUCKET),
        read_stream(EVENTS_STREAM),
        read_bucket(PLACEMENTS_BUCKET),
        read_bucket(FLEET_BUCKET),
        [f"{API}.STREAM.INFO.{DLQ_STREAM}"],
    ),
    new_identity(
        "provision",
        "creates and updates the JetStream layout; deletes it at uninstall",
        provision_layout(),
        remove_layout(),
    ),
)
IDENTITY_NAMES: Final = tuple(identity.name for identity in IDENTITIES)


def identity(name: str) -> Identity:
    for candidate in IDENTITIES:
        if candidate.name == name:
            return candidate
    raise ValueError(f"no bus identity {name!r}; the identities are {', '.join(IDENTITY_NAMES)}")


def _quoted(subjects: Iterable[str]) -> str:
    return "\n".join(f'          "{subject}"' for subject in subjects)


def read_durable(stream: str, durable: str) -> list[str]:
    """Fetch from and ack one durable consumer someone else provisioned, nothing more (an
    outside subscriber's whole allowance; see bus_subscribers.py)."""
    return [
        f"{API}.CONSUMER.INFO.{stream}.{durable}",
        f"{API}.CONSUMER.MSG.NEXT.{stream}.{durable}",
        *_acks(stream, durable),
    ]


def render_auth_config() -> str:
    """The nats-server `authorization` block for every identity (no anonymous access)."""
    return (
        "# Generated by `hostaffinity bus auth-config` from hostaffinity.cli.bus_access: edit\n"
        "# that table, not this file (a test keeps them equal). Every client must be one of\n"
        "# these nkey users; anonymous connections are refused. The public keys come from the\n"
        "# server's environment (NATS_NKEY_<IDENTITY>).\n"
        + render_authorization([(who, f"${who.public_key_variable}") for who in IDENTITIES])
    )


def render_authorization(users: Iterable[tuple[Identity, str]]) -> str:
    """An `authorization` block of these users, each with its nkey (a public key, or the
    `$VARIABLE` the server's environment fills)."""
    rendered = []
    for who, nkey in users:
        rendered.append(
            f"    # {who.name}: {who.purpose}\n"
            f"    {{\n"
            f"      nkey: {nkey}\n"
            f"      permissions: {{\n"
            f"        publish: {{ allow: [\n{_quoted(who.publish)}\n        ] }}\n"
            f"        subscribe: {{ allow: [\n{_quoted(who.subscribe)}\n        ] }}\n"
            f"      }}\n"
            f"    }}"
        )
    body = "\n".join(rendered)
    return f"authorization {{\n  timeout: 5\n  users: [\n{body}\n  ]\n}}\n"
