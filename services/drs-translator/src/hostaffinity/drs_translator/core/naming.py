"""How the planner names the rules and groups it asks for.

Names are `hostaffinity-<install>-<kind>-<digest of the group key>` (the schema's drs_names.py):
the same group of pods keeps its name while its members change, so a new replica edits the rule
instead of replacing it, and two installs on one vCenter never name an object alike. The group
keys below are therefore part of what is in vCenter: changing one renames every rule it names.
A clique's key is also its rule's `reason`, so it reads as what the pods asked for.
"""

from collections.abc import Iterable
from typing import Literal

from hostaffinity.affinity.interpod import AffinityTerm
from hostaffinity.affinity.topology_spread import SpreadConstraint
from hostaffinity.schema import DrsName, DrsObjectKind, drs_name_digest, parse_drs_name

# Whose a name in vCenter is, from the name alone: this install's, one of a release before
# install identities (`legacy`: ours to rename only with a record), another install's, a fleet
# group's (written by whichever install holds its lease on the hub: fleet_rules.py), or none.
NameOwner = Literal["ours", "legacy", "other-install", "fleet", "not-hostaffinity"]


def object_name(kind: DrsObjectKind, cluster_moid: str, group_key: str, install: str) -> str:
    """The stable name of the rule or group that `group_key` stands for in one cluster."""
    return str(DrsName(kind, install, drs_name_digest(cluster_moid, group_key)))


def name_owner(name: str, install: str) -> NameOwner:
    """Whose a rule or group is by its name; being ours still needs an ownership record."""
    parsed = parse_drs_name(name)
    if parsed is None:
        return "not-hostaffinity"
    if parsed.install is None:
        return "legacy"
    if parsed.fleet:
        return "fleet"
    return "ours" if parsed.install == install else "other-install"


def anti_affinity_key(term: AffinityTerm) -> str:
    """The group of the replicas one anti-affinity term keeps apart (its self-selecting seed)."""
    return f"anti:{term.describe()}"


def spread_key(namespace: str, constraint: SpreadConstraint) -> str:
    """The group of a host spread that means one replica per host."""
    return f"topology spread in {namespace}: {constraint.describe()}, one replica per host"


def together_key(vms: Iterable[str]) -> str:
    """The group of VMs required affinity keeps on one host (sorted moids)."""
    return "together:" + ",".join(vms)


def hosts_key(moids: Iterable[str], mandatory: bool) -> str:
    """The VM group, host group and VM-Host rule of one set of hosts asked for."""
    return f"hosts:{','.join(moids)}:{'must' if mandatory else 'should'}"
