"""Who may do what on the fleet hub, and the leaf-node settings of an install that joins it.

The hub is a NATS cluster in JetStream domain `hostaffinity-hub`; each install's bus dials it
as a leaf node (TLS, the install's own nkey) and keeps its own domain
(`hostaffinity-install-<token>`), so the two JetStreams stay apart and reach each other only
through `$JS.<domain>.API` (docs.nats.io, "JetStream on Leaf Nodes"). The hub's sourcing and
the install's mirror are consumers driven across that link; the subjects they use are those of
docs.nats.io "Cross-account subjects" (nats-server 2.15), as seen crossing a link in
tests/integration/test_fleet_hub.py. A leaf connection's permissions on the hub are read from
the hub's side: `publish` is what the install may send in, `subscribe` what the hub sends out.

Least privilege, per install:
- it exports only its placements and topology buckets: the hub may ask its domain for a
  consumer on those two streams and nothing else (no stream API, no events, no DRS records);
  its sources deliver under a prefix of its own (`hostaffinity.fleet.from.<token>`), the only
  delivery subjects it may publish to, so it cannot forge another install's summary;
- it reads only the fleet view: it may ask the hub's domain for a consumer on
  `KV_hostaffinity-fleet` (its mirror) and receives under `hostaffinity.fleet.to.<token>`;
- its drs-translator holds fleet rules' leases: it may read and write keys of the hub's
  `hostaffinity-fleet-leases` (nothing else of the hub's JetStream), and the answers come back
  only on its inbox in this install (`_INBOX_drs-translator.<token>`, NatsSettings.inbox_prefix),
  never another install's;
- the install's side refuses, as well, what the hub should never send it or be sent
  (`deny_imports`/`deny_exports` of its remote): its event and DLQ subjects, KV writes, and
  every JetStream API of its domain but consumer creation.
Left open, and said in docs/fleet.md: replies to consumer creations (`$JSC.R.>`, metadata of
the consumer, never data) cross in both directions for every install; NATS offers account
isolation (an account per install) to close it, at the cost of exports and imports per install.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from hostaffinity.cli.bus_access import (
    HUB_LEASE_HOLDER,
    Identity,
    hold_hub_leases,
    new_identity,
    read_bucket,
    render_authorization,
    write_bucket,
)
from hostaffinity.runtime.bus.fleet_layout import EXPORTED_BUCKETS, FLEET_STREAM, LEASES_STREAM
from hostaffinity.runtime.process.config import fleet_inbox
from hostaffinity.schema import (
    DLQ_SUBJECT_PREFIX,
    EVENTS_SUBJECT_PREFIX,
    FLEET_BUCKET,
    FLEET_LEASES_BUCKET,
    HUB_DOMAIN,
    hub_deliver_prefix,
    install_domain,
    jetstream_api,
    mirror_deliver_prefix,
)

HUB_API: Final = "$JS.API"
# Replies to a consumer creation sent across the link (the server's own reply subjects).
CONSUMER_CREATE_REPLIES: Final = "$JSC.R.>"


def _flow_control(stream: str) -> list[str]:
    return [f"$JS.FC.{stream}.>", f"$JS.FC.*.*.{stream}.>"]


def _consumers_on(domain: str, stream: str) -> list[str]:
    """Create (and remove, when the source or mirror is reset) a stream's sourcing consumer."""
    api = jetstream_api(domain)
    return [
        f"{api}.CONSUMER.CREATE.{stream}",
        f"{api}.CONSUMER.CREATE.{stream}.>",
        f"{api}.CONSUMER.DELETE.{stream}.>",
    ]


@dataclass(frozen=True)
class FleetMember:
    """An install registered on the hub: its name there, its token and its leaf nkey."""

    name: str
    token: str
    public_key: str

    def identity(self) -> Identity:
        """The install's leaf-node user on the hub."""
        exported = [f"KV_{bucket}" for bucket in EXPORTED_BUCKETS]
        sent_out = [
            *(s for stream in exported for s in _consumers_on(install_domain(self.token), stream)),
            *(s for stream in exported for s in _flow_control(stream)),
            CONSUMER_CREATE_REPLIES,
            f"{mirror_deliver_prefix(self.token)}.>",
            f"{fleet_inbox(HUB_LEASE_HOLDER, self.token)}.>",
        ]
        sent_in = [
            *_consumers_on(HUB_DOMAIN, FLEET_STREAM),
            *_flow_control(FLEET_STREAM),
            CONSUMER_CREATE_REPLIES,
            f"{hub_deliver_prefix(self.token)}.>",
            *hold_hub_leases(FLEET_LEASES_BUCKET),
        ]
        return Identity(
            f"install-{self.name}",
            f"install {self.name} (token {self.token}): exports its placements and topology, "
            "mirrors the fleet view, holds fleet rules' leases",
            tuple(sent_in),
            tuple(sent_out),
        )


