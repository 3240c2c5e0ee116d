"""Who owns a fleet group's DRS rule: the value of its lease in `hostaffinity-fleet-leases`, the
hub's bucket (names.fleet_lease_key).

A fleet group's VM-VM anti-affinity rule in one vSphere cluster names the node VMs of several
installs, and exactly one install may write it: the one holding its lease. The holder creates the
key (only when nobody holds it), renews it before the bucket's max age expires it, and deletes it
when it lets go; every write is checked against the revision it read, so two installs never both
hold it. An install that cannot reach the hub cannot renew, stops writing the rule before its
lease can expire, and nobody else may take it until it has: while the hub is away, the rule stays
as it is.
"""

import msgspec


class FleetRuleLease(msgspec.Struct, frozen=True, kw_only=True):
    """The holder of one fleet rule: `holder` its cluster identity, `install` its token; the
    rule is `rule` in vSphere cluster `cluster_moid` of the vCenter with `vcenter_uuid`."""

    holder: str
    install: str
    vcenter_uuid: str
    cluster_moid: str
    group: str
    rule: str
    acquired_at: str
    renewed_at: str
    # How long the hub keeps the key without a renewal (the bucket's max age), as the holder
    # was told; renewals come every third of it.
    duration_seconds: float
