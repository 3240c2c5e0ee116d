"""DRS rule and group names: which install of hostaffinity made one, told from the name alone.

Many Kubernetes clusters, each with its own hostaffinity, share one vCenter and the same vSphere
clusters, and run workloads of the same namespace and name (`kube-system/coredns`). Every rule or
group an install creates is therefore named

    hostaffinity-<install>-<kind>-<digest>

`<install>` is the install's token (`install_token` of its cluster identity), `<kind>` what the
object is (`anti`, `together`, `vmgroup`, `hostgroup`, `vmhost`) and `<digest>` 12 hex digits
of a hash of the vSphere cluster and the group of pods it stands for. Releases before 0.2.0 wrote
`hostaffinity-<kind>-<digest>`, with no install: `DrsName.install` is then None (a *legacy*
name, renamed in place by its owner after the upgrade).

A name is at most 76 characters: vCenter keeps inventory names to 80.
"""

import hashlib
import re
from dataclasses import dataclass
from typing import Final

from hostaffinity.schema.drs import DRS_NAME_PREFIX, DrsObjectKind

KIND_IN_NAME: Final[dict[DrsObjectKind, str]] = {
    "vm-anti-affinity": "anti",
    "vm-affinity": "together",
    "vm-group": "vmgroup",
    "host-group": "hostgroup",
    "vm-host": "vmhost",
}
_KIND_OF: Final = {short: kind for kind, short in KIND_IN_NAME.items()}
DIGEST_LENGTH: Final = 12
# The install part of a fleet rule's name: no install's token is ever this word.
FLEET_TOKEN: Final = "fleet"
MAX_TOKEN_LENGTH: Final = 40
_TOKEN_HASH_LENGTH: Final = 8
# A token: lowercase letters, digits and inner dashes, as a DNS label is.
_VALID_TOKEN = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_INVALID_RUN = re.compile(r"[^a-z0-9]+")
# The kind and digest are anchored at the end, so a token may itself contain `-anti-`.
_NAME = re.compile(
    rf"^{re.escape(DRS_NAME_PREFIX)}(?:(?P<install>[a-z0-9][a-z0-9-]*)-)?"
    rf"(?P<kind>{'|'.join(_KIND_OF)})-(?P<digest>[0-9a-f]{{{DIGEST_LENGTH}}})$"
)


def install_token(cluster: str) -> str:
    """The install's part of every DRS name: the cluster identity itself when it is a short
    lowercase DNS label (a `kube-system` Namespace UID is one), else a readable prefix of it and
    a short hash of the whole, so that two identities never share a token by accident. A cluster
    named `fleet` gets the hashed form too: that word names the fleet's rules."""
    if len(cluster) <= MAX_TOKEN_LENGTH and _VALID_TOKEN.match(cluster) and cluster != FLEET_TOKEN:
        return cluster
    digest = hashlib.sha256(cluster.encode("utf-8")).hexdigest()[:_TOKEN_HASH_LENGTH]
    readable = _INVALID_RUN.sub("-", cluster.lower()).strip("-")
    prefix = readable[: MAX_TOKEN_LENGTH - _TOKEN_HASH_LENGTH - 1].strip("-")
    return f"{prefix}-{digest}" if prefix else digest


def drs_name_digest(cluster_moid: str, group_key: str) -> str:
    """The digest of a group of pods in one vSphere cluster: the same group keeps its name
    while its members change, so a new replica edits the rule instead of replacing it."""
    digest = hashlib.sha256(f"{cluster_moid}\x1f{group_key}".encode()).hexdigest()
    return digest[:DIGEST_LENGTH]


@dataclass(frozen=True, slots=True)
class DrsName:
    """A name hostaffinity wrote, taken apart; `install` is None for a legacy name and
    `FLEET_TOKEN` for a fleet group's rule."""

    kind: DrsObjectKind
    install: str | None
    digest: str

    @property
    def fleet(self) -> bool:
        """A fleet group's rule: owned by whichever install holds its lease on the hub."""
        return self.install == FLEET_TOKEN

    def __str__(self) -> str:
        install = "" if self.install is None else f"{self.install}-"
        return f"{DRS_NAME_PREFIX}{install}{KIND_IN_NAME[self.kind]}-{self.digest}"

    def of_install(self, token: str) -> "DrsName":
        """The same object named for `token` (a legacy name's name after its rename)."""
        return DrsName(self.kind, token, self.digest)


def fleet_rule_name(cluster_moid: str, group: str) -> str:
    """The name of a fleet group's VM-VM anti-affinity rule in one vSphere cluster: every install
    derives the same name from the cluster and the group alone."""
    return str(
        DrsName("vm-anti-affinity", FLEET_TOKEN, drs_name_digest(cluster_moid, f"fleet:{group}"))
    )


def parse_drs_name(name: str) -> DrsName | None:
    """The parts of a name hostaffinity writes, or None for any other name (an administrator's,
    or one that merely starts with our prefix)."""
    found = _NAME.match(name)
    if found is None:
        return None
    return DrsName(_KIND_OF[found["kind"]], found["install"], found["digest"])
