"""How to reach each vCenter: the `vcenters:` items, the record of a service that works with
vCenters, and where the one-vCenter layout's keys went.

Records only (no client, no I/O), so that a service's config module, which builds on them, stays
a leaf its core may import (.importlinter).
"""

from collections.abc import Callable, Mapping
from typing import Annotated, Final, Literal

import msgspec

from hostaffinity.runtime.process.config import LeaderElectedSettings, Seconds, Settings

# 32 bytes as hex, with or without colons between bytes, optionally after `SHA256:`.
THUMBPRINT_PATTERN: Final = r"^(?:[Ss][Hh][Aa]256:)?(?:[0-9A-Fa-f]{2}:?){31}[0-9A-Fa-f]{2}$"


class VCenterSettings(Settings, frozen=True, kw_only=True):
    """How to reach and log in to one vCenter. vcsim speaks plain http; a real vCenter, https."""

    # The vCenter's name in placements, host records, events and DRS ownership records (empty:
    # its host). Every service that talks to this vCenter must give it the same name.
    name: str = ""
    # Where the vCenter listens and whom to log in as (in Kubernetes, from its Secret through
    # HOSTAFFINITY_VCENTERS__<index>__HOST and the like).
    host: str
    username: str
    password: str
    port: Annotated[int, msgspec.Meta(ge=1, le=65535)] = 443
    protocol: Literal["https", "http"] = "https"
    # Verify the server certificate: against `ca_file` when set (a PEM bundle, such as vCenter's
    # VMCA root from https://<vcenter>/certs/download.zip, mounted from a Secret), else against
    # the system CAs. Turning verification off is for simulators only.
    verify_tls: bool = True
    ca_file: str | None = None
    # Or pin the certificate by its SHA-256 thumbprint instead of trusting a CA: 64 hex digits,
    # colons and a `SHA256:` prefix allowed (`--check-config` prints the one vCenter presents).
    thumbprint: Annotated[str, msgspec.Meta(pattern=THUMBPRINT_PATTERN)] | None = None
    # vCenter ends idle sessions after 30 minutes by default; a cheap call keeps ours in use.
    keepalive_seconds: Seconds = 300.0
    # Socket timeout of each SOAP call, and how long a login waits for vCenter to answer at all;
    # a WaitForUpdatesEx long poll must wait for less than this.
    http_timeout_seconds: Seconds = 120.0

    @property
    def known_as(self) -> str:
        """The name this vCenter goes by on the bus: `name`, else its host."""
        return self.name or self.host

    def __repr__(self) -> str:
        """Everything but the password, so settings can be logged."""
        return (
            f"VCenterSettings(name={self.name!r}, host={self.host!r}, port={self.port}, "
            f"username={self.username!r}, protocol={self.protocol!r}, verify_tls={self.verify_tls})"
        )


# Where the one-vCenter layout's keys went: its `vcenter:` section became an item of `vcenters:`.
ONE_VCENTER_KEYS: Final[Mapping[str, str]] = {
    "vcenter": "its settings are now an item of the list `vcenters:` (`vcenters: [{name: ..., "
    "host: ..., username: ..., password: ...}]`; HOSTAFFINITY_VCENTER__HOST becomes "
    "HOSTAFFINITY_VCENTERS__0__HOST)",
    "vcenter_name": "now `name` in that item of `vcenters:` (HOSTAFFINITY_VCENTERS__0__NAME)",
}


class VCenterServiceSettings(LeaderElectedSettings, frozen=True, kw_only=True):
    """The config record of a service that works with vCenters: the shared sections and the
    `vcenters` list (the node-labeller's and the drs-translator's records extend it)."""

    # Every vCenter the service works with, each with its own session (as the vSphere cloud
    # provider's config has one VirtualCenter section per vCenter). Their names (`name`, else
    # `host`) must differ.
    vcenters: Annotated[list[VCenterSettings], msgspec.Meta(min_length=1)]

    def __post_init__(self) -> None:
        """Two vCenters with one name would share placements, host records and DRS records."""
        names = [vcenter.known_as for vcenter in self.vcenters]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(
                f"vcenters: two or more are named {', '.join(repeated)}; give each its own `name`"
            )


def for_each_vcenter(
    check: Callable[[VCenterSettings, str], None],
) -> Callable[[VCenterServiceSettings], None]:
    """A runner check or probe of one vCenter, run on every configured one with the key of its
    item (`vcenters[<index>]`), which its messages name."""

    def run(config: VCenterServiceSettings) -> None:
        for index, vcenter in enumerate(config.vcenters):
            check(vcenter, f"vcenters[{index}]")

    return run