HUB_IDENTITIES: Final = (
    new_identity(
        "fleet-provision",
        "creates the fleet view, sets its sources to the registered installs and deletes the "
        "keys of installs that left; creates the fleet rule leases bucket with its max age",
        [
            f"{HUB_API}.INFO",
            *(
                f"{HUB_API}.STREAM.{verb}.{stream}"
                for stream in (FLEET_STREAM, LEASES_STREAM)
                for verb in ("CREATE", "UPDATE")
            ),
            f"{HUB_API}.STREAM.INFO.{LEASES_STREAM}",
        ],
        read_bucket(FLEET_BUCKET),
        write_bucket(FLEET_BUCKET),
    ),
    new_identity(
        "fleet-cli", "reads the fleet view on the hub; writes nothing", read_bucket(FLEET_BUCKET)
    ),
)


def render_hub_authorization(hub_keys: dict[str, str], members: list[FleetMember]) -> str:
    """The hub's `authorization` block (installs.conf): its own identities and one leaf user
    per registered install, with literal public keys (none of them is a secret)."""
    users = [(who, hub_keys[who.name]) for who in HUB_IDENTITIES]
    users += [(member.identity(), member.public_key) for member in members]
    return (
        "# Generated by `hostaffinity fleet join` / `fleet leave` from the hub's registry\n"
        "# (hostaffinity.cli.fleet_access): who may use the fleet hub. Installs connect as leaf\n"
        "# nodes; `publish` is what an install may send in, `subscribe` what it is sent.\n"
        + render_authorization(users)
    )


def _quoted(subjects: list[str]) -> str:
    return ", ".join(f'"{subject}"' for subject in subjects)


def install_denials(token: str) -> tuple[list[str], list[str]]:
    """What an install's remote refuses from the hub (imports) and to it (exports), whatever the
    hub's own config says: its own JetStream API but sourcing consumers, its events, its DLQ
    and KV writes."""
    api = jetstream_api(install_domain(token))
    refused_in = [
        f"{api}.STREAM.>",
        f"{api}.DIRECT.>",
        f"{api}.ACCOUNT.>",
        f"{api}.META.>",
        f"{api}.SERVER.>",
        f"{api}.$KV.>",
        f"{api}.$OBJ.>",
        f"{api}.CONSUMER.MSG.>",
        f"{api}.CONSUMER.DURABLE.>",
        "$KV.>",
        f"{EVENTS_SUBJECT_PREFIX}.>",
        f"{DLQ_SUBJECT_PREFIX}.>",
    ]
    refused_out = ["$KV.>", f"{EVENTS_SUBJECT_PREFIX}.>", f"{DLQ_SUBJECT_PREFIX}.>"]
    return refused_in, refused_out


def render_install_leaf(token: str, seed: str, hub_urls: list[str], ca_file: str) -> str:
    """fleet.conf of an install: its remote to the hub (TLS, verified against the hub's CA,
    signed in with the install's seed); included by its nats-server's config."""
    refused_in, refused_out = install_denials(token)
    urls = "\n".join(f'        "{url}"' for url in hub_urls)
    return (
        f"# The fleet hub (`hostaffinity fleet join`, install token {token}): this bus joins it\n"
        "# as a leaf node. Keep this file secret: it holds the install's hub nkey seed.\n"
        "leafnodes {\n"
        "  remotes: [\n"
        "    {\n"
        f"      urls: [\n{urls}\n      ]\n"
        f'      nkey: "{seed}"\n'
        f"      tls {{\n        ca_file: {ca_file}\n        timeout: 5\n      }}\n"
        f"      deny_imports: [{_quoted(refused_in)}]\n"
        f"      deny_exports: [{_quoted(refused_out)}]\n"
        "    }\n"
        "  ]\n"
        "}\n"
    )


def render_install_domain(token: str) -> str:
    """fleet-domain.conf of an install: its JetStream domain (included in the jetstream block)."""
    return f"domain: {install_domain(token)}\n"
